"""gpudl.kernels.nn: every layer against torch autograd in float64, flop counts, poisoned
outputs, host and device arrays, bad input."""

import numpy as np
import pytest
import torch
from conftest import EPS32
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl import backend  # noqa: F401  (first: chooses GPU or simulator before numba)

# isort: split
from numba import cuda

from gpudl.kernels import nn

# Odd shapes (batch, in, out), none a multiple of a block or a tile, and a size-1 edge.
SHAPES = [(1, 1, 1), (3, 5, 7), (13, 17, 11), (33, 9, 40)]
few = settings(max_examples=3, deadline=None, database=None)


def random(rng, *shape, scale=1.0):
    return (scale * rng.standard_normal(shape)).astype(np.float32)


def t64(x, grad=False):
    return torch.tensor(np.asarray(x), dtype=torch.float64, requires_grad=grad)


def assert_within(got, expected, bound):
    """|got - expected| <= bound elementwise (NaN fails)."""
    err = np.abs(np.asarray(got, np.float64) - np.asarray(expected, np.float64))
    assert got.shape == expected.shape
    assert (err <= bound).all(), f"largest error over bound: {np.max(err / (bound + 1e-300))}"


def linear_case(batch, in_f, out_f, seed):
    rng = np.random.default_rng(seed)
    return random(rng, batch, in_f), random(rng, in_f, out_f), random(rng, out_f), \
        random(rng, batch, out_f)


def check_linear(batch, in_f, out_f, seed):
    x, w, b, dy = linear_case(batch, in_f, out_f, seed)
    xt, wt, bt = t64(x, True), t64(w, True), t64(b, True)
    yt = xt @ wt + bt
    yt.backward(t64(dy))
    ax, aw, ab, ady = (np.abs(v.astype(np.float64)) for v in (x, w, b, dy))
    # A float32 dot product of K terms is within K eps32 (|a| @ |b|) of the exact one
    # (gpudl.kernels.matmul); adding the bias rounds once more; a column sum of n terms is
    # within n eps32 sum(|terms|). The transposes copy exactly.
    y = nn.linear_forward(x, w, b)
    assert y.dtype == np.float32 and isinstance(y, np.ndarray)
    assert_within(y, yt.detach().numpy(), (in_f + 1) * EPS32 * (ax @ aw + ab))
    dx, dw, db = nn.linear_backward(x, w, dy)
    assert_within(dx, xt.grad.numpy(), out_f * EPS32 * (ady @ aw.T))
    assert_within(dw, wt.grad.numpy(), batch * EPS32 * (ax.T @ ady))
    assert_within(db, bt.grad.numpy(), batch * EPS32 * ady.sum(axis=0))


@pytest.mark.parametrize("shape", SHAPES)
def test_linear_forward_and_backward_match_autograd(shape):
    check_linear(*shape, seed=sum(shape))


@few
@given(batch=st.integers(1, 40), in_f=st.integers(1, 40), out_f=st.integers(1, 40),
       seed=st.integers(0, 2**32 - 1))
def test_linear_matches_autograd_on_random_shapes(batch, in_f, out_f, seed):
    check_linear(batch, in_f, out_f, seed)


def test_relu_forward_and_backward_match_autograd_exactly():
    rng = np.random.default_rng(1)
    x, dy = random(rng, 7, 45), random(rng, 7, 45)
    x[0, :5] = 0.0  # the kink: torch's relu has gradient 0 at 0, and so must ours
    xt = t64(x, True)
    torch.relu(xt).backward(t64(dy))
    np.testing.assert_array_equal(nn.relu_forward(x), torch.relu(xt).detach().numpy())
    np.testing.assert_array_equal(nn.relu_backward(x, dy), xt.grad.numpy())


@pytest.mark.parametrize(("batch", "classes", "scale"), [(1, 1, 1.0), (5, 3, 1.0),
                                                          (19, 10, 3.0), (6, 7, 1e4)])
def test_softmax_cross_entropy_matches_autograd(batch, classes, scale):
    rng = np.random.default_rng(batch * classes)
    logits = random(rng, batch, classes, scale=scale)  # 1e4: exp would overflow unshifted
    labels = rng.integers(0, classes, batch)
    zt = t64(logits, True)
    lt = torch.nn.functional.cross_entropy(zt, torch.from_numpy(labels))
    lt.backward()
    loss, dlogits = nn.softmax_cross_entropy(logits, labels)
    assert isinstance(loss, float) and np.isfinite(loss)
    # Per row: the sum s of C exponentials (each within a few ulps) is within (C + 2) eps32
    # relatively, and so is each softmax entry after the division; the loss adds about
    # eps32 * (|log s| + |z_y - m|), the atomic mean batch * eps32 * loss. Generous constants.
    z = logits.astype(np.float64)
    shifted = z - z.max(axis=1, keepdims=True)
    row_scale = 1 + np.abs(shifted).max(axis=1) + np.log(np.exp(shifted).sum(axis=1))
    loss_bound = (classes + batch + 8) * EPS32 * row_scale.mean()
    assert abs(loss - lt.item()) <= loss_bound
    p = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    assert_within(dlogits, zt.grad.numpy(), (classes + 8) * EPS32 * (p + 1) / batch)


def test_softmax_cross_entropy_accepts_any_integer_labels():
    logits = random(np.random.default_rng(2), 4, 3)
    results = [nn.softmax_cross_entropy(logits, np.array([0, 2, 1, 2], dtype=dtype))
               for dtype in (np.int32, np.int64, np.uint8)]
    for loss, dlogits in results[1:]:
        assert loss == results[0][0]
        np.testing.assert_array_equal(dlogits, results[0][1])


def test_sgd_update_is_one_rounding_of_p_minus_lr_g():
    rng = np.random.default_rng(3)
    p, g = random(rng, 9, 13), random(rng, 9, 13)
    p_d = cuda.to_device(p)
    nn.sgd_update(p_d, cuda.to_device(g), 0.3)
    expected = p.astype(np.float64) - np.float32(0.3).astype(np.float64) * g
    assert_within(p_d.copy_to_host(), expected, 2 * EPS32 * (np.abs(p) + np.abs(0.3 * g)))


# ------------------------------------------------------------------------------------------
# Flop counts
# ------------------------------------------------------------------------------------------


def test_backward_of_a_linear_layer_is_twice_its_forward_in_matmul_flops():
    for batch, in_f, out_f in [*SHAPES, (512, 4096, 1024)]:
        forward = nn.linear_forward_flops(batch, in_f, out_f, bias=False)
        assert forward == 2 * batch * in_f * out_f
        assert nn.linear_backward_flops(batch, in_f, out_f, bias=False) == 2 * forward
        assert nn.linear_forward_flops(batch, in_f, out_f) == forward + batch * out_f
        assert nn.linear_backward_flops(batch, in_f, out_f) == 2 * forward + batch * out_f
    assert nn.relu_flops(12) == 12
    assert nn.softmax_cross_entropy_flops(4, 10) == 4 * 65


# ------------------------------------------------------------------------------------------
# Poisoning, host and device arrays
# ------------------------------------------------------------------------------------------


class NoLaunch:
    """Stands in for a kernel: accepts a launch configuration and writes nothing."""

    def __getitem__(self, config):
        return lambda *args: None


@pytest.mark.parametrize("kernel", ["_column_sum_kernel", "_relu_kernel",
                                    "_relu_backward_kernel", "_softmax_xent_kernel"])
def test_an_output_no_kernel_writes_stays_nan(monkeypatch, kernel):
    monkeypatch.setattr(nn, kernel, NoLaunch())
    x, w, b, dy = linear_case(3, 4, 5, seed=4)
    outputs = {
        "_column_sum_kernel": lambda: nn.linear_backward(x, w, dy)[2],
        "_relu_kernel": lambda: nn.relu_forward(x),
        "_relu_backward_kernel": lambda: nn.relu_backward(x, x),
        "_softmax_xent_kernel": lambda: nn.softmax_cross_entropy(dy, np.zeros(3, np.int64))[1],
    }
    assert np.isnan(outputs[kernel]()).all()


def test_a_nan_in_x_makes_its_row_of_y_nan():
    x, w, b, _ = linear_case(6, 5, 4, seed=5)
    x[2, 3] = np.nan
    y = nn.linear_forward(x, w, b)
    np.testing.assert_array_equal(np.isnan(y).any(axis=1), [False, False, True] + [False] * 3)


def test_device_arrays_in_give_device_arrays_out():
    x, w, b, dy = linear_case(5, 6, 7, seed=6)
    host = [nn.linear_forward(x, w, b), *nn.linear_backward(x, w, dy), nn.relu_forward(x),
            nn.relu_backward(x, x)]
    d = {k: cuda.to_device(v) for k, v in dict(x=x, w=w, b=b, dy=dy).items()}
    device = [nn.linear_forward(d["x"], d["w"], d["b"]),
              *nn.linear_backward(d["x"], d["w"], d["dy"]), nn.relu_forward(d["x"]),
              nn.relu_backward(d["x"], d["x"])]
    for h, dv in zip(host, device, strict=True):
        assert not isinstance(dv, np.ndarray)
        np.testing.assert_array_equal(dv.copy_to_host(), h)
    labels = np.array([0, 6, 3, 3, 1])
    loss, grad = nn.softmax_cross_entropy(d["dy"], cuda.to_device(labels))
    loss_h, grad_h = nn.softmax_cross_entropy(dy, labels)
    assert loss == loss_h
    np.testing.assert_array_equal(grad.copy_to_host(), grad_h)


# ------------------------------------------------------------------------------------------
# Bad input
# ------------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    x, w, b, dy = linear_case(4, 3, 2, seed=7)
    with pytest.raises(ValueError, match=r"x.shape\[1\] must equal w.shape\[0\]: got 3 and 5"):
        nn.linear_forward(x, np.zeros((5, 2), np.float32), b)
    with pytest.raises(ValueError, match=r"b.shape\[0\] must equal w.shape\[1\]"):
        nn.linear_forward(x, w, np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"dy.shape must equal"):
        nn.linear_backward(x, w, dy[:3])
    with pytest.raises(TypeError, match="w must have dtype float32, got float64"):
        nn.linear_forward(x, w.astype(np.float64), b)
    with pytest.raises(ValueError, match="b must be 1-D"):
        nn.linear_forward(x, w, b[None, :])
    with pytest.raises(ValueError, match="x must be 2-D"):
        nn.relu_forward(x[0])
    with pytest.raises(TypeError, match="x must be a NumPy array or a numba device array"):
        nn.relu_forward(x.tolist())
    with pytest.raises(ValueError, match="C-contiguous"):
        nn.relu_forward(x.T)
    with pytest.raises(TypeError, match="all host arrays or all device arrays"):
        nn.linear_forward(x, cuda.to_device(w), b)
    empty = np.zeros((0, 3), np.float32)
    for call in (lambda: nn.linear_forward(empty, w, b),
                 lambda: nn.linear_backward(empty, w, dy[:0]),
                 lambda: nn.softmax_cross_entropy(empty, np.zeros(0, np.int64))):
        with pytest.raises(ValueError, match="batch of at least one row"):
            call()


def test_bad_labels_raise_clear_errors():
    logits = random(np.random.default_rng(8), 3, 4)
    with pytest.raises(ValueError, match=r"labels must be in \[0, 4\), got \[4\]"):
        nn.softmax_cross_entropy(logits, np.array([0, 4, 1]))
    with pytest.raises(ValueError, match=r"labels must be in \[0, 4\), got \[-1\]"):
        nn.softmax_cross_entropy(cuda.to_device(logits), cuda.to_device(np.array([-1, 0, 1])))
    with pytest.raises(TypeError, match="labels must have an integer dtype, got float64"):
        nn.softmax_cross_entropy(logits, np.array([0.0, 1.0, 2.0]))
    with pytest.raises(ValueError, match=r"labels.shape must equal \(logits.shape\[0\],\)"):
        nn.softmax_cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(TypeError, match="labels must be a NumPy array like logits"):
        nn.softmax_cross_entropy(logits, [0, 1, 2])


def test_sgd_update_needs_device_arrays_of_one_shape():
    p = cuda.to_device(np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="param must be a numba device array"):
        nn.sgd_update(np.zeros(3, np.float32), p, 0.1)
    with pytest.raises(ValueError, match="grad.shape must equal param.shape"):
        nn.sgd_update(p, cuda.to_device(np.zeros(4, np.float32)), 0.1)
