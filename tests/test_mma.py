"""gpudl.kernels.mma and gpudl.kernels.tensor_core_matmul: the fragment layout against the PTX
ISA's formulas, one warp-wide mma (the simulator's shim, or the GPU's tensor cores) against
NumPy, the PTX for sm_80 (mma.sync), bf16 packing on the device against torch, both
tensor-core matmuls within their bound at sizes that are not multiples of any tile, NaN,
poisoned outputs and bad input."""

import re

import numpy as np
import pytest
import torch

# isort: split
from numba import cuda

from gpudl import ptx
from gpudl.kernels import mma, tensor_core_matmul

VARIANTS = list(tensor_core_matmul.VARIANTS)


def random(shape: tuple[int, int], seed: int, scale: float = 1.0) -> np.ndarray:
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float32)


# ------------------------------------------------------------------------------------------
# The layout, and one instruction
# ------------------------------------------------------------------------------------------


def test_fragments_follow_the_ptx_isa_formulas():
    # PTX ISA, mma.m16n8k16 with .bf16: element i (0..7) of A's registers sits at row
    # groupID + 8 * ((i // 2) % 2), column 2 * threadID_in_group + i % 2 + 8 * (i // 4); of
    # B's (0..3) at row 2 * threadID_in_group + i % 2 + 8 * (i // 2), column groupID; C's
    # (0..3) at row groupID + 8 * (i // 2), column 2 * threadID_in_group + i % 2.
    a, b, c = random((16, 16), 1), random((16, 8), 2), random((16, 8), 3)
    a_bf, b_bf = mma.bf16_round(a), mma.bf16_round(b)
    for lane, (a_w, b_w, c_v) in enumerate(mma.fragments(a, b, c)):
        g, t = lane // 4, lane % 4
        a_vals, b_vals = mma._unpack(a_w), mma._unpack(b_w)
        for i in range(8):
            assert a_vals[i] == a_bf[g + 8 * ((i // 2) % 2), 2 * t + i % 2 + 8 * (i // 4)]
        for i in range(4):
            assert b_vals[i] == b_bf[2 * t + i % 2 + 8 * (i // 2), g]
            assert c_v[i] == c[g + 8 * (i // 2), 2 * t + i % 2]


def test_one_warp_mma_matches_numpy_within_its_bound():
    # On the simulator this checks the shim (and warp_mma's loads) against the layout; on a
    # GPU (compute capability 8.0+), the tensor cores themselves.
    a, b, c = random((16, 16), 4), random((16, 8), 5), random((16, 8), 6)
    d = mma.mma_tile(a, b, c)
    assert d.dtype == np.float32 and d.shape == (16, 8)
    assert (np.abs(d - mma.reference(a, b, c)) <= mma.error_bound(a, b, c)).all()
    # One input moved by one place would break it: the layout is what is tested.
    assert not (np.abs(d - mma.reference(a, b[:, ::-1], c)) <= mma.error_bound(a, b, c)).all()


def test_one_warp_mma_is_exact_on_small_integers():
    a = (np.arange(256).reshape(16, 16) % 7 - 3).astype(np.float32)
    b = (np.arange(128).reshape(16, 8) % 5 - 2).astype(np.float32)
    c = np.arange(128, dtype=np.float32).reshape(16, 8)
    np.testing.assert_array_equal(mma.mma_tile(a, b, c), a @ b + c)


def test_mma_tile_rejects_bad_input():
    good = np.zeros((16, 16), np.float32)
    with pytest.raises(ValueError, match=r"b must have shape \(16, 8\), got \(16, 16\)"):
        mma.mma_tile(good, good, np.zeros((16, 8), np.float32))
    with pytest.raises(TypeError, match="a must have dtype float32, got float64"):
        mma.mma_tile(good.astype(np.float64), good[:, :8], good[:, :8])
    with pytest.raises(TypeError, match="c must be a NumPy array, got list"):
        mma.mma_tile(good, good[:, :8].copy(), [[0.0] * 8] * 16)


@pytest.mark.simulator_only
def test_the_shim_refuses_a_partial_warp():
    with pytest.raises(Exception, match="needs all 32 lanes"):
        mma.warp_mma[1, 16](*(cuda.to_device(x) for x in (
            np.zeros((16, 8), np.uint32), np.zeros((8, 8), np.uint32),
            np.zeros((16, 8), np.float32), np.zeros((16, 8), np.float32))))


@pytest.mark.compiler
def test_ptx_for_sm80_has_the_mma_instruction():
    words = "uint32[:, ::1], uint32[:, ::1], float32[:, ::1]"
    codes = ptx.compile_many([
        ("gpudl.kernels.mma", "warp_mma", f"void({words}, float32[:, ::1])", None),
        ("gpudl.kernels.tensor_core_matmul", "v2_shared_tiles", f"void({words})", None),
        ("gpudl.kernels.tensor_core_matmul", "pack_bf16",
         "void(uint32[:, ::1], uint32[:, ::1], boolean)", None),
    ], (8, 0))
    instruction = r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32"
    # one in warp_mma, 2 x 4 per slab in v2 (unrolled), none in the packing
    for code, mmas in zip(codes, (1, 8, 0), strict=True):
        assert ".target sm_80" in code and not re.search(r"\.f64\b", code)
        assert len(re.findall(instruction, code)) == mmas
    try:
        ptx.ptxas(codes[0], (8, 0))
    except RuntimeError as error:
        if "no ptxas" in str(error):
            pytest.skip("no ptxas here")
        raise


# ------------------------------------------------------------------------------------------
# bf16 packing on the device
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transpose", [False, True])
def test_device_packing_rounds_as_torch_does(transpose):
    x = random((5, 21), 7)
    x[0, :7] = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), np.inf, -np.inf, -0.0, 3e38]  # ties
    x[1, 0] = np.nan
    got = tensor_core_matmul.packed(cuda.to_device(x), transpose).copy_to_host()
    source = x.T.copy() if transpose else x
    expected = mma.bf16_words(source)
    rows, k = source.shape
    k_padded = -(-k // 16) * 16
    assert got.shape == expected.shape == (rows, k_padded // 2)
    got_v, expected_v = mma._unpack(got), mma._unpack(expected)
    np.testing.assert_array_equal(np.isnan(got_v), np.isnan(expected_v))
    nan = np.isnan(expected_v)
    np.testing.assert_array_equal(got_v[~nan], expected_v[~nan])
    rounded = torch.from_numpy(np.pad(source, ((0, 0), (0, k_padded - k)))).bfloat16()
    np.testing.assert_array_equal(expected_v[~nan], rounded.float().numpy()[~nan])


# ------------------------------------------------------------------------------------------
# The tensor-core matmuls
# ------------------------------------------------------------------------------------------


def assert_within_bound(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    ref = tensor_core_matmul.reference(a, b)
    assert isinstance(c, np.ndarray) and c.dtype == np.float32 and c.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg="NaN pattern differs")
    with np.errstate(invalid="ignore"):
        ok = (np.abs(c - ref) <= tensor_core_matmul.error_bound(a, b)) | np.isnan(ref)
    assert ok.all(), f"{(~ok).sum()} elements outside the bound"


@pytest.mark.parametrize("variant", VARIANTS)
def test_matmul_within_its_bound_at_odd_sizes(variant):
    a, b = random((19, 20), 8, 1e2), random((20, 13), 9, 1e-3)
    assert_within_bound(tensor_core_matmul.matmul(a, b, variant), a, b)


def test_v2_with_a_second_block_row_and_nan():
    a, b = random((66, 5), 10), random((5, 3), 11)
    a[65, 4] = np.nan  # row 65 of C, in the second block of 64 rows
    c = tensor_core_matmul.matmul(a, b)
    assert np.isnan(c[65]).all() and not np.isnan(c[:65]).any()
    assert_within_bound(c, a, b)


def test_poisoned_output_catches_a_kernel_that_skips_warps(monkeypatch):
    def first_block_column_only(a_words, bt_words, c):
        tensor_core_matmul.v1_warp_tiles[(1, 2), tensor_core_matmul.THREADS](
            a_words, bt_words, c
        )  # columns 0..31

    monkeypatch.setitem(tensor_core_matmul.VARIANTS, "broken", first_block_column_only)
    a, b = random((17, 4), 12), random((4, 33), 13)
    c = tensor_core_matmul.matmul(a, b, "broken")
    assert np.isnan(c[:, 32]).all() and not np.isnan(c[:, :32]).any()
    with pytest.raises(AssertionError):
        assert_within_bound(c, a, b)


def test_matmul_rejects_bad_input_and_needs_no_launch_when_empty(monkeypatch):
    good = np.ones((4, 6), np.float32)
    with pytest.raises(TypeError, match="a must have dtype float32, got float16"):
        tensor_core_matmul.matmul(good.astype(np.float16), good.T.copy())
    with pytest.raises(ValueError, match="inner dimensions do not match"):
        tensor_core_matmul.matmul(good, good)
    with pytest.raises(ValueError, match=r"variant must be one of \['v1_warp_tiles'"):
        tensor_core_matmul.matmul(good, good.T.copy(), "v3")
    monkeypatch.setitem(
        tensor_core_matmul.VARIANTS, "v2_shared_tiles", lambda *a: pytest.fail("launched")
    )
    np.testing.assert_array_equal(tensor_core_matmul.matmul(np.ones((3, 0), np.float32),
                                            np.ones((0, 2), np.float32)), np.zeros((3, 2)))


def test_launch_configs():
    assert tensor_core_matmul.launch_config("v1_warp_tiles", 17, 33) == ((2, 2), 128)
    assert tensor_core_matmul.launch_config("v2_shared_tiles", 65, 64) == ((1, 2), 128)


# ------------------------------------------------------------------------------------------
# On a GPU only
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_large_products_on_tensor_cores(variant):
    a, b = random((1021, 1031), 14), random((1031, 1033), 15)
    assert_within_bound(tensor_core_matmul.matmul(a, b, variant), a, b)
