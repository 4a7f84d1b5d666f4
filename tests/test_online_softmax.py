"""The online-softmax rule written once (gpudl.kernels.online_softmax): merging partials gives the
partial of the union of their keys, in any order, on NumPy and torch alike; and Chapter 8's
reference, Chapter 9's split-KV reference and Chapter 11's ring attention all merge with it."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.kernels import attention, decode, online_softmax
from gpudl.kernels.online_softmax import Partial
from gpudl.parallel.context import ContextJob, context_worker
from gpudl.parallel.spawn import run_under_torchrun


def _scores(rng, rows, keys, masked=()):
    x = rng.standard_normal((2, rows, keys)) * 3
    for row, key in masked:
        x[:, row, key] = -np.inf
    return x


@settings(max_examples=30, deadline=None)
@given(keys=st.integers(2, 40), cut=st.integers(1, 39), seed=st.integers(0, 99))
def test_merging_two_partials_is_the_partial_of_all_the_keys(keys, cut, seed):
    cut = min(cut, keys - 1)
    rng = np.random.default_rng(seed)
    x, v = _scores(rng, 3, keys), rng.standard_normal((2, keys, 4))
    whole = online_softmax.partial(x, v)
    parts = [online_softmax.partial(x[..., :cut], v[:, :cut]),
             online_softmax.partial(x[..., cut:], v[:, cut:])]
    for merged in (online_softmax.merge(*parts), online_softmax.merge(*parts[::-1])):
        o, lse = online_softmax.finish(merged)
        o_whole, lse_whole = online_softmax.finish(whole)
        assert np.abs(o - o_whole).max() < 1e-12 and np.abs(lse - lse_whole).max() < 1e-12


def test_merging_is_associative_and_the_same_on_numpy_and_torch():
    rng = np.random.default_rng(1)
    x, v = _scores(rng, 4, 30), rng.standard_normal((2, 30, 5))
    parts = [online_softmax.partial(x[..., i:i + 10], v[:, i:i + 10]) for i in (0, 10, 20)]
    left = online_softmax.merge(online_softmax.merge(parts[0], parts[1]), parts[2])
    right = online_softmax.merge(parts[0], online_softmax.merge(parts[1], parts[2]))
    as_torch = [Partial(*map(torch.from_numpy, p)) for p in parts]
    torch_merged = online_softmax.merge(online_softmax.merge(*as_torch[:2]), as_torch[2])
    for a, b in ((left, right), (left, Partial(*(t.numpy() for t in torch_merged)))):
        for one, other in zip(online_softmax.finish(a), online_softmax.finish(b), strict=True):
            assert np.abs(one - other).max() < 1e-12
    assert isinstance(torch_merged.m, torch.Tensor)


def test_a_row_that_sees_no_key_changes_nothing_when_merged():
    rng = np.random.default_rng(2)
    x, v = _scores(rng, 2, 6), rng.standard_normal((2, 6, 3))
    hidden = np.full_like(x, -np.inf)  # every key masked
    empty = online_softmax.partial(hidden, v)
    assert (empty.m == -np.inf).all() and (empty.l == 0).all() and (empty.acc == 0).all()
    seen = online_softmax.partial(x, v)
    merged = online_softmax.merge(empty, seen)
    for got, want in zip(merged, seen, strict=True):
        assert np.array_equal(got, want)


def test_a_nan_score_makes_its_row_nan_and_no_other():
    rng = np.random.default_rng(3)
    x, v = _scores(rng, 3, 8), rng.standard_normal((2, 8, 3))
    x[0, 1, 5] = np.nan
    merged = online_softmax.merge(online_softmax.partial(x[..., :4], v[:, :4]),
                                  online_softmax.partial(x[..., 4:], v[:, 4:]))
    o, lse = online_softmax.finish(merged)
    assert np.isnan(o[0, 1]).all() and np.isnan(lse[0, 1])
    o[0, 1], lse[0, 1] = 0, 0
    assert not np.isnan(o).any() and not np.isnan(lse).any()


# --- the callers: one rule for Chapters 8, 9 and 11 --------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("tile", [1, 5, 16, 64])
def test_chapter_8_reference_in_the_fused_order_equals_the_formula(causal, tile):
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((2, 37, 8)) for _ in range(3))
    o, lse = attention.reference(q, k, v, causal)
    o_online, lse_online = attention.reference_online(q, k, v, causal, tile)
    assert np.abs(o - o_online).max() < 1e-13 and np.abs(lse - lse_online).max() < 1e-13


@pytest.mark.parametrize("split_size", [1, 7, 32, 64])
def test_chapter_9_split_kv_reference_equals_the_formula(split_size):
    rng = np.random.default_rng(5)
    q = rng.standard_normal((3, 4, 8))
    k_cache, v_cache = (rng.standard_normal((3, 2, 50, 8)) for _ in range(2))
    k_cache[0, :, 5:] = np.nan  # past the first sequence's length: never read
    lengths = np.array([5, 17, 50], np.int32)
    got = decode.reference_split_kv(q, k_cache, v_cache, lengths, split_size)
    assert np.abs(got - decode.reference(q, k_cache, v_cache, lengths)).max() < 1e-13


def test_the_kernels_split_kv_partials_agree_with_the_reference_of_their_combine():
    rng = np.random.default_rng(6)
    q = rng.standard_normal((1, 2, 8)).astype(np.float32)
    k_cache, v_cache = (rng.standard_normal((1, 1, 70, 8)).astype(np.float32) for _ in range(2))
    lengths = np.array([70], np.int32)
    o = decode.decode_attention(q, k_cache, v_cache, lengths, "v2_split_kv", split_size=32)
    assert np.abs(o - decode.reference_split_kv(q, k_cache, v_cache, lengths, 32)).max() < 1e-5


def test_chapters_8_9_and_11_merge_with_the_one_rule(monkeypatch):
    calls = []
    merge = online_softmax.merge

    def counted(a, b):
        calls.append(type(a.m).__module__.split(".")[0])
        return merge(a, b)

    monkeypatch.setattr(online_softmax, "merge", counted)
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((1, 40, 4)) for _ in range(3))
    attention.reference_online(q, k, v, tile=16)
    assert calls == ["numpy"] * 2  # three tiles
    decode.reference_split_kv(q[:, :2], k[None], v[None], np.array([40], np.int32), 16)
    assert calls == ["numpy"] * 4  # three chunks
    job = ContextJob(*(torch.from_numpy(x) for x in (q, k, v)), causal=True)
    run_under_torchrun(context_worker, [job])  # ring attention, one rank in this process
    assert calls[4:] == ["torch"] * 3  # two pieces: three pairs of them are visible
