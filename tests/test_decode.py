"""gpudl.kernels.decode and the paged cache's attention: every variant against the float64
reference within the derived bound and against torch's scaled_dot_product_attention (each
sequence's length as a mask, grouped-query heads repeated) at lengths 1, 7 and 100 in one
batch; odd sizes; NaN; poisoned outputs and partials; positions past a length never read
(traced); bad input; on a GPU, long sequences."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

# isort: split
from numba import cuda

from gpudl.kernels import decode, decode_error, decode_reads, decode_tile, paged
from gpudl.kernels.arrays import poisoned

VARIANTS = list(decode.VARIANTS)


def split_of(variant: str) -> int | None:
    """The chunk a variant splits a sequence into (its bound counts it), or None."""
    return decode.SPLIT_SIZE if variant in decode.SPLIT_VARIANTS else None


def batch_of(lengths, heads, kv_heads, d, seed, max_len=None, fill=np.nan):
    """q, k_cache, v_cache, lengths: positions past each length hold ``fill``."""
    rng = np.random.default_rng(seed)
    max_len = max_len or max(lengths)
    q = rng.standard_normal((len(lengths), heads, d)).astype(np.float32)
    k, v = (rng.standard_normal((len(lengths), kv_heads, max_len, d)).astype(np.float32)
            for _ in range(2))
    for b, n in enumerate(lengths):
        k[b, :, n:] = v[b, :, n:] = fill
    return q, k, v, np.array(lengths, np.int32)


def torch_decode(q, k, v, lengths):
    """SDPA with each sequence's length as a mask and the key and value heads repeated."""
    group = q.shape[1] // k.shape[1]
    keys, values = (torch.from_numpy(x).repeat_interleave(group, dim=1) for x in (k, v))
    mask = torch.arange(k.shape[2])[None, None, None, :] < torch.from_numpy(lengths)[
        :, None, None, None]
    return torch.nn.functional.scaled_dot_product_attention(
        torch.from_numpy(q)[:, :, None], keys, values, attn_mask=mask)[:, :, 0].numpy()


def assert_decoded(o, q, k, v, lengths, split_size=None):
    """o within the bound of the float64 reference (NaN exactly where it has NaN) and, where
    the caches hold no NaN, within twice the bound of torch's SDPA."""
    ref = decode.reference(q, k, v, lengths)
    bound = decode_error.error_bound(q, k, v, lengths, split_size)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32 and o.shape == q.shape
    np.testing.assert_array_equal(np.isnan(o), np.isnan(ref), err_msg="NaN")
    with np.errstate(invalid="ignore"):
        ok = (np.abs(o - ref) <= bound) | np.isnan(ref)
    assert ok.all(), f"{(~ok).sum()} outside the bound, first {np.argwhere(~ok)[0]}"
    if not (np.isnan(k).any() or np.isnan(v).any() or np.isnan(q).any()):
        assert (np.abs(o - torch_decode(q, k, v, lengths)) <= 2 * bound).all(), "off SDPA"


def paged_copy(k, v, lengths, block_size):
    """A PagedKVCache holding each sequence's first lengths[b] tokens, sequences 10, 11, ..."""
    blocks = sum(-(-int(n) // block_size) for n in lengths)
    cache = paged.PagedKVCache(blocks, block_size, k.shape[1], k.shape[3])
    for b, n in enumerate(lengths):
        rows = lambda x, b=b, n=n: np.ascontiguousarray(x[b, :, :n].transpose(1, 0, 2))
        cache.append(10 + b, rows(k), rows(v))
    return cache, [10 + b for b in range(len(lengths))]


# ------------------------------------------------------------------------------------------
# Correctness
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", [*VARIANTS, "paged"])
def test_every_variant_equals_torch_sdpa_at_lengths_1_7_and_100(variant):
    q, k, v, lengths = batch_of([1, 7, 100], heads=4, kv_heads=2, d=8, seed=1, fill=1e4)
    if variant == "paged":
        cache, ids = paged_copy(k, v, lengths, block_size=16)
        o = paged.paged_decode_attention(q, cache, ids)
    else:
        o = decode.decode_attention(q, k, v, lengths, variant)
    split = split_of(variant)
    assert_decoded(o, q, k, v, lengths, split)
    # the filler past the lengths (1e4) would dominate any output that had read it
    assert np.abs(o).max() < 10


@settings(max_examples=3, deadline=None, database=None)
@given(lengths=st.lists(st.integers(1, 40), min_size=1, max_size=2),
       group=st.sampled_from([1, 3]), kv_heads=st.integers(1, 2), d=st.integers(1, 20),
       split=st.sampled_from([7, 32, 40]), seed=st.integers(0, 2**32 - 1))
def test_split_kv_at_odd_sizes_and_chunks(lengths, group, kv_heads, d, split, seed):
    q, k, v, lengths = batch_of(lengths, group * kv_heads, kv_heads, d, seed,
                                max_len=max(lengths) + 3)
    o = decode.decode_attention(q, k, v, lengths, "v2_split_kv", split_size=split)
    assert_decoded(o, q, k, v, lengths, split)


def test_a_large_head_and_large_scores():
    # d = 128 (the largest): each thread holds four of q's columns; scores up to about 40
    q, k, v, lengths = batch_of([33], heads=1, kv_heads=1, d=decode.MAX_HEAD_DIM, seed=2)
    q *= 4
    assert_decoded(decode.decode_attention(q, k, v, lengths, "v1_one_block_per_head"),
                   q, k, v, lengths)


def test_the_bound_catches_one_key_left_out():
    q, k, v, lengths = batch_of([40], heads=2, kv_heads=1, d=5, seed=3)
    o = decode.reference(q, k, v, lengths - 1).astype(np.float32)  # as if the last were cut
    with pytest.raises(AssertionError, match="outside the bound"):
        assert_decoded(o, q, k, v, lengths)


# ------------------------------------------------------------------------------------------
# NaN, poisoned outputs, what is never read
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_nan_reaches_the_heads_that_read_it_and_no_other(variant):
    q, k, v, lengths = batch_of([5, 9], heads=4, kv_heads=2, d=3, seed=4)
    q[0, 1, 0] = np.nan  # head 1 of sequence 0
    v[1, 1, 8, 2] = np.nan  # column 2 of cache head 1 of sequence 1: query heads 2 and 3
    o = decode.decode_attention(q, k, v, lengths, variant)
    nan = np.zeros(o.shape, bool)
    nan[0, 1, :] = True
    nan[1, 2:, 2] = True
    np.testing.assert_array_equal(np.isnan(o), nan)
    assert_decoded(o, q, k, v, lengths, split_of(variant))


def test_poisoned_outputs_catch_a_combine_that_skips_a_head(monkeypatch):
    def first_head_only(q, k, v, lengths, o, launch=decode.plain_launch, split_size=32):
        batch, heads, d = q.shape
        splits = -(-k.shape[2] // split_size)
        parts = [poisoned((batch, heads, splits)), poisoned((batch, heads, splits)),
                 poisoned((batch, heads, splits, d))]
        decode.v2_split_kv[(splits, heads, batch), decode_tile.TILE](
            q, k, v, lengths, *parts, np.int32(split_size), np.float32(d**-0.5))
        decode.v2_combine_splits[(1, batch), decode_tile.TILE](*parts, lengths, o,
                                                          np.int32(split_size))

    monkeypatch.setitem(decode.VARIANTS, "broken", first_head_only)
    q, k, v, lengths = batch_of([3], heads=2, kv_heads=1, d=4, seed=5)
    o = decode.decode_attention(q, k, v, lengths, "broken")
    assert not np.isnan(o[0, 0]).any() and np.isnan(o[0, 1]).all()


@pytest.mark.simulator_only
@pytest.mark.parametrize("variant", decode.TRACEABLE)
def test_traced_reads_stop_at_each_length(variant):
    q, k, v, lengths = batch_of([3, 35], heads=2, kv_heads=1, d=3, seed=6, max_len=40)
    traced = decode_reads.traced_cache_reads(variant, q, k, v, lengths)
    assert traced == decode_reads.cache_reads(lengths, heads=2, kv_heads=1, d=3)
    assert max(pos for (_, b, _, pos) in traced if b == 0) == 2


@pytest.mark.simulator_only
def test_the_paged_kernel_reads_only_its_tables_blocks():
    from gpudl.trace import trace

    q, k, v, lengths = batch_of([5, 12], heads=2, kv_heads=1, d=2, seed=7)
    cache, ids = paged_copy(k, v, lengths, block_size=4)
    read: set[tuple[int, int]] = set()

    def traced(kernel, griddim, blockdim, *args):
        run = trace(kernel, griddim, blockdim, *args)
        for a in run.accesses:
            if a.array == "k_blocks" and a.op == "load":
                flat = (a.address - ((run.parameters.index("k_blocks") + 1) << 32)) // a.size
                block, _, offset, _ = np.unravel_index(flat, cache.k_blocks.shape)
                read.add((int(block), int(offset)))

    o = paged.paged_decode_attention(q, cache, ids, launch=traced)
    assert_decoded(o, q, k, v, lengths)
    expected = {(table[p // 4], p % 4) for sid, n in zip(ids, lengths, strict=True)
                for table in [cache.block_table(sid)] for p in range(n)}
    assert read == expected  # sequence 0's 5 tokens in 2 blocks, not the 3 empty slots


# ------------------------------------------------------------------------------------------
# Host and device arrays, bad input
# ------------------------------------------------------------------------------------------


def test_device_arrays_in_give_device_arrays_out():
    q, k, v, lengths = batch_of([2, 4], heads=2, kv_heads=2, d=3, seed=8)
    o = decode.decode_attention(*(cuda.to_device(x) for x in (q, k, v, lengths)),
                                variant="v1_one_block_per_head")
    assert not isinstance(o, np.ndarray)
    assert_decoded(o.copy_to_host(), q, k, v, lengths)


Q = np.ones((2, 4, 3), np.float32)
K = np.ones((2, 2, 6, 3), np.float32)
L = np.array([1, 6], np.int32)


@pytest.mark.parametrize(("args", "kwargs", "error", "match"), [
    ((Q, K, K, L), {"variant": "v3"}, ValueError, r"one of \['v1_one_block_per_head'"),
    ((Q, K, K, L), {"split_size": 0}, ValueError, "split_size must be >= 1"),
    ((Q.astype(np.float64), K, K, L), {}, TypeError, "q must have dtype float32"),
    ((Q, K[0], K, L), {}, ValueError, "k_cache must be 4-D"),
    ((Q, K, np.ones((2, 2, 7, 3), np.float32), L), {}, ValueError, "one shape"),
    ((np.ones((2, 3, 3), np.float32), K, K, L), {}, ValueError,
     r"query heads \(3\) must be a multiple of the cache's kv_heads \(2\)"),
    ((np.ones((3, 4, 3), np.float32), K, K, L), {}, ValueError, "3 sequences but the cache 2"),
    ((np.ones((2, 4, 5), np.float32), K, K, L), {}, ValueError, "head size 5 differs"),
    ((Q, K, K, np.array([1, 7], np.int32)), {}, ValueError,
     r"from 1 to max_len = 6 \(the cache holds no more\), got \[7\]"),
    ((Q, K, K, np.array([-1, 2], np.int32)), {}, ValueError, r"got \[-1\]"),
    ((Q, K, K, np.array([0, 2], np.int32)), {}, ValueError, r"got \[0\]"),
    ((Q, K, K, L.astype(np.int64)), {}, TypeError, "lengths must have dtype int32"),
    ((Q, K, K, [1, 6]), {}, TypeError, "lengths must be a NumPy array"),
    ((Q, K, K, L[:1]), {}, ValueError, r"lengths must have shape \(batch,\) = \(2,\)"),
])
def test_bad_input_gets_a_clear_error(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        decode.decode_attention(*args, **kwargs)


def test_a_head_size_over_the_maximum_is_refused():
    big = np.ones((1, 1, 1, 129), np.float32)
    with pytest.raises(ValueError, match="from 1 to 128, got 129"):
        decode.decode_attention(np.ones((1, 1, 129), np.float32), big, big,
                                np.array([1], np.int32))


def test_a_mix_of_host_and_device_lengths_is_refused():
    with pytest.raises(TypeError, match="lengths is a numba device array but q is not"):
        decode.decode_attention(Q, K, K, cuda.to_device(L))
    with pytest.raises(TypeError, match="q is a numba device array but lengths is not"):
        decode.decode_attention(*(cuda.to_device(x) for x in (Q, K, K)), L)
    with pytest.raises(TypeError, match="lengths is a numba device array but q is not"):
        decode.reference(Q, K, K, cuda.to_device(L))


def test_an_empty_batch_needs_no_launch(monkeypatch):
    monkeypatch.setitem(decode.VARIANTS, "v2_split_kv", lambda *a, **k: pytest.fail("launched"))
    empty = np.ones((0, 2, 3), np.float32)
    o = decode.decode_attention(empty, np.ones((0, 1, 4, 3), np.float32),
                                np.ones((0, 1, 4, 3), np.float32), np.zeros(0, np.int32))
    assert o.shape == (0, 2, 3)


# ------------------------------------------------------------------------------------------
# On a GPU only
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [*VARIANTS, "paged"])
def test_long_sequences_on_the_gpu(variant):
    q, k, v, lengths = batch_of([1, 7, 100, 8192], heads=8, kv_heads=2, d=128, seed=9,
                                fill=1e4)
    if variant == "paged":
        cache, ids = paged_copy(k, v, lengths, block_size=16)
        o = paged.paged_decode_attention(q, cache, ids)
    else:
        o = decode.decode_attention(q, k, v, lengths, variant)
    assert_decoded(o, q, k, v, lengths, split_of(variant))
