"""gpudl.kernels.softmax: every variant (three passes in Numba, one online pass in Triton)
against the float64 reference within the derived bound and against torch.softmax, at row
lengths that are not multiples of a warp or a block; NaN and -inf rows as torch; poisoned
outputs; host and device arrays; bad input."""

import numpy as np
import pytest
import torch
from conftest import random_float32
from hypothesis import given, settings
from hypothesis import strategies as st

# isort: split
from numba import cuda

from gpudl.kernels import softmax

VARIANTS = list(softmax.VARIANTS)


def assert_within_bound(p: np.ndarray, x: np.ndarray) -> None:
    """``p`` within error_bound of the float64 reference (NaN exactly where it has NaN) and
    within twice the bound of torch.softmax."""
    ref, bound = softmax.reference(x), softmax.error_bound(x)
    assert isinstance(p, np.ndarray) and p.dtype == np.float32 and p.shape == x.shape
    np.testing.assert_array_equal(np.isnan(p), np.isnan(ref), err_msg="NaN pattern differs")
    with np.errstate(invalid="ignore"):
        ok = (np.abs(p - ref) <= bound) | np.isnan(ref)
        expected = torch.softmax(torch.from_numpy(x), dim=-1).numpy()
        near_torch = (np.abs(p - expected) <= 2 * bound) | np.isnan(ref)
    assert ok.all(), f"{(~ok).sum()} outside the bound, first at {np.argwhere(~ok)[0]}"
    assert near_torch.all(), "off torch.softmax"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize(("rows", "cols"), [(1, 1), (3, 31), (2, 33), (5, 77), (1, 129)])
def test_every_variant_matches_the_reference_and_torch(variant, rows, cols):
    x = random_float32((rows, cols), seed=rows * cols)
    assert_within_bound(softmax.softmax(x, variant), x)


@settings(max_examples=3, deadline=None, database=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 70), seed=st.integers(0, 2**32 - 1),
       variant=st.sampled_from(VARIANTS))
def test_random_shapes_and_scales(rows, cols, seed, variant):
    x = random_float32((rows, cols), seed)
    assert_within_bound(softmax.softmax(x, variant), x)


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
def test_nan_and_minus_infinity_as_torch(variant):
    x = random_float32((4, 40), seed=3, scale=3.0)
    x[0, 17] = np.nan  # the whole row NaN
    x[1, :] = -np.inf  # 0 / 0: NaN, as torch
    x[2, :25] = -np.inf  # masked entries: exactly 0, the rest a softmax
    p = softmax.softmax(x, variant)
    np.testing.assert_array_equal(np.isnan(p), torch.isnan(torch.softmax(torch.from_numpy(x),
                                                                         -1)).numpy())
    assert (p[2, :25] == 0).all() and abs(p[2].sum() - 1) < 1e-6
    assert_within_bound(p, x)


def test_the_bound_catches_one_element_left_out_of_the_sum():
    x = random_float32((2, 40), seed=5, scale=1.0)
    p = softmax.reference(x[:, :39])  # as if a block had dropped the last column
    wrong = np.concatenate([p, np.zeros((2, 1))], axis=1).astype(np.float32)
    with pytest.raises(AssertionError, match="outside the bound"):
        assert_within_bound(wrong, x)


def test_poisoned_output_catches_a_launcher_that_skips_a_row(monkeypatch):
    def last_row_skipped(x, out):
        softmax.v1_three_passes[x.shape[0] - 1, softmax.WARP](x, out)

    monkeypatch.setitem(softmax.VARIANTS, "broken", last_row_skipped)
    p = softmax.softmax(random_float32((3, 5), seed=6), "broken")
    assert np.isnan(p[2]).all() and not np.isnan(p[:2]).any()


@pytest.mark.parametrize("variant", VARIANTS)
def test_device_arrays_in_give_device_arrays_out(variant):
    x = random_float32((3, 17), seed=7)
    x_d = cuda.to_device(x)
    p = softmax.softmax(x_d, variant)
    assert not isinstance(p, np.ndarray)
    np.testing.assert_array_equal(p.copy_to_host(), softmax.softmax(x, variant))
    np.testing.assert_array_equal(x_d.copy_to_host(), x)


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)])
def test_empty_inputs_need_no_launch(monkeypatch, shape):
    for variant in VARIANTS:
        monkeypatch.setitem(softmax.VARIANTS, variant, lambda *a: pytest.fail("launched"))
    assert softmax.softmax(np.ones(shape, np.float32)).shape == shape


@pytest.mark.parametrize(("x", "kwargs", "error", "match"), [
    (np.ones((2, 3)), {}, TypeError, "x must have dtype float32, got float64"),
    (np.ones(3, np.float32), {}, ValueError, "x must be 2-D"),
    (np.ones((2, 6), np.float32)[:, ::2], {}, ValueError, "contiguous"),
    ([[1.0]], {}, TypeError, "x must be a NumPy array"),
    (np.ones((2, 3), np.float32), {"variant": "v9"}, ValueError, r"one of \['v1_three_passes'"),
    (np.ones((2, 3), np.float32), {"variant": None}, TypeError, "variant must be a str"),
])
def test_bad_input_gets_a_clear_error(x, kwargs, error, match):
    with pytest.raises(error, match=match):
        softmax.softmax(x, **kwargs)
