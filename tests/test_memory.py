"""gpudl.kernels.memory: the copies against their references, poisoning, bad input, host and
device arrays (with the transposes of gpudl.kernels.transpose where both are checked alike),
and (on a GPU) the speed goals of the stored memory benchmark."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator before numba is imported)

# isort: split
from conftest import random_float32
from numba import cuda

from gpudl.bench import find_bar, load_or_run
from gpudl.kernels import memory, transpose

# Up to 70 x 70 (3 x 3 tiles of 256 threads): the simulator runs each GPU thread as a Python
# thread (about 0.1 ms each). 1 x N, N x 1, primes and sizes that are not multiples of 32.
dims = st.integers(min_value=1, max_value=70)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
few = settings(max_examples=3, deadline=None, database=None)


# ------------------------------------------------------------------------------------------
# Correctness against the references
# ------------------------------------------------------------------------------------------


@few
@given(n=st.integers(1, 1000), stride=st.integers(1, 40), offset=st.integers(0, 1000), seed=seeds)
@example(n=1, stride=1, offset=0, seed=0)
@example(n=257, stride=2, offset=1, seed=1)
@example(n=1000, stride=1000, offset=999, seed=2)
def test_copies_match_references(n, stride, offset, seed):
    x = random_float32(n, seed)
    offset = min(offset, n - 1)
    for got, expected in [
        *((memory.copy(x, variant=v), memory.reference_copy(x)) for v in memory.COPY_VARIANTS),
        (memory.copy_strided(x, stride), memory.reference_copy_strided(x, stride)),
        (memory.copy_offset(x, offset), memory.reference_copy_offset(x, offset)),
    ]:
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        assert got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)


def test_stride_larger_than_the_array_copies_one_element():
    x = random_float32(10, seed=4)
    np.testing.assert_array_equal(memory.copy_strided(x, 11), x[:1])


# ------------------------------------------------------------------------------------------
# NaN and poisoned outputs
# ------------------------------------------------------------------------------------------


def test_nan_in_the_input_lands_in_the_same_places_of_the_copies():
    x = random_float32((20, 35), seed=5)
    x[[0, 7, 19], [34, 0, 20]] = np.nan
    v = x.ravel()
    np.testing.assert_array_equal(np.isnan(memory.copy(v)), np.isnan(v))
    np.testing.assert_array_equal(np.isnan(memory.copy_strided(v, 3)), np.isnan(v[::3]))
    np.testing.assert_array_equal(np.isnan(memory.copy_offset(v, 5)), np.isnan(v[5:]))


def test_poisoned_output_catches_a_copy_that_stops_short(monkeypatch):
    def first_block_only(x, out):
        memory.copy_v1_naive[1, memory.THREADS_PER_BLOCK](x, out)

    def k_loads_first_block_only(x, out):
        memory.copy_v2_k_loads[1, memory.THREADS_PER_BLOCK](x, out)

    monkeypatch.setitem(memory.COPY_VARIANTS, "v1_naive", first_block_only)
    monkeypatch.setitem(memory.COPY_VARIANTS, "v2_k_loads", k_loads_first_block_only)
    x = random_float32(300, seed=8)
    out = memory.copy(x)
    assert np.isnan(out[256:]).all() and not np.isnan(out[:256]).any()
    x = random_float32(2100, seed=8)  # a block of copy_v2_k_loads covers K x 256 = 2048 elements
    out = memory.copy(x, variant="v2_k_loads")
    assert np.isnan(out[2048:]).all() and not np.isnan(out[:2048]).any()


@pytest.mark.parametrize("variant", ["v2_k_loads", "v3_vector4"])
def test_new_copies_at_the_edges_of_their_blocks(variant):
    per_block = 8 * memory.THREADS_PER_BLOCK  # K loads, or VECTORS x 4 floats, per thread
    for n in (1, 2, 3, 4, 5, per_block - 1, per_block, per_block + 1, per_block + 6):
        x = random_float32(n, seed=n)
        np.testing.assert_array_equal(memory.copy(x, variant=variant), x, err_msg=f"n={n}")


def test_the_vector_copy_refuses_a_view_off_a_16_byte_boundary():
    x = cuda.to_device(random_float32(21, seed=12))
    with pytest.raises(ValueError, match="x must start on a 16-byte boundary"):
        memory.copy(x[3:], variant="v3_vector4")
    got = memory.copy(x[4:], variant="v3_vector4")  # 16 bytes in: aligned
    np.testing.assert_array_equal(got.copy_to_host(), x.copy_to_host()[4:])


# ------------------------------------------------------------------------------------------
# Host and device arrays, empty inputs
# ------------------------------------------------------------------------------------------


def test_device_arrays_in_give_device_arrays_out():
    v = random_float32((33, 17), seed=9).ravel()
    v_d = cuda.to_device(v)
    for got, expected in [
        (memory.copy(v_d), v),
        (memory.copy_strided(v_d, 4), v[::4]),
        (memory.copy_offset(v_d, 9), v[9:]),
    ]:
        assert not isinstance(got, np.ndarray)
        np.testing.assert_array_equal(got.copy_to_host(), expected)
    np.testing.assert_array_equal(v_d.copy_to_host(), v)


@pytest.mark.parametrize("on_device", [False, True])
def test_empty_inputs_give_empty_outputs_without_a_launch(monkeypatch, on_device):
    def boom(*args):
        raise AssertionError("launched a kernel for an empty output")

    for name in ("launch_copy_strided", "launch_copy_offset"):
        monkeypatch.setattr(memory, name, boom)
    for table in (transpose.VARIANTS, memory.COPY_VARIANTS):
        for variant in table:
            monkeypatch.setitem(table, variant, boom)

    def put(x):
        return cuda.to_device(x) if on_device else x

    results = [
        (transpose.transpose(put(np.empty((0, 5), np.float32))), (5, 0)),
        (transpose.transpose(put(np.empty((3, 0), np.float32)), variant="v1_naive"), (0, 3)),
        *((memory.copy(put(np.empty(0, np.float32)), variant=v), (0,))
          for v in memory.COPY_VARIANTS),
        (memory.copy_strided(put(np.empty(0, np.float32)), 3), (0,)),
    ]
    for out, shape in results:
        assert out.shape == shape and out.dtype == np.float32
        assert isinstance(out, np.ndarray) != on_device


def test_copy_offset_of_an_empty_array_has_no_valid_offset():
    with pytest.raises(ValueError, match=r"offset must be < len\(x\) = 0, got 0"):
        memory.copy_offset(np.empty(0, np.float32), 0)


# ------------------------------------------------------------------------------------------
# Bad input: clear errors
# ------------------------------------------------------------------------------------------

MATRIX = np.ones((4, 6), dtype=np.float32)
VECTOR = np.ones(8, dtype=np.float32)


@pytest.mark.parametrize("copy", [memory.copy, lambda x: memory.copy_strided(x, 2),
                                  lambda x: memory.copy_offset(x, 1)])
@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        ([1.0, 2.0], TypeError, "x must be a NumPy array or a numba device array, got list"),
        (VECTOR.astype(np.float16), TypeError, "x must have dtype float32, got float16"),
        (MATRIX, ValueError, r"x must be 1-D, got 2-D with shape \(4, 6\)"),
        (np.ones(16, np.float32)[::2], ValueError, "x must be C-contiguous"),
    ],
)
def test_copies_reject_bad_arrays(copy, x, error, match):
    with pytest.raises(error, match=match):
        copy(x)


@pytest.mark.parametrize(("stride", "error", "match"), [
    (0, ValueError, "stride must be >= 1"), (-2, ValueError, "stride must be >= 1"),
    (1.5, TypeError, "stride must be an int"), (True, TypeError, "stride must be an int"),
    ("2", TypeError, "stride must be an int"), (None, TypeError, "stride must be an int"),
])
def test_stride_must_be_a_positive_integer(stride, error, match):
    with pytest.raises(error, match=match):
        memory.copy_strided(VECTOR, stride)


@pytest.mark.parametrize(
    ("offset", "error", "match"),
    [
        (-1, ValueError, "offset must be >= 0, got -1"),
        (2.0, TypeError, "offset must be an int, got float 2.0"),
        (False, TypeError, "offset must be an int"),
        (8, ValueError, r"offset must be < len\(x\) = 8, got 8"),
        (100, ValueError, r"offset must be < len\(x\) = 8, got 100"),
    ],
)
def test_offset_must_be_inside_the_array(offset, error, match):
    with pytest.raises(error, match=match):
        memory.copy_offset(VECTOR, offset)


def test_numpy_integers_are_accepted_as_stride_and_offset():
    x = random_float32(50, seed=10)
    np.testing.assert_array_equal(memory.copy_strided(x, np.int64(3)), x[::3])
    np.testing.assert_array_equal(memory.copy_offset(x, np.int32(7)), x[7:])


def test_unknown_variant_lists_the_variants():
    with pytest.raises(ValueError, match=r"one of \['v1_naive', 'v2_shared', 'v3_padded', "
                                         r"'v4_padded_loads_first'\], got 'padded'"):
        transpose.transpose(MATRIX, variant="padded")
    with pytest.raises(ValueError, match=r"one of \['v1_naive', 'v2_k_loads', 'v3_vector4'\], "
                                         r"got 'v2'"):
        memory.copy(VECTOR, variant="v2")


# ------------------------------------------------------------------------------------------
# On a GPU only: the speed goals, read from the stored run (measured now if there is none)
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stored() -> dict:
    return load_or_run("memory")


@pytest.mark.gpu
def test_coalesced_copy_reaches_90_percent_of_a_torch_copy(stored):
    assert find_bar(stored, "copy_vs_torch_copy")["verdict"], stored["bars"]


@pytest.mark.gpu
def test_padded_transpose_runs_near_copy_bandwidth_and_beats_naive(stored):
    assert find_bar(stored, "padded_transpose_vs_torch_copy")["verdict"], stored["bars"]
    assert find_bar(stored, "padded_transpose_vs_naive")["verdict"], stored["bars"]
