"""gpudl.kernels.quant: int8 per output channel within half a step of the weights, both GEMV
variants within the derived bound of the float64 product at odd sizes (one vector or a
batch), within the quantization bound of the original weights, NaN, poisoned outputs, the
bytes each variant moves, bad input."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

# isort: split
from numba import cuda

from gpudl.kernels import quant

VARIANTS = list(quant.VARIANTS)


def weights(out_features, in_features, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    w = (scale * rng.standard_normal((out_features, in_features))).astype(np.float32)
    x = rng.standard_normal((2, in_features)).astype(np.float32)
    return w, x


def test_quantization_is_within_half_a_step_per_channel():
    w, _ = weights(6, 33, seed=0)
    w[2] *= 100  # one large channel: its own scale, the others keep theirs
    w[4] = 0.0
    q, scale = quant.quantize_int8(w)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and scale.shape == (6,)
    assert np.abs(q).max() == 127 and scale[4] == 0 and not q[4].any()
    np.testing.assert_array_equal(scale, np.abs(w).max(axis=1) / np.float32(127))
    step = scale.astype(np.float64)[:, None]
    assert (np.abs(q * step - w) <= step / 2 * (1 + 1e-6)).all()
    assert scale[0] < scale[2] / 50


@settings(max_examples=3, deadline=None, database=None)
@given(out_features=st.integers(1, 9), in_features=st.integers(1, 70), vector=st.booleans(),
       variant=st.sampled_from(VARIANTS), seed=st.integers(0, 2**32 - 1))
def test_gemv_within_the_bound_at_odd_sizes(out_features, in_features, vector, variant, seed):
    w, x = weights(out_features, in_features, seed)
    q, scale = quant.quantize_int8(w)
    x = x[0] if vector else x
    y = quant.gemv_int8(x, q, scale, variant)
    assert y.dtype == np.float32 and y.shape == (x.shape[:-1] + (out_features,))
    assert (np.abs(y - quant.reference(x, q, scale)) <= quant.error_bound(x, q, scale)).all()
    exact = np.asarray(x, np.float64) @ w.T.astype(np.float64)
    within = quant.quantization_bound(x, scale) + quant.error_bound(x, q, scale)
    assert (np.abs(y - exact) <= within).all()


def test_dequantize_gives_q_times_scale_exactly():
    w, _ = weights(5, 11, seed=1)
    q, scale = quant.quantize_int8(w)
    np.testing.assert_array_equal(quant.dequantize_int8(q, scale),
                                  q.astype(np.float32) * scale[:, None])


def test_the_bound_catches_a_scale_off_by_one_percent():
    w, x = weights(4, 40, seed=2)
    q, scale = quant.quantize_int8(w)
    y = quant.gemv_int8(x, q, (scale * np.float32(1.01)).astype(np.float32))
    assert not (np.abs(y - quant.reference(x, q, scale)) <= quant.error_bound(x, q, scale)).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_nan_in_x_spreads_to_its_row_only(variant):
    w, x = weights(3, 35, seed=3)
    x[1, 7] = np.nan
    y = quant.gemv_int8(x, *quant.quantize_int8(w), variant)
    assert np.isnan(y[1]).all() and not np.isnan(y[0]).any()


def test_poisoned_outputs_catch_a_launcher_that_skips_a_row(monkeypatch):
    def last_row_skipped(x, q, scale, y, launch=None):
        quant.v2_dequantize_in_registers[q.shape[0] - 1, quant.WARP](x, q, scale, y)

    monkeypatch.setitem(quant.VARIANTS, "broken", last_row_skipped)
    w, x = weights(3, 5, seed=4)
    y = quant.gemv_int8(x, *quant.quantize_int8(w), "broken")
    assert np.isnan(y[:, 2]).all() and not np.isnan(y[:, :2]).any()


def test_device_arrays_in_give_device_arrays_out():
    w, x = weights(2, 9, seed=5)
    q, scale = quant.quantize_int8(w)
    y = quant.gemv_int8(*(cuda.to_device(a) for a in (x, q, scale)))
    assert not isinstance(y, np.ndarray)
    assert (np.abs(y.copy_to_host() - quant.reference(x, q, scale))
            <= quant.error_bound(x, q, scale)).all()


def test_the_bytes_each_variant_moves():
    n = 8192
    v1, v2 = (quant.weight_bytes(v, n, n) for v in VARIANTS)
    assert v2 == n * n + 4 * n  # a quarter of float32's 4 n^2, half of bf16's 2 n^2
    assert v1 == 9 * n * n + 4 * n  # int8 in, float32 out and in again: more than float32
    with pytest.raises(ValueError, match="variant must be one of"):
        quant.weight_bytes("v3", 1, 1)


GOOD_Q, GOOD_S = quant.quantize_int8(np.ones((3, 4), np.float32))
X = np.ones(4, np.float32)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: quant.quantize_int8(np.array([[np.nan]], np.float32)), ValueError, "finite"),
    (lambda: quant.quantize_int8(np.ones((2, 2))), TypeError, "w must have dtype float32"),
    (lambda: quant.quantize_int8(cuda.to_device(np.ones((2, 2), np.float32))), TypeError,
     "quantized once, on the host"),
    (lambda: quant.gemv_int8(X, GOOD_Q.astype(np.int16), GOOD_S), TypeError,
     "q must have dtype int8"),
    (lambda: quant.gemv_int8(X, GOOD_Q, GOOD_S[:2]), ValueError, "one value per output row"),
    (lambda: quant.gemv_int8(np.ones(5, np.float32), GOOD_Q, GOOD_S), ValueError,
     r"x's last dimension \(5\) must be q's in_features \(4\)"),
    (lambda: quant.gemv_int8(np.ones((1, 1, 4), np.float32), GOOD_Q, GOOD_S), ValueError,
     "x must be 2-D"),
    (lambda: quant.gemv_int8(cuda.to_device(X), GOOD_Q, GOOD_S), TypeError, "a mix"),
    (lambda: quant.gemv_int8(X, GOOD_Q, GOOD_S, "v9"), ValueError, "variant must be one of"),
    (lambda: quant.dequantize_int8(GOOD_Q, GOOD_S.astype(np.float64)), TypeError,
     "scale must have dtype float32"),
])
def test_bad_input_gets_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_empty_shapes_need_no_launch(monkeypatch):
    monkeypatch.setitem(quant.VARIANTS, "v2_dequantize_in_registers",
                        lambda *a: pytest.fail("launched"))
    q, scale = quant.quantize_int8(np.ones((3, 0), np.float32))
    assert (quant.gemv_int8(np.ones((2, 0), np.float32), q, scale) == 0).all()
    assert quant.gemv_int8(np.ones((0, 4), np.float32), GOOD_Q, GOOD_S).shape == (0, 3)


@pytest.mark.gpu
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_large_product_on_the_gpu(variant):
    w, x = weights(4096, 4099, seed=6)
    q, scale = quant.quantize_int8(w)
    y = quant.gemv_int8(x, q, scale, variant)
    assert (np.abs(y - quant.reference(x, q, scale)) <= quant.error_bound(x, q, scale)).all()
