"""gpudl.kernels.matmul: every variant against the float64 product within the derived error
bound, at sizes that are not multiples of any tile; NaN, poisoned outputs, empty dimensions,
bad input, host and device arrays, the benchmark's rows, and (on a GPU) large sizes and the
rate against torch.matmul."""


import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl import registry
from gpudl.bench import find_bar, load_or_run
from gpudl.bench import matmul as bench
from gpudl.kernels import matmul as matmul_kernels

VARIANTS = list(matmul_kernels.VARIANTS)
#: The float32 variants, which the tests below hold to the float32 bound.
FLOAT32 = [k for k, v in registry.variant_records("matmul").items() if v.precision == "float32"]
#: The float16 ones (v7_triton_float16), held to the float16 bound.
FLOAT16 = [k for k, v in registry.variant_records("matmul").items() if v.precision == "float16"]
# Each example costs up to a few seconds on the simulator (every GPU thread is a Python
# thread), so few random shapes, plus the edges: 1, primes, TILE + 1 = 17, 33 = 32 + 1.
dims = st.integers(min_value=1, max_value=40)
few = settings(max_examples=3, deadline=None, database=None)




def random_matrix(shape: tuple[int, int], seed: int) -> np.ndarray:
    """Mixed signs, magnitudes from 1e-3 to 1e3 (one scale per matrix)."""
    rng = np.random.default_rng(seed)
    return (10.0 ** rng.integers(-3, 4) * rng.standard_normal(shape)).astype(np.float32)


def assert_within_bound(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """|C - C_ref| <= K * eps32 * (|A| @ |B|) elementwise (derived in the module docstring),
    NaN exactly where the reference has NaN."""
    assert isinstance(c, np.ndarray) and c.dtype == np.float32
    ref = matmul_kernels.reference(a, b)
    assert c.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg="NaN pattern differs")
    with np.errstate(invalid="ignore"):
        ok = (np.abs(c - ref) <= matmul_kernels.error_bound(a, b)) | np.isnan(ref)
    assert ok.all(), f"{(~ok).sum()} elements outside the bound, first at {np.argwhere(~ok)[0]}"


# ------------------------------------------------------------------------------------------
# Correctness against the float64 reference
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", FLOAT32)
@few
@given(m=dims, k=dims, n=dims, seed=st.integers(0, 2**32 - 1))
@example(m=1, k=1, n=1, seed=0)
@example(m=17, k=37, n=33, seed=1)
@example(m=40, k=17, n=1, seed=2)
def test_matmul_matches_reference_within_the_bound(variant, m, k, n, seed):
    a, b = random_matrix((m, k), seed), random_matrix((k, n), seed + 1)
    assert_within_bound(matmul_kernels.matmul(a, b, variant=variant), a, b)


@pytest.mark.parametrize("variant", FLOAT32)
def test_fixed_odd_shape(variant):
    a, b = random_matrix((33, 17), 3), random_matrix((17, 29), 4)
    assert_within_bound(matmul_kernels.matmul(a, b, variant=variant), a, b)


@pytest.mark.parametrize(("variant", "tile"), [("v4_register_1d", matmul_kernels.V4_BM),
                                               ("v5_register_2d", matmul_kernels.V5_BM)])
@pytest.mark.parametrize("rows_over", [True, False])
def test_v4_and_v5_with_two_blocks_along_one_dimension(variant, tile, rows_over):
    # Shapes up to 40 fit in one block of v4 and v5; this checks how the grid is indexed.
    # K = 2 keeps the cost at one slab.
    m, n = (tile + 1, 3) if rows_over else (3, tile + 1)
    a, b = random_matrix((m, 2), 19), random_matrix((2, n), 20)
    assert_within_bound(matmul_kernels.matmul(a, b, variant=variant), a, b)


def test_a_full_64_cube_with_the_default_variant():
    a, b = random_matrix((64, 64), 5), random_matrix((64, 64), 6)
    assert_within_bound(matmul_kernels.matmul(a, b), a, b)


def test_exact_on_small_integers():
    # Integer products and sums below 2**24 are exact in float32: no rounding at all.
    a = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)
    b = np.arange(30, dtype=np.float32).reshape(6, 5) % 7
    for variant in VARIANTS:
        precision = registry.variant_records("matmul")[variant].precision
        got = matmul_kernels.matmul(a.astype(precision), b.astype(precision), variant=variant)
        np.testing.assert_array_equal(got, (a @ b).astype(precision))


def test_the_bound_catches_one_lost_term():
    a, b = random_matrix((20, 30), 7), random_matrix((30, 10), 8)
    c = matmul_kernels.matmul(a, b)
    assert_within_bound(c, a, b)
    c[3, 4] -= a[3, 29] * b[29, 4]  # as if a kernel stopped one step of k short
    with pytest.raises(AssertionError, match="outside the bound"):
        assert_within_bound(c, a, b)


def test_flops_counts_a_multiply_and_an_add_per_term():
    assert matmul_kernels.flops(2, 3, 4) == 48
    assert matmul_kernels.flops(4096, 4096, 4096) == 2 * 4096**3
    assert matmul_kernels.flops(0, 5, 5) == 0
    with pytest.raises(ValueError, match="k must be >= 0, got -1"):
        matmul_kernels.flops(1, -1, 1)
    with pytest.raises(TypeError, match="n must be an int"):
        matmul_kernels.flops(1, 1, 2.0)


# ------------------------------------------------------------------------------------------
# NaN and poisoned outputs
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", FLOAT32)
def test_nan_propagates_to_its_row_and_column(variant):
    a, b = random_matrix((9, 20), 9), random_matrix((20, 11), 10)
    a[2, 19] = np.nan
    b[0, 7] = np.nan
    c = matmul_kernels.matmul(a, b, variant=variant)
    expected = np.zeros(c.shape, bool)
    expected[2, :] = expected[:, 7] = True
    np.testing.assert_array_equal(np.isnan(c), expected)
    assert_within_bound(c, a, b)


def assert_within_float16_bound(c: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """A float16 product of float16 factors within error_bound(..., "float16"), NaN exactly
    where the reference has NaN."""
    assert isinstance(c, np.ndarray) and c.dtype == np.float16
    wide = [x.astype(np.float64) for x in (a, b)]
    ref = matmul_kernels.reference(*wide)
    np.testing.assert_array_equal(np.isnan(c), np.isnan(ref), err_msg="NaN pattern differs")
    with np.errstate(invalid="ignore"):
        ok = ((np.abs(c - ref) <= matmul_kernels.error_bound(*wide, "float16"))
              | np.isnan(ref))
    assert ok.all(), f"{(~ok).sum()} elements outside the bound, first at {np.argwhere(~ok)[0]}"


def half_matrix(shape: tuple[int, int], seed: int, scale: float) -> np.ndarray:
    """float16 normals times ``scale`` (products of two such, summed, stay below float16's
    largest value, 65,504, at the sizes here)."""
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(np.float16)


@pytest.mark.parametrize("variant", FLOAT16)
@pytest.mark.parametrize(("m", "k", "n", "scale"), [(1, 1, 1, 1.0), (67, 45, 39, 10.0),
                                                    (33, 70, 17, 1e-2)])
def test_float16_variants_match_the_reference_within_the_float16_bound(variant, m, k, n, scale):
    a, b = half_matrix((m, k), m, scale), half_matrix((k, n), n, scale)
    assert_within_float16_bound(matmul_kernels.matmul(a, b, variant=variant), a, b)


@pytest.mark.parametrize("variant", FLOAT16)
def test_float16_variants_take_float16_and_spread_nan_to_a_row_and_a_column(variant):
    a, b = half_matrix((9, 20), 11, 1.0), half_matrix((20, 11), 12, 1.0)
    a[2, 19], b[0, 7] = np.nan, np.nan
    c = matmul_kernels.matmul(a, b, variant=variant)
    expected = np.zeros(c.shape, bool)
    expected[2, :] = expected[:, 7] = True
    np.testing.assert_array_equal(np.isnan(c), expected)
    with pytest.raises(TypeError, match="a must have dtype float16, got float32"):
        matmul_kernels.matmul(a.astype(np.float32), b.astype(np.float32), variant=variant)


def test_the_float16_bound_is_the_float32_one_doubled_plus_one_rounding():
    a, b = random_matrix((4, 30), 12), random_matrix((30, 5), 13)
    exact = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    bound32 = matmul_kernels.error_bound(a, b)
    np.testing.assert_allclose(matmul_kernels.error_bound(a, b, "float16"),
                               2 * bound32 + 2**-11 * (exact + 2 * bound32) + 2**-25)


def test_a_nan_where_the_reference_has_none_fails_the_check():
    a, b = random_matrix((5, 7), 11), random_matrix((7, 3), 12)
    c = matmul_kernels.matmul(a, b)
    c[1, 2] = np.nan
    with pytest.raises(AssertionError, match="NaN pattern"):
        assert_within_bound(c, a, b)


def test_poisoned_output_catches_a_launcher_that_skips_a_tile(monkeypatch):
    def last_tile_column_skipped(a, b, c):
        (grid_x, grid_y), block = matmul_kernels.launch_config("v3_tiled", *c.shape)
        matmul_kernels.v3_tiled[(grid_x - 1, grid_y), block](a, b, c)

    monkeypatch.setitem(matmul_kernels.VARIANTS, "broken", last_tile_column_skipped)
    monkeypatch.setitem(matmul_kernels.VARIANTS, "nothing", lambda a, b, c: None)
    a, b = random_matrix((20, 9), 13), random_matrix((9, 20), 14)  # 2 x 2 tiles of 16
    c = matmul_kernels.matmul(a, b, variant="broken")
    assert (
        np.isnan(c[:, matmul_kernels.TILE :]).all()
        and not np.isnan(c[:, : matmul_kernels.TILE]).any()
    )
    with pytest.raises(AssertionError):
        assert_within_bound(c, a, b)
    assert np.isnan(matmul_kernels.matmul(a, b, variant="nothing")).all()


# ------------------------------------------------------------------------------------------
# Host and device arrays, empty dimensions
# ------------------------------------------------------------------------------------------


def test_device_arrays_in_give_a_device_array_out_and_are_left_alone():
    a, b = random_matrix((19, 23), 15), random_matrix((23, 18), 16)
    a_d, b_d = cuda.to_device(a), cuda.to_device(b)
    out = matmul_kernels.matmul(a_d, b_d, variant="v4_register_1d")
    assert not isinstance(out, np.ndarray) and hasattr(out, "copy_to_host")
    assert_within_bound(out.copy_to_host(), a, b)
    for args in [(a, b_d), (a_d, b)]:  # a mix is refused, naming both arguments
        with pytest.raises(TypeError, match="is a numba device array but"):
            matmul_kernels.matmul(*args, variant="v4_register_1d")
    np.testing.assert_array_equal(a_d.copy_to_host(), a)
    np.testing.assert_array_equal(b_d.copy_to_host(), b)


@pytest.mark.parametrize("on_device", [False, True])
@pytest.mark.parametrize(("m", "k", "n"), [(0, 5, 3), (4, 5, 0), (0, 0, 0), (4, 0, 3)])
def test_empty_dimensions_need_no_launch(monkeypatch, on_device, m, k, n):
    def boom(*args):
        raise AssertionError("launched a kernel for an empty product")

    for variant in VARIANTS:
        monkeypatch.setitem(matmul_kernels.VARIANTS, variant, boom)
    a, b = np.ones((m, k), np.float32), np.ones((k, n), np.float32)
    if on_device:
        a, b = cuda.to_device(a), cuda.to_device(b)
    out = matmul_kernels.matmul(a, b)
    assert isinstance(out, np.ndarray) != on_device
    host = out.copy_to_host() if on_device else out
    assert host.shape == (m, n) and host.dtype == np.float32
    np.testing.assert_array_equal(host, np.zeros((m, n)))  # K = 0: a sum of no terms


# ------------------------------------------------------------------------------------------
# Bad input: clear errors
# ------------------------------------------------------------------------------------------

GOOD = np.ones((4, 6), np.float32)


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        ([[1.0] * 6] * 4, TypeError, "must be a NumPy array or a numba device array, got list"),
        (None, TypeError, "must be a NumPy array or a numba device array, got NoneType"),
        (GOOD.astype(np.float64), TypeError, "must have dtype float32, got float64"),
        (GOOD.astype(np.float16), TypeError, "must have dtype float32, got float16"),
        (GOOD.astype(np.int32), TypeError, "must have dtype float32, got int32"),
        (np.ones(6, np.float32), ValueError, r"must be 2-D, got 1-D with shape \(6,\)"),
        (np.ones((1, 4, 6), np.float32), ValueError, r"must be 2-D, got 3-D"),
        (np.ones((4, 12), np.float32)[:, ::2], ValueError, "must be C-contiguous"),
        (cuda.to_device(np.ones((4, 12), np.float32))[:, ::2], ValueError, "must be C-contig"),
    ],
)
def test_bad_arrays_are_rejected_by_name(x, error, match):
    # Each array is checked before the shapes are compared.
    with pytest.raises(error, match="a " + match):
        matmul_kernels.matmul(x, GOOD)
    with pytest.raises(error, match="b " + match):
        matmul_kernels.matmul(GOOD, x)


def test_a_transposed_view_is_not_contiguous():
    with pytest.raises(ValueError, match="a must be C-contiguous"):
        matmul_kernels.matmul(GOOD.T, GOOD)


def test_inner_dimensions_must_match():
    with pytest.raises(ValueError, match=r"a has shape \(4, 6\) and b has shape \(4, 6\)"):
        matmul_kernels.matmul(GOOD, GOOD)
    with pytest.raises(ValueError, match=r"inner dimensions do not match.*\(3, 0\).*\(1, 2\)"):
        matmul_kernels.matmul(np.ones((3, 0), np.float32), np.ones((1, 2), np.float32))


def test_unknown_variant_lists_the_variants():
    with pytest.raises(ValueError, match=r"one of \['v1_naive', 'v2_coalesced', .*, got 'v9'"):
        matmul_kernels.matmul(GOOD, GOOD.T.copy(), variant="v9")
    with pytest.raises(ValueError, match="variant must be one of"):
        matmul_kernels.launch_config("cublas", 4, 4)


def test_launch_configs_cover_the_output_with_one_block_per_tile():
    assert matmul_kernels.launch_config("v1_naive", 33, 9) == ((2, 2), (32, 8))  # x runs over rows
    assert matmul_kernels.launch_config("v2_coalesced", 33, 9) == ((1, 5), (32, 8))
    assert matmul_kernels.launch_config("v3_tiled", 33, 16) == ((1, 3), (16, 16))
    assert matmul_kernels.launch_config("v4_register_1d", 1, 65) == ((2, 1), (512,))
    assert matmul_kernels.launch_config("v5_register_2d", 129, 128) == ((1, 2), (256,))
    assert matmul_kernels.launch_config("v5_register_2d", 4096, 4096) == ((32, 32), (256,))


# ------------------------------------------------------------------------------------------
# The benchmark's code path (timings are meaningless on the simulator)
# ------------------------------------------------------------------------------------------


def test_bench_rows_check_every_output_and_restore_the_fp32_precision():
    import torch

    before = torch.backends.cuda.matmul.fp32_precision
    size = backend.pick(gpu=256, sim=12)
    body = bench.run(sizes=(size,), mlp=False, experts=False)
    rows = body["rows"]
    float16 = ["torch float16", *FLOAT16] if FLOAT16 else []
    assert [r["variant"] for r in rows] == ["torch", *FLOAT32, *float16]
    assert [r["name"] for r in rows] == [
        f"torch n={size}", *(f"matmul_{v} n={size}" for v in FLOAT32),
        *(f"{v} n={size}" if v.startswith("torch") else f"matmul_{v} n={size}"
          for v in float16)]
    for row in rows:
        # torch's own float16 product is recorded against twice the bound, not held to it
        assert row["size"] == size and (row["variant"] == "torch float16"
                                        or 0 <= row["error_over_bound"] <= 1)
        assert row["median_s"] > 0 and row["meaningful"] == (not backend.is_simulator())
        assert row["flops"] == 2 * size**3
        assert (row["tflops"] is None) == backend.is_simulator()
    goal, half = body["bars"]
    assert goal["name"] == "best_matmul_vs_torch" and goal["denominator"] == f"torch n={size}"
    assert set(goal["numerator"].split()[:1]) <= {f"matmul_{v}" for v in FLOAT32}
    assert half["name"] == "triton_float16_vs_cublas"
    assert half["denominator"] == f"torch float16 n={size}"
    for bar in (goal, half):
        assert (bar["verdict"] is None) == backend.is_simulator()
    assert torch.backends.cuda.matmul.fp32_precision == before


def test_bench_refuses_a_wrong_output(monkeypatch):
    import torch

    before = torch.backends.cuda.matmul.fp32_precision
    monkeypatch.setattr(matmul_kernels, "VARIANTS", {"nothing": lambda a, b, c: None})
    with pytest.raises(RuntimeError, match="nothing at 8: .* nan times its error bound"):
        bench.bench_matmul(sizes=(8,))
    assert torch.backends.cuda.matmul.fp32_precision == before


@pytest.mark.parametrize("sizes", [(0,), (16, -1), (2.0,)])
def test_bench_sizes_must_be_positive_integers(sizes):
    with pytest.raises((TypeError, ValueError), match=r"sizes\[\d\] must be"):
        bench.bench_matmul(sizes=sizes)


# ------------------------------------------------------------------------------------------
# On a GPU only
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("variant", FLOAT32)
@pytest.mark.parametrize(("m", "k", "n"), [(1024, 1024, 1024), (1021, 1031, 1033)])
def test_large_products_on_the_gpu(variant, m, k, n):
    a, b = random_matrix((m, k), 17), random_matrix((k, n), 18)
    assert_within_bound(matmul_kernels.matmul(a, b, variant=variant), a, b)


@pytest.mark.gpu
def test_best_variant_reaches_half_of_torch_at_4096():
    stored = load_or_run("matmul")  # this commit's stored run, measured now if there is none
    goal = find_bar(stored, "best_matmul_vs_torch")
    assert goal["denominator"] == "torch n=4096" and goal["verdict"], stored["bars"]
