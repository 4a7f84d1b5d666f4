"""gpudl.kernels.attention: both variants against the float64 reference within the derived
bound and against torch's scaled_dot_product_attention, causal and not, at sequence lengths
and head sizes that are not multiples of the tile; NaN, poisoned outputs, bad input, host and
device arrays; the bytes each variant moves, traced on the simulator, equal to the formula;
the fused kernel's PTX; on a GPU, long sequences."""

import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

# isort: split
from numba import cuda

from gpudl import ptx
from gpudl.kernels import attention, attention_error

VARIANTS = list(attention.VARIANTS)
#: The float32 variants, held to the float32 bound; the float16 one(s) to the float16 bound.
FLOAT32 = [v for v in VARIANTS if attention.precision(v) == "float32"]
FLOAT16 = [v for v in VARIANTS if attention.precision(v) == "float16"]


def qkv(heads: int, s: int, d: int, seed: int, scale: float = 1.0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(scale * rng.standard_normal((heads, s, d))).astype(np.float32) for _ in range(3)]


def assert_within_bound(o, lse, q, k, v, causal: bool) -> None:
    """o and lse within error_bound of the float64 reference (NaN exactly where it has NaN),
    and o within twice the bound of torch's SDPA (both are within the bound of the exact
    result, if torch's float32 kernel rounds no worse than the kernels here)."""
    ref_o, ref_lse = attention.reference(q, k, v, causal)
    bound_o, bound_lse = attention_error.error_bound(q, k, v, causal)
    for got, ref, bound, name in ((o, ref_o, bound_o, "o"), (lse, ref_lse, bound_lse, "lse")):
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert got.shape == ref.shape
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref), err_msg=f"{name}: NaN")
        with np.errstate(invalid="ignore"):
            ok = (np.abs(got - ref) <= bound) | np.isnan(ref)
        assert ok.all(), f"{name}: {(~ok).sum()} outside the bound, first {np.argwhere(~ok)[0]}"
    if not np.isnan(ref_o).any():
        expected = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(x) for x in (q, k, v)), is_causal=causal).numpy()
        assert (np.abs(o - expected) <= 2 * bound_o).all(), "o is off torch's SDPA"


# ------------------------------------------------------------------------------------------
# Correctness
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", FLOAT32)
@pytest.mark.parametrize(("heads", "s", "d", "causal"), [(2, 17, 5, False), (1, 20, 17, True)])
def test_variants_match_the_reference_and_torch(variant, heads, s, d, causal):
    q, k, v = qkv(heads, s, d, seed=s + d)
    o, lse = attention.forward(q, k, v, causal, variant)
    assert_within_bound(o, lse, q, k, v, causal)
    if causal:  # row 0 sees key 0 only: weight exp(0) / 1 = 1 exactly, in any variant
        np.testing.assert_array_equal(o[:, 0], v[:, 0])


@settings(max_examples=2, deadline=None, database=None)
@given(s=st.integers(1, 24), d=st.integers(1, 20), causal=st.booleans(),
       scale=st.sampled_from([1e-2, 1.0, 4.0]), seed=st.integers(0, 2**32 - 1))
def test_fused_on_random_shapes_and_scales(s, d, causal, scale, seed):
    q, k, v = qkv(1, s, d, seed, scale)
    assert_within_bound(*attention.forward(q, k, v, causal), q, k, v, causal)


def test_fused_with_a_large_head_and_large_scores():
    # d = 128 (the largest), scores up to about 60: online softmax rescales many times
    q, k, v = qkv(1, 18, attention.MAX_HEAD_DIM, seed=3)
    q *= 8
    assert_within_bound(*attention.forward(q, k, v, True), q, k, v, True)


def assert_within_float16_bound(o, lse, q, k, v, causal: bool) -> None:
    """float16 o and float32 lse within error_bound(..., "float16") of the float64 reference
    of the float16 inputs, and o within twice it of torch's SDPA in float32 on them."""
    wide = [x.astype(np.float64) for x in (q, k, v)]
    ref_o, ref_lse = attention.reference(*wide, causal)
    bound_o, bound_lse = attention_error.error_bound(*wide, causal, "float16")
    assert o.dtype == np.float16 and lse.dtype == np.float32
    for got, ref, bound in ((o, ref_o, bound_o), (lse, ref_lse, bound_lse)):
        assert (np.abs(got - ref) <= bound).all()
    expected = torch.nn.functional.scaled_dot_product_attention(
        *(torch.from_numpy(x.astype(np.float32)) for x in (q, k, v)), is_causal=causal)
    assert (np.abs(o - expected.numpy()) <= 2 * bound_o).all(), "o is off torch's SDPA"


@pytest.mark.parametrize("variant", FLOAT16)
@pytest.mark.parametrize(("heads", "s", "d", "causal"), [(2, 17, 5, False), (1, 37, 64, True),
                                                         (1, 20, 17, True)])
def test_float16_variants_match_the_reference_within_the_float16_bound(variant, heads, s, d,
                                                                       causal):
    q, k, v = (x.astype(np.float16) for x in qkv(heads, s, d, seed=s + d, scale=2.0))
    assert_within_float16_bound(*attention.forward(q, k, v, causal, variant), q, k, v, causal)
    with pytest.raises(TypeError, match="q must have dtype float16, got float32"):
        attention.forward(*(x.astype(np.float32) for x in (q, k, v)), causal, variant)


def test_the_float16_bound_doubles_the_float32_one_and_adds_the_roundings_to_float16():
    q, k, v = qkv(1, 9, 4, seed=5)
    b32_o, b32_lse = attention_error.error_bound(q, k, v, True)
    b16_o, b16_lse = attention_error.error_bound(q, k, v, True, "float16")
    np.testing.assert_array_equal(b16_lse, 2 * b32_lse)
    o = attention.reference(q, k, v, True)[0]
    assert (b16_o >= 2 * b32_o + 2 * 2**-11 * 2 * np.abs(o)).all()


def test_the_bound_catches_one_key_left_out():
    q, k, v = qkv(1, 17, 6, seed=4)
    o, lse = attention.forward(q, k, v)
    assert_within_bound(o, lse, q, k, v, False)
    ref_without_last, _ = attention.reference(q, k[:, :16], v[:, :16])  # as if a tile were cut
    with pytest.raises(AssertionError, match="outside the bound"):
        assert_within_bound(ref_without_last.astype(np.float32), lse, q, k, v, False)


# ------------------------------------------------------------------------------------------
# NaN and poisoned outputs
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
# the simulator runs the kernels' scalar maths in Python, which warns on NaN - NaN
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_nan_propagates_as_in_the_reference(variant):
    q, k, v = qkv(1, 18, 4, seed=6)
    q[0, 2, 1] = np.nan  # all of row 2
    k[0, 9, 0] = np.nan  # all of rows 9 and later (causal: the rows that see key 9)
    v[0, 5, 3] = np.nan  # column 3 of rows 5 and later
    if variant in FLOAT16:
        o, lse = attention.forward(*(x.astype(np.float16) for x in (q, k, v)), True, variant)
        whole_rows = np.isin(np.arange(18), [2, *range(9, 18)])
        np.testing.assert_array_equal(np.isnan(o[0]).all(-1), whole_rows)
        np.testing.assert_array_equal(np.isnan(lse[0]), whole_rows)
        np.testing.assert_array_equal(np.isnan(o[0, :, 3]), whole_rows | (np.arange(18) >= 5))
        return
    o, lse = attention.forward(q, k, v, True, variant)
    whole_rows = np.isin(np.arange(18), [2, *range(9, 18)])
    np.testing.assert_array_equal(np.isnan(o[0]).all(-1), whole_rows)
    np.testing.assert_array_equal(np.isnan(lse[0]), whole_rows)
    np.testing.assert_array_equal(np.isnan(o[0, :, 3]), whole_rows | (np.arange(18) >= 5))
    assert_within_bound(o, lse, q, k, v, True)


def test_a_nan_where_the_reference_has_none_fails_the_check():
    q, k, v = qkv(1, 5, 3, seed=7)
    o, lse = attention.reference(q, k, v)
    o = o.astype(np.float32)
    o[0, 1, 2] = np.nan
    with pytest.raises(AssertionError, match="o: NaN"):
        assert_within_bound(o, lse.astype(np.float32), q, k, v, False)


def test_poisoned_outputs_catch_a_launcher_that_skips_a_block(monkeypatch):
    def last_block_skipped(q, k, v, o, lse, causal, launch=None):
        heads, s, d = q.shape
        attention.fused_kernel(d, causal)[
            (s // attention.TILE, heads), (attention.TILE, attention.TILE)
        ](q, k, v, o, lse, np.float32(d**-0.5))

    monkeypatch.setitem(attention.VARIANTS, "broken", last_block_skipped)
    q, k, v = qkv(1, 20, 2, seed=8)
    o, lse = attention.forward(q, k, v, variant="broken")
    assert np.isnan(o[0, 16:]).all() and not np.isnan(o[0, :16]).any()
    assert np.isnan(lse[0, 16:]).all()
    with pytest.raises(AssertionError):
        assert_within_bound(o, lse, q, k, v, False)


# ------------------------------------------------------------------------------------------
# Host and device arrays, empty inputs, bad input
# ------------------------------------------------------------------------------------------


def test_device_arrays_in_give_device_arrays_out_and_are_left_alone():
    q, k, v = qkv(1, 9, 3, seed=9)
    arrays = [cuda.to_device(x) for x in (q, k, v)]
    o, lse = attention.forward(*arrays, causal=True)
    assert not isinstance(o, np.ndarray) and hasattr(lse, "copy_to_host")
    assert_within_bound(o.copy_to_host(), lse.copy_to_host(), q, k, v, True)
    for device, host in zip(arrays, (q, k, v), strict=True):
        np.testing.assert_array_equal(device.copy_to_host(), host)


@pytest.mark.parametrize("shape", [(0, 5, 3), (2, 0, 3)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_empty_inputs_need_no_launch(monkeypatch, shape, variant):
    monkeypatch.setitem(attention.VARIANTS, variant, lambda *args: pytest.fail("launched"))
    x = np.ones(shape, attention.precision(variant))
    o, lse = attention.forward(x, x, x, variant=variant)
    assert o.shape == shape and lse.shape == shape[:2]
    assert o.dtype == x.dtype and lse.dtype == np.float32


GOOD = np.ones((2, 5, 4), np.float32)


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((GOOD.astype(np.float64), GOOD, GOOD), {}, TypeError, "q must have dtype float32"),
        ((GOOD, GOOD[0], GOOD), {}, ValueError, "k must be 3-D, got 2-D"),
        ((GOOD, GOOD, GOOD.tolist()), {}, TypeError, "v must be a NumPy array"),
        ((GOOD, GOOD, np.ones((2, 10, 4), np.float32)[:, ::2]), {}, ValueError, "contiguous"),
        ((GOOD, np.ones((2, 6, 4), np.float32), GOOD), {}, ValueError,
         r"one shape \(heads, s, d\), got \(2, 5, 4\), \(2, 6, 4\)"),
        ((np.ones((1, 3, 0), np.float32),) * 3, {}, ValueError, "from 1 to 128, got 0"),
        ((np.ones((1, 3, 129), np.float32),) * 3, {}, ValueError, "from 1 to 128, got 129"),
        ((GOOD, GOOD, GOOD), {"causal": 1}, TypeError, "causal must be a bool, got int"),
        ((GOOD, GOOD, GOOD), {"variant": "v3"}, ValueError, r"one of \['v1_three_kernels'"),
    ],
)
def test_bad_input_gets_a_clear_error(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        attention.attention(*args, **kwargs)


def test_a_mix_of_host_and_device_arrays_is_refused():
    with pytest.raises(TypeError, match="k is a numba device array but q is not"):
        attention.attention(GOOD, cuda.to_device(GOOD), GOOD)


# ------------------------------------------------------------------------------------------
# Bytes moved
# ------------------------------------------------------------------------------------------


@pytest.mark.simulator_only
@pytest.mark.parametrize(("variant", "causal"), [("v1_three_kernels", False),
                                                 ("v1_three_kernels", True),
                                                 ("v2_fused", False), ("v2_fused", True)])
def test_traced_bytes_equal_the_formula(variant, causal):
    heads, s, d = 1, 17, 2
    traced = attention.traced_traffic(variant, *qkv(heads, s, d, seed=10), causal=causal)
    assert traced == attention.traffic(variant, heads, s, d, causal)


def test_the_formula_by_hand():
    # s = 20, d = 3, 2 tiles of 16 per side, one head, in float32 values:
    # v1: q, k 2*20*3 each, S 400 + 1,200, P 400 + 400, v 120, o 60, lse 20
    v1 = attention.traffic("v1_three_kernels", 1, 20, 3)
    assert sum(v1.values()) == 4 * (120 + 120 + 1600 + 800 + 120 + 60 + 20)
    # v2: q 60, k and v 2*20*3 each (causal: (16 + 20) * 3), o 60, lse 20
    assert sum(attention.traffic("v2_fused", 1, 20, 3).values()) == 4 * (60 + 240 + 80)
    assert sum(attention.traffic("v2_fused", 1, 20, 3, True).values()) == 4 * (60 + 216 + 80)
    assert attention.traffic("v2_fused", 3, 20, 3)[("q", "load")] == 3 * 4 * 60
    with pytest.raises(ValueError, match="variant must be one of"):
        attention.traffic("v9", 1, 2, 3)


def test_the_fused_kernel_writes_no_s_by_s_matrix():
    for s in (1024, 4096):
        v1, v2 = (
            attention.traffic("v1_three_kernels", 8, s, 64),
            attention.traffic("v2_fused", 8, s, 64),
        )
        assert not any(name in ("scores", "probs") for name, _ in v2)
        assert sum(v1.values()) - sum(v2.values()) >= 4 * 8 * 9 * s * s


# ------------------------------------------------------------------------------------------
# PTX: the fused kernel compiles for sm_80 and sm_90 in float32 only
# ------------------------------------------------------------------------------------------

F3 = "float32[:, :, ::1]"


@pytest.mark.compiler
def test_kernel_ptx_has_no_float64_and_assembles():
    # The simulator accepts shapes Numba cannot compile (TILE + 1 written in a kernel) and
    # float64 constants: compiling for a GPU catches both.
    codes = ptx.compile_many([
        ("gpudl.kernels.attention", "fused_kernel",
         f"void({F3}, {F3}, {F3}, {F3}, float32[:, ::1], float32)", (64, True)),
        ("gpudl.kernels.attention_v1", "v1_scores",
         f"void({F3}, {F3}, {F3}, float32, boolean)", None),
    ], (9, 0))
    for code in codes:
        assert ".target sm_90" in code and "bar.sync" in code
        assert not re.search(r"\.f64\b", code), "float64 arithmetic in a kernel"
        try:
            report = ptx.ptxas(code, (9, 0))
        except RuntimeError as error:
            if "no ptxas" in str(error):
                pytest.skip("no ptxas here")
            raise
        assert "spill" not in report or "0 bytes spill" in report


# ------------------------------------------------------------------------------------------
# On a GPU only
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", FLOAT32)
@pytest.mark.parametrize(("s", "d", "causal"), [(1000, 64, True), (513, 127, False)])
def test_long_sequences_on_the_gpu(variant, s, d, causal):
    q, k, v = qkv(4, s, d, seed=11)
    assert_within_bound(*attention.forward(q, k, v, causal, variant), q, k, v, causal)


# ------------------------------------------------------------------------------------------
# The Triton backward pass (FlashAttention-2), against torch's autograd of SDPA
# ------------------------------------------------------------------------------------------


def sdpa_gradients(q, k, v, do, causal: bool) -> list[np.ndarray]:
    """dq, dk, dv of torch's scaled_dot_product_attention in float64, by autograd."""
    tq, tk, tv = (torch.from_numpy(x.astype(np.float64)).requires_grad_() for x in (q, k, v))
    out = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=causal)
    out.backward(torch.from_numpy(do.astype(np.float64)))
    return [t.grad.numpy() for t in (tq, tk, tv)]


@pytest.mark.triton
@pytest.mark.parametrize(("heads", "s", "d", "causal"), [(2, 17, 5, False), (1, 20, 17, True),
                                                         (1, 37, 64, True), (3, 33, 16, False)])
def test_the_triton_backward_equals_torch_s_gradients_within_chapter_8_s_bound(heads, s, d,
                                                                               causal):
    from gpudl.kernels.tiles.attention_backward import flash_backward
    from gpudl.solutions.ch08 import backward_error_bound

    q, k, v, do = qkv(heads, s, d, seed=s + d) + qkv(heads, s, d, seed=s + d + 1)[:1]
    o, lse = attention.forward(q, k, v, causal, "v3_triton_flash")
    grads = flash_backward(q, k, v, o, do, lse, causal)
    bounds = backward_error_bound(q, k, v, o, do, causal)
    for name, got, ref, bound in zip("qkv", grads, sdpa_gradients(q, k, v, do, causal), bounds,
                                     strict=True):
        assert got.dtype == np.float32 and got.shape == q.shape
        assert (np.abs(got - ref) <= bound).all(), f"d{name} outside the bound"


@pytest.mark.triton
def test_the_triton_backward_takes_device_arrays_and_refuses_bad_ones():
    from gpudl.kernels.tiles.attention_backward import flash_backward

    q, k, v, do = qkv(1, 9, 3, seed=12) + qkv(1, 9, 3, seed=13)[:1]
    o, lse = attention.forward(q, k, v, False, "v3_triton_flash")
    host = flash_backward(q, k, v, o, do, lse)
    device = flash_backward(*(cuda.to_device(x) for x in (q, k, v, o, do, lse)))
    for a, b in zip(host, device, strict=True):
        np.testing.assert_array_equal(a, b.copy_to_host())
    with pytest.raises(ValueError, match=r"lse must have shape \(1, 9\), got \(1, 8\)"):
        flash_backward(q, k, v, o, do, lse[:, :8])
    with pytest.raises(TypeError, match="do must have dtype float32"):
        flash_backward(q, k, v, o, do.astype(np.float16), lse)
    with pytest.raises(TypeError, match="numba device array"):
        flash_backward(q, cuda.to_device(k), v, o, do, lse)
    with pytest.raises(TypeError, match="causal must be a bool"):
        flash_backward(q, k, v, o, do, lse, causal=None)
    empty = np.ones((0, 4, 3), np.float32)
    assert all(g.shape == empty.shape for g in flash_backward(*[empty] * 5, np.ones((0, 4),
                                                                                   np.float32)))
