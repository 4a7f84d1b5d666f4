"""Chapter 10's exercises, run by Triton's interpreter: the fused bias + GeLU within the Numba
kernel's derived bound of the float64 reference (tests/test_bias_gelu.py derives it), and the
LayerNorm forward against torch's float64 layer_norm.

The LayerNorm bound, with u = eps32 / 2 and n features: the sum of n values is within n u of
the exact sum of their magnitudes, so the mean is off by at most n u mean|x|; the centred
values by that plus u |x - mean|; the variance, a sum of n squares, by (n + 3) u var plus twice
the centred values' error times mean|x - mean|; 1 / sqrt_rn(var + eps) by half the variance's
relative error plus 2 u; and the output by the product's two roundings and the bias's one. On
the test's data (normal, mean no larger than the deviation) that is below (2 n + 16) u
(|w| (|x_hat| + 1) + |b|), which the test holds it to."""

import inspect

import numpy as np
import pytest
import torch
from conftest import EPS32
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_bias_gelu import assert_forward_within_bound, random_inputs

from gpudl.solutions import ch10

pytestmark = pytest.mark.triton

few = settings(max_examples=8, deadline=None, database=None)


@few
@given(shape=st.tuples(st.integers(1, 40), st.integers(1, 70)), seed=st.integers(0, 2**32 - 1))
@example(shape=(3, 1025), seed=1)  # one row past a program's block
def test_bias_gelu_in_triton_is_within_the_numba_kernels_bound(shape, seed):
    x, b, _ = random_inputs(shape, seed)
    y = ch10.bias_gelu_triton(x, b)
    assert y.shape == x.shape and not np.isnan(y).any()
    assert_forward_within_bound(y, x, b)


def test_bias_gelu_in_triton_spreads_nan_as_torch_does():
    x = np.array([[0.5, np.nan, -1.0]], np.float32)
    b = np.zeros(3, np.float32)
    y = ch10.bias_gelu_triton(x, b)
    expected = torch.nn.functional.gelu(torch.from_numpy(x)).numpy()
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected))


def layer_norm_inputs(shape, seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape[1]).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    return x, w, b


@few
@given(shape=st.tuples(st.integers(1, 20), st.integers(2, 300)), seed=st.integers(0, 2**32 - 1))
@example(shape=(2, 1000), seed=3)  # a row padded from 1,000 to a block of 1,024
@example(shape=(18, 2), seed=1)  # a row of two close values: x - mean cancels
def test_layer_norm_in_triton_matches_torch_within_its_bound(shape, seed):
    x, w, b = layer_norm_inputs(shape, seed)
    y = ch10.layer_norm_triton(x, w, b)
    assert y.shape == x.shape and not np.isnan(y).any()
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (shape[1],),
                                         torch.from_numpy(w).double(),
                                         torch.from_numpy(b).double(), eps=1e-5).numpy()
    np.testing.assert_allclose(ch10.reference_layer_norm(x, w, b), ref, rtol=1e-12, atol=1e-12)
    x_hat = (ref - b) / np.where(w == 0, 1, w)
    # x - mean is exact to a few roundings of |x| and |mean|, not of |x - mean|: over
    # sqrt(var + eps) that is (|x|_max + |mean|) / sqrt(var + eps) per rounding, large where a
    # row's values are close (two values 0.006 apart: hundreds)
    wide = x.astype(np.float64)
    cond = ((np.abs(wide).max(axis=1, keepdims=True) + np.abs(wide.mean(axis=1, keepdims=True)))
            / np.sqrt(wide.var(axis=1, keepdims=True) + 1e-5))
    bound = (shape[1] + 8) * EPS32 * (np.abs(w) * (np.abs(x_hat) + 1 + cond) + np.abs(b))
    assert (np.abs(y - ref) <= bound).all()


def test_layer_norm_of_a_constant_row_is_its_bias():
    x = np.full((2, 7), 3.0, np.float32)
    w, b = np.full(7, 2.0, np.float32), np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(ch10.layer_norm_triton(x, w, b), np.tile(b, (2, 1)))


def test_layer_norm_refuses_what_it_cannot_hold():
    x, w, b = layer_norm_inputs((2, 5), 0)
    with pytest.raises(ValueError, match="x.shape"):
        ch10.layer_norm_triton(np.zeros((1, ch10.MAX_LAYER_NORM_WIDTH + 1), np.float32),
                               np.zeros(ch10.MAX_LAYER_NORM_WIDTH + 1, np.float32),
                               np.zeros(ch10.MAX_LAYER_NORM_WIDTH + 1, np.float32))
    with pytest.raises(ValueError, match="w.shape"):
        ch10.layer_norm_triton(x, w[:4], b)
    with pytest.raises(ValueError, match="eps"):
        ch10.layer_norm_triton(x, w, b, eps=0.0)
    with pytest.raises(TypeError):
        ch10.layer_norm_triton(x.astype(np.float64), w, b)


def test_autotuning_twelve_configurations_for_twenty_lengths_takes_thirty_seconds():
    assert ch10.autotuning_seconds(12, 20) == pytest.approx(30.0)
    assert ch10.autotuning_seconds(12, 4) == pytest.approx(6.0)
    import triton.testing  # the defaults the solution assumes are Triton's

    defaults = inspect.signature(triton.testing.do_bench).parameters
    assert (defaults["warmup"].default, defaults["rep"].default) == (25, 100)
    with pytest.raises(ValueError):
        ch10.autotuning_seconds(0, 1)
