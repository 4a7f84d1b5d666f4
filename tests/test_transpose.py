"""gpudl.kernels.transpose: every variant against the reference, poisoning, bad input and the
launch grid."""

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator before numba is imported)

# isort: split
from conftest import random_float32
from numba import cuda

from gpudl.kernels import transpose

# Up to 70 x 70 (3 x 3 tiles of 256 threads): the simulator runs each GPU thread as a Python
# thread (about 0.1 ms each). 1 x N, N x 1, primes and sizes that are not multiples of 32.
dims = st.integers(min_value=1, max_value=70)
seeds = st.integers(min_value=0, max_value=2**32 - 1)
few = settings(max_examples=3, deadline=None, database=None)
MATRIX = np.ones((4, 6), dtype=np.float32)
VECTOR = np.ones(8, dtype=np.float32)


def assert_transposed(got: np.ndarray, x: np.ndarray) -> None:
    """Exact equality with x.T; NaN counts as equal to NaN only where x.T has one too."""
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == (x.shape[1], x.shape[0])
    np.testing.assert_array_equal(got, transpose.reference_transpose(x))


@pytest.mark.parametrize("variant", sorted(transpose.VARIANTS))
@few
@given(rows=dims, cols=dims, seed=seeds)
@example(rows=1, cols=70, seed=0)
@example(rows=67, cols=1, seed=1)
@example(rows=37, cols=61, seed=2)
def test_transpose_matches_reference(variant, rows, cols, seed):
    x = random_float32((rows, cols), seed)
    assert_transposed(transpose.transpose(x, variant=variant), x)


def test_transpose_default_is_padded_and_keeps_the_input():
    x = random_float32((20, 40), seed=3)
    before = x.copy()
    assert_transposed(transpose.transpose(x), x)
    np.testing.assert_array_equal(x, before)


def test_a_nan_where_the_reference_has_none_fails_the_check():
    x = random_float32((5, 7), seed=6)
    out = transpose.transpose(x)
    out[2, 3] = np.nan
    with pytest.raises(AssertionError):
        assert_transposed(out, x)


def test_poisoned_output_catches_a_launcher_that_skips_tiles(monkeypatch):
    def first_tile_column_only(x, out):
        (_, grid_y), block = transpose.transpose_grid(x.shape)
        transpose.v3_padded[(1, grid_y), block](x, out)

    monkeypatch.setitem(transpose.VARIANTS, "broken", first_tile_column_only)
    monkeypatch.setitem(transpose.VARIANTS, "nothing", lambda x, out: None)
    x = random_float32((20, 45), seed=7)
    out = transpose.transpose(x, variant="broken")
    assert not np.isnan(out[:32]).any() and np.isnan(out[32:]).all()
    with pytest.raises(AssertionError):
        assert_transposed(out, x)
    assert np.isnan(transpose.transpose(x, variant="nothing")).all()


@pytest.mark.parametrize(
    ("x", "error", "match"),
    [
        ([[1.0, 2.0]], TypeError, "x must be a NumPy array or a numba device array, got list"),
        (None, TypeError, "got NoneType"),
        (MATRIX.astype(np.float64), TypeError, "x must have dtype float32, got float64"),
        (MATRIX.astype(np.int32), TypeError, "x must have dtype float32, got int32"),
        (VECTOR, ValueError, r"x must be 2-D, got 1-D with shape \(8,\)"),
        (np.ones((2, 3, 4), np.float32), ValueError, r"must be 2-D, got 3-D with shape \(2, 3, 4"),
        (np.float32(1.0), TypeError, "got float32"),
        (MATRIX[:, ::2], ValueError, "x must be C-contiguous"),
        (MATRIX.T, ValueError, "x must be C-contiguous"),
        (cuda.to_device(MATRIX)[:, ::2], ValueError, "x must be C-contiguous"),
    ],
)
def test_transpose_rejects_bad_arrays(x, error, match):
    with pytest.raises(error, match=match):
        transpose.transpose(x)


def test_transpose_grid_covers_every_tile():
    assert transpose.transpose_grid((64, 64)) == ((2, 2), (32, 8))
    assert transpose.transpose_grid((1, 70)) == ((3, 1), (32, 8))
    assert transpose.transpose_grid((33, 1)) == ((1, 2), (32, 8))


def test_nan_in_the_input_lands_in_the_transposed_places():
    x = random_float32((20, 35), seed=5)
    x[[0, 7, 19], [34, 0, 20]] = np.nan
    for variant in transpose.VARIANTS:
        out = transpose.transpose(x, variant=variant)
        np.testing.assert_array_equal(np.isnan(out), np.isnan(x).T)
        assert_transposed(out, x)


def test_device_arrays_in_give_device_arrays_out():
    x = random_float32((33, 17), seed=9)
    x_d = cuda.to_device(x)
    for variant in transpose.VARIANTS:
        out = transpose.transpose(x_d, variant=variant)
        assert not isinstance(out, np.ndarray) and hasattr(out, "copy_to_host")
        assert_transposed(out.copy_to_host(), x)
    np.testing.assert_array_equal(x_d.copy_to_host(), x)
