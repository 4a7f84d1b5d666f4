"""gpudl.kernels.bias_gelu: the fused bias + GeLU kernels against float64 references within a
derived rounding bound, on host and device arrays, poisoned outputs, the autograd function
against torch's GeLU, and bad input.

The bounds, with u = eps32 / 2 and z = x + b rounded once. Forward, y = z (1 + erf(z c)) / 2:
z, z c and c = 1/sqrt(2) carry a relative error of u each, which erf' <= 1.13 and
|t| exp(-t^2) <= 0.43 turn into at most 1.5 u in erf; erf itself is within 2 ulp (<= 4 u);
the sum 1 + erf adds u on a value <= 2: 1 + erf is off by at most 7.5 u, and y by
|z| 7.5 u / 2 plus 2 u |y| for the roundings of z and the last product. That is below
2 eps32 (|z| + |y|). Backward, dx = dy (Phi(z) + z phi(z)): Phi is off by half of 1 + erf's
7.5 u; z phi(z) by |z phi(z)| (3 z^2 + 7) u <= 2.7 u (the exponent's argument, exp's 2 ulp, the
constant and the products); the sum by u |gelu'|: gelu' is off by at most about 8 u = 4 eps32,
and dx by that times |dy| plus one more rounding, eps32 |dx|."""

import numpy as np
import pytest
import torch
from conftest import EPS32
from hypothesis import example, given, settings
from hypothesis import strategies as st

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from numba import cuda

from gpudl.interop import tensor_device
from gpudl.kernels import bias_gelu

few = settings(max_examples=8, deadline=None, database=None)
shapes = st.tuples(st.integers(1, 40), st.integers(1, 70))  # rows x features, off any block


def random_inputs(shape, seed, scale=3.0):
    rng = np.random.default_rng(seed)
    x = (scale * rng.standard_normal(shape)).astype(np.float32)
    b = rng.standard_normal(shape[1]).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    return x, b, dy


def assert_forward_within_bound(y, x, b):
    ref = bias_gelu.reference(x, b)
    z = x.astype(np.float64) + b
    assert (np.abs(y - ref) <= 2 * EPS32 * (np.abs(z) + np.abs(ref))).all()


def assert_backward_within_bound(dx, dy, x, b):
    ref = bias_gelu.reference_backward(dy, x, b)
    assert (np.abs(dx - ref) <= 4 * EPS32 * np.abs(dy) + EPS32 * np.abs(ref)).all()


@few
@given(shape=shapes, seed=st.integers(0, 2**32 - 1))
@example(shape=(1, 1), seed=0)
def test_forward_and_backward_match_the_reference(shape, seed):
    x, b, dy = random_inputs(shape, seed)
    assert_forward_within_bound(bias_gelu.bias_gelu(x, b), x, b)
    assert_backward_within_bound(bias_gelu.bias_gelu_backward(dy, x, b), dy, x, b)


def test_far_tails_and_zero():
    # z = -12: 1 + erf underflows towards 0 and y to -0; z = 12: y = z; z = 0: y = 0, gelu' = 1/2
    x = np.array([[-12.0, -5.0, 0.0, 5.0, 12.0]], dtype=np.float32)
    b = np.zeros(5, dtype=np.float32)
    y = bias_gelu.bias_gelu(x, b)
    assert_forward_within_bound(y, x, b)
    assert y[0, 4] == 12.0 and y[0, 2] == 0.0
    dx = bias_gelu.bias_gelu_backward(np.ones_like(x), x, b)
    assert_backward_within_bound(dx, np.ones_like(x), x, b)
    assert dx[0, 2] == 0.5


def test_device_arrays_in_device_arrays_out():
    x, b, dy = random_inputs((9, 13), 1)
    y = bias_gelu.bias_gelu(cuda.to_device(x), cuda.to_device(b))
    dx = bias_gelu.bias_gelu_backward(cuda.to_device(dy), cuda.to_device(x), cuda.to_device(b))
    assert getattr(y, "__cuda_ndarray__", False) and getattr(dx, "__cuda_ndarray__", False)
    assert_forward_within_bound(y.copy_to_host(), x, b)
    assert_backward_within_bound(dx.copy_to_host(), dy, x, b)


def test_nan_input_gives_nan_where_it_is_and_nowhere_else():
    x, b, _ = random_inputs((3, 4), 2)
    x[1, 2] = np.nan
    y = bias_gelu.bias_gelu(x, b)
    assert np.isnan(y[1, 2]) and np.isnan(y).sum() == 1


def test_empty_input_gives_an_empty_output():
    assert bias_gelu.bias_gelu(np.zeros((0, 5), np.float32), np.zeros(5, np.float32)).shape == (
        0,
        5,
    )


@pytest.mark.parametrize("args, error, match", [
    ((np.zeros((2, 3)), np.zeros(3, np.float32)), TypeError, "float32"),
    ((np.zeros((2, 3), np.float32), np.zeros(4, np.float32)), ValueError, "b.shape"),
    ((np.zeros(3, np.float32), np.zeros(3, np.float32)), ValueError, "2-D"),
    (([[1.0]], np.zeros(1, np.float32)), TypeError, "NumPy array"),
])
def test_bad_arrays_are_rejected(args, error, match):
    with pytest.raises(error, match=match):
        bias_gelu.bias_gelu(*args)


# --- the autograd function ------------------------------------------------------------------


def test_autograd_function_matches_torch_gelu_forward_and_backward():
    x, b, dy = random_inputs((2 * 5, 21), 3)
    device = tensor_device()
    xt = torch.tensor(x, device=device).view(2, 5, 21).requires_grad_()  # any leading dims
    bt = torch.tensor(b, device=device, requires_grad=True)
    y = bias_gelu.bias_gelu_tensor(xt, bt)
    y.backward(torch.tensor(dy, device=device).view(2, 5, 21))
    x64, b64 = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, b))
    y64 = torch.nn.functional.gelu(x64 + b64)
    y64.backward(torch.tensor(dy, dtype=torch.float64))
    assert y.shape == (2, 5, 21)
    assert_forward_within_bound(y.detach().cpu().numpy().reshape(10, 21), x, b)
    torch.testing.assert_close(y.detach().cpu().double().reshape(10, 21), y64.detach(),
                               rtol=2e-6, atol=2e-6)
    assert_backward_within_bound(xt.grad.cpu().numpy().reshape(10, 21), dy, x, b)
    # db is dx summed over the 10 rows: dx's bound per term, plus the float32 sum's
    # (n - 1) eps32 sum |dx| (any order of addition)
    ref_dx = bias_gelu.reference_backward(dy, x, b)
    bound = (4 * EPS32 * np.abs(dy) + EPS32 * np.abs(ref_dx)).sum(0) + 9 * EPS32 * np.abs(
        ref_dx).sum(0)
    assert (np.abs(bt.grad.cpu().numpy() - b64.grad.numpy()) <= bound).all()


@pytest.mark.parametrize("x, b, error", [
    (torch.zeros(2, 3, dtype=torch.float64), torch.zeros(3), TypeError),
    (torch.zeros(2, 3), torch.zeros(4), ValueError),
    (torch.zeros(2, 3), torch.zeros(1, 3), ValueError),
    (np.zeros((2, 3), np.float32), torch.zeros(3), TypeError),
])
def test_autograd_function_rejects_bad_tensors(x, b, error):
    if isinstance(x, torch.Tensor):
        x, b = x.to(tensor_device()), b.to(tensor_device())
    with pytest.raises(error):
        bias_gelu.bias_gelu_tensor(x, b)


@pytest.mark.gpu
def test_kernel_runs_on_cuda_tensors_in_place():
    x, b, dy = random_inputs((1000, 333), 4)
    xt, bt = torch.tensor(x, device="cuda"), torch.tensor(b, device="cuda")
    y = bias_gelu.bias_gelu_tensor(xt.requires_grad_(), bt)
    y.backward(torch.tensor(dy, device="cuda"))
    assert y.is_cuda and backend.name() == "cuda"
    assert_forward_within_bound(y.detach().cpu().numpy(), x, b)
    assert_backward_within_bound(xt.grad.cpu().numpy(), dy, x, b)
