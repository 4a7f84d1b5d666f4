"""Mixture of experts' kernels (gpudl.kernels.experts): the top-k router, the gather by expert
and the weighted scatter back against their float64 references and against the torch layer
they compute, at sizes no block fits, outputs poisoned, NaN where the torch twins give NaN and
nowhere else, bad indices refused before any launch."""

import numpy as np
import pytest
import torch
from conftest import EPS32, random_float32
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.checks import is_device_array
from gpudl.kernels import experts as kernels

# isort: split
from numba import cuda

from gpudl.parallel.experts import MOE_CONFIG, MoELayer, combine, moe_batch, route

U32 = EPS32 / 2  # float32's unit roundoff
TINY = 2.0**-125  # past float32's normal range: one rounding there is off by less


def router_bounds(logits, top_k):
    """How far each probability and gate of the kernel may be from the float64 reference:
    the rounding of ``l - max`` (at most ``u |l - max|`` absolute, which exp turns into as
    much relative error), exp's own (2 ulp on a GPU, one rounding on the simulator), the
    ``E - 1`` additions of the sum and the division; a gate adds the errors of its ``k``
    probabilities, their sum and its division."""
    experts = logits.shape[1]
    top = np.nanmax(logits.astype(np.float64), axis=1, keepdims=True)
    relative = U32 * np.abs(logits - top) + EPS32 * (experts + 4)
    probs, choices, gates = kernels.reference_route(logits, top_k)
    gate_relative = 2 * np.take_along_axis(relative, choices, 1).max(1, keepdims=True) + (
        top_k + 2) * EPS32
    return relative * probs + TINY, gate_relative * gates + TINY


@settings(max_examples=15, deadline=None)
@given(tokens=st.integers(1, 70), experts=st.integers(1, 12), data=st.data())
def test_router_matches_the_reference(tokens, experts, data):
    top_k = data.draw(st.integers(1, experts), label="top_k")
    logits = random_float32((tokens, experts), seed=tokens * 31 + experts)
    probs, choices, gates = kernels.route_top_k(logits, top_k)
    exact_probs, exact_choices, exact_gates = kernels.reference_route(logits, top_k)
    assert probs.dtype == gates.dtype == np.float32 and choices.dtype == np.int32
    assert not np.isnan(probs).any() and not np.isnan(gates).any()  # nothing left poisoned
    np.testing.assert_array_equal(choices, exact_choices)  # the same comparisons, exactly
    probs_bound, gates_bound = router_bounds(logits, top_k)
    assert (np.abs(probs - exact_probs) <= probs_bound).all()
    assert (np.abs(gates - exact_gates) <= gates_bound).all()


def test_router_breaks_ties_towards_the_lower_expert():
    logits = np.array([[1, 3, 3, 0], [2, 2, 2, 2], [0, 0, 5, 0]], np.float32)
    _, choices, gates = kernels.route_top_k(logits, 3)
    np.testing.assert_array_equal(choices, [[1, 2, 0], [0, 1, 2], [2, 0, 1]])
    np.testing.assert_array_equal(choices, kernels.reference_route(logits, 3)[1])
    np.testing.assert_allclose(gates[1], [1 / 3] * 3, rtol=4 * EPS32)


def test_router_gives_nan_where_torch_does():
    logits = random_float32((5, 6), seed=3, scale=1.0)
    logits[2, 4] = np.nan
    probs, choices, gates = kernels.route_top_k(logits, 2)
    twin = torch.softmax(torch.from_numpy(logits), -1)
    top = twin.topk(2, -1).values
    twin_gates = top / top.sum(-1, keepdim=True)
    np.testing.assert_array_equal(np.isnan(probs), torch.isnan(twin).numpy())
    np.testing.assert_array_equal(np.isnan(gates), torch.isnan(twin_gates).numpy())
    assert np.isnan(probs[2]).all() and not np.isnan(np.delete(probs, 2, 0)).any()
    assert choices[2, 0] == 4  # the NaN logit first, as torch.topk puts it


@settings(max_examples=15, deadline=None)
@given(tokens=st.integers(1, 60), hidden=st.integers(1, 40), rows=st.integers(0, 90))
def test_permute_gathers_exactly(tokens, hidden, rows):
    rng = np.random.default_rng(tokens * hidden + rows)
    x = random_float32((tokens, hidden), seed=rows)
    sources = rng.integers(0, tokens, rows).astype(np.int32)
    got = kernels.permute_rows(x, sources)
    assert got.shape == (rows, hidden) and not np.isnan(got).any()
    np.testing.assert_array_equal(got, kernels.reference_permute(x, sources))  # a copy


@settings(max_examples=15, deadline=None)
@given(tokens=st.integers(1, 50), hidden=st.integers(1, 40), rows=st.integers(1, 90),
       top_k=st.integers(1, 4))
def test_unpermute_adds_each_tokens_rows_weighted(tokens, hidden, rows, top_k):
    rng = np.random.default_rng(tokens * hidden + rows + top_k)
    values = random_float32((rows, hidden), seed=tokens)
    slots = rng.integers(-1, rows, (tokens, top_k)).astype(np.int32)
    gates = rng.random((tokens, top_k)).astype(np.float32)
    got = kernels.unpermute_rows(values, slots, gates)
    exact = kernels.reference_unpermute(values, slots, gates)
    assert not np.isnan(got).any()
    # k products and k additions in float32: gamma_{2k} times the sum of |terms|
    magnitude = kernels.reference_unpermute(np.abs(values), slots, gates)
    assert (np.abs(got - exact) <= 2 * top_k * U32 * 1.01 * magnitude + TINY).all()


def test_unpermute_gives_nan_where_torchs_index_add_does():
    values = np.ones((4, 3), np.float32)
    values[1, 2] = np.nan
    slots = np.array([[0, 1], [2, -1], [3, -1]], np.int32)
    gates = np.array([[0.5, 0.5], [1.0, np.nan], [1.0, 0.0]], np.float32)  # a dropped NaN gate
    got = kernels.unpermute_rows(values, slots, gates)
    kept = slots >= 0
    token_of = torch.arange(3).repeat_interleave(2)[torch.from_numpy(kept.ravel())]
    twin = torch.zeros(3, 3).index_add(0, token_of, torch.from_numpy(values)[
        torch.from_numpy(slots[kept]).long()] * torch.from_numpy(gates[kept])[:, None])
    np.testing.assert_array_equal(np.isnan(got), torch.isnan(twin).numpy())
    assert np.isnan(got).sum() == 1  # token 0, column 2: from row 1 only


def test_the_kernels_compute_what_the_torch_layer_does():
    layer = MoELayer(MOE_CONFIG)
    x, _ = moe_batch(MOE_CONFIG, 40)
    with torch.no_grad():
        logits = x @ layer.router.T
        routing = route(logits, MOE_CONFIG.top_k, MOE_CONFIG.capacity_factor)
        rows = kernels.permute_rows(x.numpy(), routing.sources.int().numpy())
        np.testing.assert_array_equal(rows, x[routing.sources].numpy())
        out = torch.randn(len(rows), MOE_CONFIG.hidden)
        y = kernels.unpermute_rows(out.numpy(), routing.slots.int().numpy(),
                                   routing.gates.numpy())
        np.testing.assert_allclose(y, combine(out, routing, 40).numpy(), rtol=1e-5,
                                   atol=1e-6)
        _, choices, gates = kernels.route_top_k(logits.numpy(), MOE_CONFIG.top_k)
        np.testing.assert_array_equal(choices, routing.choices.numpy())
        np.testing.assert_allclose(gates, routing.gates.numpy(), rtol=1e-5)


def test_device_arrays_in_device_arrays_out():
    x = random_float32((9, 5), seed=1)
    sources = np.array([8, 0, 3, 3], np.int32)
    rows = kernels.permute_rows(cuda.to_device(x), cuda.to_device(sources))
    assert is_device_array(rows)
    np.testing.assert_array_equal(rows.copy_to_host(), x[sources])
    probs, choices, gates = kernels.route_top_k(cuda.to_device(x), 2)
    assert all(is_device_array(a) for a in (probs, choices, gates))
    np.testing.assert_array_equal(choices.copy_to_host(), kernels.reference_route(x, 2)[1])


def test_no_token_launches_nothing():
    probs, choices, gates = kernels.route_top_k(np.zeros((0, 4), np.float32), 2)
    assert probs.shape == (0, 4) and choices.shape == gates.shape == (0, 2)
    assert kernels.permute_rows(np.ones((3, 2), np.float32), np.zeros(0, np.int32)).shape == (
        0, 2)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: kernels.permute_rows(np.ones((3, 2), np.float32), np.array([0, 3], np.int32)),
     ValueError, r"sources must be from 0 to 2 \(one of the 3 tokens\), got \[3\]"),
    (lambda: kernels.permute_rows(np.ones((3, 2), np.float32), np.array([-1], np.int32)),
     ValueError, "sources must be from 0 to 2"),
    (lambda: kernels.permute_rows(np.ones((3, 2), np.float32), np.array([0], np.int64)),
     TypeError, "sources must have dtype int32"),
    (lambda: kernels.permute_rows(cuda.to_device(np.ones((3, 2), np.float32)),
                                  np.array([0], np.int32)), TypeError, "not a mix"),
    (lambda: kernels.unpermute_rows(np.ones((3, 2), np.float32), np.array([[3]], np.int32),
                                    np.ones((1, 1), np.float32)),
     ValueError, r"slots must be from -1 to 2 \(one of the 3 rows\)"),
    (lambda: kernels.unpermute_rows(np.ones((3, 2), np.float32), np.array([[-2]], np.int32),
                                    np.ones((1, 1), np.float32)), ValueError, "from -1 to 2"),
    (lambda: kernels.unpermute_rows(np.ones((3, 2), np.float32), np.zeros((2, 2), np.int32),
                                    np.ones((2, 1), np.float32)), ValueError, "one shape"),
    (lambda: kernels.route_top_k(np.ones((3, 4), np.float32), 5), ValueError,
     "top_k must be <= 4"),
    (lambda: kernels.route_top_k(np.ones((3, 0), np.float32), 1), ValueError,
     "one column per expert"),
    (lambda: kernels.route_top_k(np.ones((3, 4)), 1), TypeError, "logits must have dtype"),
])
def test_bad_input_is_refused_before_a_launch(call, error, match):
    with pytest.raises(error, match=match):
        call()
