"""gpudl.kernels.elementwise: every kernel against its reference, poisoning, bad input, and
the elementwise benchmark (gpudl.bench.elementwise)."""

import json
import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl import registry
from gpudl.bench import elementwise as bench
from gpudl.bench import find_bar, load_or_run, write_results
from gpudl.kernels import elementwise as elementwise_kernels

#: The float32 variants, which the tests below hold to one float32 rounding.
FLOAT32 = [k for k, v in registry.variant_records("vector_add").items()
           if v.precision == "float32"]

# Sizes that are not multiples of a block (1, 31, 33, 255, 257, primes) up to ~3000: the
# simulator runs each GPU thread as a Python thread (about 0.1 ms each).
EDGE_SIZES = [1, 31, 33, 255, 257, 997, 2999]
sizes = st.integers(min_value=1, max_value=3000)
blocks = st.sampled_from([32, 64, 128, 256])
seeds = st.integers(min_value=0, max_value=2**32 - 1)
few = settings(max_examples=6, deadline=None, database=None)


def random_vectors(n: int, seed: int, count: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = 10.0 ** rng.integers(-3, 4)
    return [(scale * rng.standard_normal(n)).astype(np.float32) for _ in range(count)]


def assert_saxpy_close(got, alpha, x, y):
    # One float32 rounding of alpha * x and one of the sum (or a single one, fused).
    expected = elementwise_kernels.reference_saxpy(alpha, x, y)
    bound = 4 * np.finfo(np.float32).eps * (np.abs(alpha * x.astype(np.float64)) + np.abs(y))
    np.testing.assert_allclose(got, expected, rtol=0, atol=float(bound.max()) + 1e-30)


# ------------------------------------------------------------------------------------------
# Correctness against the references
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", FLOAT32)
@few
@given(n=sizes, threads_per_block=blocks, seed=seeds)
@example(n=1, threads_per_block=32, seed=0)
@example(n=33, threads_per_block=32, seed=1)
@example(n=257, threads_per_block=256, seed=2)
def test_vector_add_matches_reference(variant, n, threads_per_block, seed):
    a, b = random_vectors(n, seed)
    out = elementwise_kernels.vector_add(a, b, variant=variant, threads_per_block=threads_per_block)
    assert isinstance(out, np.ndarray) and out.dtype == np.float32 and out.shape == (n,)
    # float32 a + b is the exact sum rounded once: within half an ulp of the float64 sum.
    np.testing.assert_allclose(
        out, elementwise_kernels.reference_vector_add(a, b), rtol=2**-24, atol=0
    )


@pytest.mark.parametrize("variant", FLOAT32)
def test_vector_add_edge_sizes(variant):
    for n in EDGE_SIZES:
        a, b = random_vectors(n, seed=n)
        np.testing.assert_allclose(
            elementwise_kernels.vector_add(a, b, variant=variant),
            elementwise_kernels.reference_vector_add(a, b),
            rtol=2**-24,
        )


@pytest.mark.parametrize("variant", sorted(elementwise_kernels.SAXPY_VARIANTS))
@few
@given(n=sizes, seed=seeds, alpha=st.floats(-100, 100, allow_nan=False))
@example(n=255, seed=3, alpha=-2.0)
@example(n=8 * 64 + 1, seed=4, alpha=0.5)  # v2: one full block of K x 64, then one element
def test_saxpy_matches_reference_and_leaves_y_alone(variant, n, seed, alpha):
    x, y = random_vectors(n, seed)
    y_before = y.copy()
    out = elementwise_kernels.saxpy(alpha, x, y, threads_per_block=64, variant=variant)
    np.testing.assert_array_equal(y, y_before)
    assert out.dtype == np.float32 and out is not y
    assert_saxpy_close(out, np.float32(alpha), x, y)


@pytest.mark.parametrize(
    "cpu_saxpy", [elementwise_kernels.saxpy_numpy, elementwise_kernels.saxpy_numba_cpu]
)
@pytest.mark.parametrize("n", [1, 1000, 4099])
def test_cpu_saxpy_matches_reference(cpu_saxpy, n):
    x, y = random_vectors(n, seed=n)
    y_before = y.copy()
    out = cpu_saxpy(1.5, x, y)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(y, y_before)
    assert_saxpy_close(out, np.float32(1.5), x, y)


def test_nan_in_the_input_propagates_to_the_same_places():
    a, b = random_vectors(100, seed=7)
    a[[0, 41, 99]] = np.nan
    for variant in FLOAT32:
        out = elementwise_kernels.vector_add(a, b, variant=variant, threads_per_block=32)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(a))
        np.testing.assert_allclose(out, elementwise_kernels.reference_vector_add(a, b), rtol=2**-24)
    np.testing.assert_array_equal(np.isnan(elementwise_kernels.saxpy(2.0, a, b)), np.isnan(a))


# Around the edges of the new variants' layouts with 32-thread blocks: a block of v3 covers
# K x 32 = 256 elements, one of v4 VECTORS x 4 x 32 = 256, and v4 has a scalar tail of n % 4.
BLOCK_EDGES = [1, 2, 3, 4, 5, 7, 8, 255, 256, 257, 259, 512, 515, 3 * 256 + 127]


@pytest.mark.parametrize("variant", ["v3_k_loads", "v4_vector4"])
def test_k_loads_and_vector_variants_at_the_edges_of_their_blocks(variant):
    for n in BLOCK_EDGES:
        a, b = random_vectors(n, seed=n)
        out = elementwise_kernels.vector_add(a, b, variant=variant, threads_per_block=32)
        np.testing.assert_array_equal(out, (a + b).astype(np.float32), err_msg=f"n={n}")
    for n in (255, 257):
        x, y = random_vectors(n, seed=n + 1)
        assert_saxpy_close(elementwise_kernels.saxpy(1.5, x, y, threads_per_block=32,
                                                    variant="v2_k_loads"),
                           np.float32(1.5), x, y)


def test_a_k_loads_launch_one_block_short_leaves_its_elements_poisoned(monkeypatch):
    def one_block_short(a, b, out, threads_per_block):
        blocks = math.ceil(out.size / (elementwise_kernels.K * threads_per_block)) - 1
        elementwise_kernels.v3_k_loads[blocks, threads_per_block](a, b, out)

    monkeypatch.setitem(elementwise_kernels.VARIANTS, "v3_k_loads", one_block_short)
    a, b = random_vectors(600, seed=13)  # 3 blocks of 256
    out = elementwise_kernels.vector_add(a, b, variant="v3_k_loads", threads_per_block=32)
    assert not np.isnan(out[:512]).any() and np.isnan(out[512:]).all()


def test_the_vector_variant_refuses_arrays_off_a_16_byte_boundary():
    a, b = random_vectors(41, seed=14)
    on_device = [cuda.to_device(x) for x in (a, b)]
    shifted = [x[1:] for x in on_device]  # views that start 4 bytes in
    with pytest.raises(ValueError, match="a must start on a 16-byte boundary"):
        elementwise_kernels.vector_add(*shifted, variant="v4_vector4")
    # host arrays are copied to new (aligned) device arrays, views or not
    np.testing.assert_array_equal(
        elementwise_kernels.vector_add(a[1:], b[1:], variant="v4_vector4"), a[1:] + b[1:]
    )
    out = elementwise_kernels.vector_add(*shifted, variant="v3_k_loads")  # scalar loads do not care
    np.testing.assert_array_equal(out.copy_to_host(), a[1:] + b[1:])


def test_a_nan_where_the_reference_has_none_fails_the_comparison():
    a, b = random_vectors(10, seed=8)
    out = elementwise_kernels.vector_add(a, b)
    out[3] = np.nan
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(out, elementwise_kernels.reference_vector_add(a, b), rtol=2**-24)


def test_poisoned_output_catches_a_launcher_that_writes_only_half(monkeypatch):
    def first_half_only(a, b, out, threads_per_block):
        blocks = math.ceil(out.size / 2 / threads_per_block)
        elementwise_kernels.v1_naive[blocks, threads_per_block](a, b, out)

    monkeypatch.setitem(elementwise_kernels.VARIANTS, "v1_naive", first_half_only)
    monkeypatch.setitem(
        elementwise_kernels.VARIANTS, "v2_grid_stride", lambda a, b, out, threads_per_block: None
    )
    a, b = random_vectors(600, seed=9)
    out = elementwise_kernels.vector_add(a, b, variant="v1_naive", threads_per_block=32)
    assert np.isnan(out[320:]).all() and not np.isnan(out[:320]).any()
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(out, elementwise_kernels.reference_vector_add(a, b), rtol=2**-24)
    assert np.isnan(elementwise_kernels.vector_add(a, b, variant="v2_grid_stride")).all()


# ------------------------------------------------------------------------------------------
# Host and device arrays, empty inputs
# ------------------------------------------------------------------------------------------


def test_device_arrays_in_give_device_arrays_out():
    a, b = random_vectors(300, seed=10)
    a_d, b_d = cuda.to_device(a), cuda.to_device(b)
    for variant in FLOAT32:
        out = elementwise_kernels.vector_add(a_d, b_d, variant=variant)
        assert not isinstance(out, np.ndarray) and hasattr(out, "copy_to_host")
        np.testing.assert_allclose(
            out.copy_to_host(), elementwise_kernels.reference_vector_add(a, b), rtol=2**-24
        )
    out = elementwise_kernels.saxpy(3.0, a_d, b_d)
    assert not isinstance(out, np.ndarray)
    assert_saxpy_close(out.copy_to_host(), np.float32(3.0), a, b)
    np.testing.assert_array_equal(b_d.copy_to_host(), b)


@pytest.mark.parametrize("on_device", [False, True])
def test_empty_inputs_give_empty_outputs_without_a_launch(on_device):
    empty = np.empty(0, dtype=np.float32)
    args = (cuda.to_device(empty), cuda.to_device(empty)) if on_device else (empty, empty)
    for out in (
        elementwise_kernels.vector_add(*args, variant="v1_naive"),
        elementwise_kernels.vector_add(*args),
        elementwise_kernels.saxpy(2.0, *args),
    ):
        assert out.shape == (0,) and out.dtype == np.float32
        assert isinstance(out, np.ndarray) != on_device
    assert elementwise_kernels.saxpy_numba_cpu(2.0, empty, empty).shape == (0,)


# ------------------------------------------------------------------------------------------
# Bad input: clear errors
# ------------------------------------------------------------------------------------------

GOOD = np.ones(8, dtype=np.float32)


@pytest.mark.parametrize(
    ("a", "b", "error", "match"),
    [
        ([1.0] * 8, GOOD, TypeError, "a must be a NumPy array or a numba device array, got list"),
        (GOOD, None, TypeError, "b must be .* got NoneType"),
        (GOOD.astype(np.float64), GOOD, TypeError, "a must have dtype float32, got float64"),
        (GOOD, GOOD.astype(np.int32), TypeError, "b must have dtype float32, got int32"),
        (GOOD.reshape(2, 4), GOOD, ValueError, r"a must be 1-D, got 2-D with shape \(2, 4\)"),
        (np.float32(1.0), GOOD, TypeError, "got float32"),
        (GOOD, np.ones(9, np.float32), ValueError, r"same shape, got .*\(8,\).*\(9,\)"),
        (np.ones(16, np.float32)[::2], GOOD, ValueError, "a must be C-contiguous"),
        (GOOD, cuda.to_device(GOOD), TypeError, "all host arrays or all device arrays"),
    ],
)
def test_bad_vectors_are_rejected(a, b, error, match):
    with pytest.raises(error, match=match):
        elementwise_kernels.vector_add(a, b)
    with pytest.raises(error, match=match.replace("a must", "x must").replace("b must", "y must")):
        elementwise_kernels.saxpy(1.0, a, b)


def test_strided_device_array_is_rejected():
    strided = cuda.to_device(np.ones(16, np.float32))[::2]
    with pytest.raises(ValueError, match="a must be C-contiguous"):
        elementwise_kernels.vector_add(strided, cuda.to_device(GOOD))


@pytest.mark.parametrize(
    "cpu_saxpy", [elementwise_kernels.saxpy_numpy, elementwise_kernels.saxpy_numba_cpu]
)
def test_cpu_saxpy_rejects_device_and_bad_arrays(cpu_saxpy):
    with pytest.raises(TypeError, match="x must be a NumPy array, got"):
        cpu_saxpy(1.0, cuda.to_device(GOOD), GOOD)
    with pytest.raises(TypeError, match="y must have dtype float32, got float64"):
        cpu_saxpy(1.0, GOOD, GOOD.astype(np.float64))
    with pytest.raises(TypeError, match="alpha must be a real number, got str"):
        cpu_saxpy("2", GOOD, GOOD)


@pytest.mark.parametrize("alpha", ["2", None, True, 1 + 2j, GOOD])
def test_saxpy_alpha_must_be_real(alpha):
    with pytest.raises(TypeError, match="alpha must be a real number"):
        elementwise_kernels.saxpy(alpha, GOOD, GOOD)


def test_saxpy_accepts_numpy_and_integer_alphas():
    for alpha in (np.float32(0.5), np.float64(-1.25), 3, np.int64(2)):
        assert_saxpy_close(
            elementwise_kernels.saxpy(alpha, GOOD, GOOD), np.float32(alpha), GOOD, GOOD
        )


def test_unknown_variant_lists_the_variants():
    listed = re.escape(str(list(elementwise_kernels.VARIANTS)))
    assert listed.startswith(r"\['v1_naive',\ 'v2_grid_stride',\ 'v3_k_loads'")
    with pytest.raises(ValueError, match=rf"must be one of {listed}, got 'v2'"):
        elementwise_kernels.vector_add(GOOD, GOOD, variant="v2")
    with pytest.raises(ValueError, match=r"variant must be one of \['v1_naive', 'v2_k_loads'\], "
                                         r"got 'v3_k_loads'"):
        elementwise_kernels.saxpy(1.0, GOOD, GOOD, variant="v3_k_loads")


@pytest.mark.parametrize("threads_per_block", [0, -32, 48, 2048])
def test_threads_per_block_must_be_a_multiple_of_32_up_to_1024(threads_per_block):
    with pytest.raises(ValueError, match="multiple of 32 between 32 and 1024"):
        elementwise_kernels.vector_add(GOOD, GOOD, threads_per_block=threads_per_block)
    with pytest.raises(ValueError, match="multiple of 32 between 32 and 1024"):
        elementwise_kernels.saxpy(1.0, GOOD, GOOD, threads_per_block=threads_per_block)


@pytest.mark.parametrize("threads_per_block", [256.0, True, "256"])
def test_threads_per_block_must_be_an_int(threads_per_block):
    with pytest.raises(TypeError, match="threads_per_block must be an int"):
        elementwise_kernels.vector_add(GOOD, GOOD, threads_per_block=threads_per_block)
    with pytest.raises(TypeError, match="threads_per_block must be an int"):
        elementwise_kernels.saxpy(1.0, GOOD, GOOD, threads_per_block=threads_per_block)


def test_largest_block_works():
    out = elementwise_kernels.vector_add(GOOD, GOOD, variant="v1_naive", threads_per_block=1024)
    np.testing.assert_array_equal(out, 2)


# ------------------------------------------------------------------------------------------
# The benchmark's JSON
# ------------------------------------------------------------------------------------------


def test_bench_elementwise_checks_and_records_every_kernel(tmp_path, capsys):
    path = write_results("elementwise", bench.run(n=300, repeats=1), directory=tmp_path)
    assert path == tmp_path / f"elementwise-{backend.name()}.json"
    record = json.loads(path.read_text())
    rows = {r["name"]: r for r in record["rows"]}
    bandwidth = {f"vector_add_{v}" for v in elementwise_kernels.VARIANTS} | {
        f"saxpy_{v}" for v in elementwise_kernels.SAXPY_VARIANTS} | {"torch copy"}
    assert {n for n, r in rows.items() if r["group"] == "bandwidth"} == bandwidth
    for r in rows.values():  # a rate exactly where the timing means something
        assert (r["gbps"] is not None) == (r["meaningful"] and r["bytes"] is not None)
        assert r["gbps"] is None or r["gbps"] > 0
    assert rows["torch copy"]["meaningful"]  # a real copy on either backend
    assert rows["vector_add_v2_grid_stride"]["bytes"] == 3 * 300 * 4
    assert rows["torch copy"]["bytes"] == 2 * 300 * 4
    assert rows["saxpy numpy"]["gbps"] > 0 and rows["saxpy numba_cpu_parallel"]["gbps"] > 0
    assert ("saxpy cuda_kernel" in rows) == (not backend.is_simulator())
    assert rows["divergence parity"]["max_paths_per_warp"] == 2
    assert rows["divergence warp"]["max_paths_per_warp"] == 1
    assert [b["name"] for b in record["bars"]] == [spec["name"] for spec in bench.BARS]
    assert "[elementwise]" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------
# On a GPU only: the speed goals, read from the stored run (measured now if there is none)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored() -> dict:
    return load_or_run("elementwise")


@pytest.mark.gpu
def test_v2_reaches_90_percent_of_copy_bandwidth(stored):
    assert find_bar(stored, "vector_add_v2_vs_torch_copy")["verdict"], stored["bars"]


@pytest.mark.gpu
def test_parity_divergence_is_slower_than_by_warp(stored):
    # Parity makes every warp run both paths one after the other: about twice the time.
    assert find_bar(stored, "parity_divergence_over_warp")["verdict"], stored["bars"]


@pytest.mark.parametrize(
    "cpu_saxpy", [elementwise_kernels.saxpy_numpy, elementwise_kernels.saxpy_numba_cpu]
)
def test_cpu_saxpy_writes_into_out(cpu_saxpy):
    x = np.arange(5, dtype=np.float32)
    y = np.ones(5, dtype=np.float32)
    out = np.full(5, np.nan, dtype=np.float32)
    assert cpu_saxpy(2.0, x, y, out) is out
    np.testing.assert_array_equal(out, 2 * x + 1)
    with pytest.raises(ValueError):
        cpu_saxpy(2.0, x, y, np.empty(4, dtype=np.float32))
