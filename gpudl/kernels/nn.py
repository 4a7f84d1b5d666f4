"""Layers of a neural network as kernels: linear, ReLU and softmax cross-entropy, forward and
backward.

Book section: Chapter 3, "Backpropagation from the book's kernels".

The backward pass of a linear layer ``y = x @ w + b`` is matrix products (claim C8):
``dx = dy @ w.T`` and ``dw = x.T @ dy``, each as large as the forward product, plus
``db = dy`` summed over the batch. So the backward of the matmuls costs exactly twice their
forward: 2 flops per weight and sample forward, 4 backward, 6 in all (C = 6ND, Kaplan et al.
2020). Each public function documents its flop count, and the ``*_flops`` helpers return it
(``matmul_flops`` is ``gpudl.kernels.matmul.flops``); a multiply-add counts as 2 flops, and
``exp``, ``log`` and a comparison as 1 each.

Every product goes through one internal function, ``gpudl.kernels.matmul.matmul`` with the
variant :data:`MATMUL_VARIANT`. Transposes are explicit: ``w.T`` and ``x.T`` are
written by ``gpudl.kernels.transpose.transpose`` before the product, so a single plain
``(M, K) @ (K, N)`` kernel serves the forward and the backward.

Host functions take float32 host NumPy arrays (and return host arrays) or numba device
arrays (and return device arrays); outputs are allocated poisoned (NaN) before a launch.
"""

from __future__ import annotations

import math
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import (
    check_bool,
    check_equal,
    check_float32_array,
    check_int,
    check_positive,
    is_device_array,
)
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.matmul import flops as matmul_flops
from gpudl.kernels.matmul import matmul
from gpudl.kernels.transpose import transpose

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "linear_forward_flops",
    "linear_backward_flops",
    "relu_flops",
    "softmax_cross_entropy_flops",
    "linear_forward",
    "linear_backward",
    "relu_forward",
    "relu_backward",
    "softmax_cross_entropy",
    "sgd_update",
    "MATMUL_VARIANT",
    "LAUNCHES",
]

#: Threads per block of the elementwise kernels, and at most this many blocks: a grid-stride
#: loop covers the rest (about one wave on a large GPU, one warp on the simulator).
THREADS_PER_BLOCK = backend.pick(gpu=256, sim=32)
MAX_BLOCKS = backend.pick(gpu=1024, sim=1)

# ------------------------------------------------------------------------------------------
# Flop counts
# ------------------------------------------------------------------------------------------


def linear_forward_flops(batch: int, in_features: int, out_features: int,
                         bias: bool = True) -> int:
    """Flops of :func:`linear_forward`: the product, plus one addition per output for the
    bias (``bias=False`` leaves it out)."""
    _check_sizes(batch, in_features, out_features, bias)
    return matmul_flops(batch, in_features, out_features) + (batch * out_features if bias else 0)


def linear_backward_flops(batch: int, in_features: int, out_features: int,
                          bias: bool = True) -> int:
    """Flops of :func:`linear_backward`: two products of the forward's size (``dx`` and
    ``dw``), plus ``batch`` additions per output feature for ``db``."""
    _check_sizes(batch, in_features, out_features, bias)
    product = matmul_flops(batch, in_features, out_features)
    return 2 * product + (batch * out_features if bias else 0)


def relu_flops(size: int) -> int:
    """Flops of :func:`relu_forward` or :func:`relu_backward`: one comparison per element."""
    return check_int("size", size, 0)


def softmax_cross_entropy_flops(batch: int, classes: int) -> int:
    """Flops of :func:`softmax_cross_entropy`: per row of ``C`` logits, ``C - 1`` comparisons
    (max), ``C`` subtractions, exponentials and additions (sum), a reciprocal and a log,
    ``2 C`` multiplications and one subtraction (gradient), two subtractions and an addition
    (loss): ``6 C + 5``."""
    return check_int("batch", batch, 0) * (6 * check_int("classes", classes, 1) + 5)


# ------------------------------------------------------------------------------------------
# Matmul
# ------------------------------------------------------------------------------------------

#: The matmul kernel behind every product, the fastest variant of ``gpudl.kernels.matmul``
#: on each backend. On the simulator the shared-memory variants (v3 to v5) pay for two
#: barriers per K slab across 256 or more threads even for a 16 x 10 output; v2 has no
#: barrier and measured fastest at this chapter's sizes (e.g. 0.15 s against v5's 1.9 s for
#: a (16, 64) @ (64, 32) product).
MATMUL_VARIANT = backend.pick(gpu="v5_register_2d", sim="v2_coalesced")


def _matmul(a: Array, b: Array) -> Array:
    """``a @ b`` for float32 device arrays, into a new device array."""
    return matmul(a, b, variant=MATMUL_VARIANT)


# ------------------------------------------------------------------------------------------
# Elementwise and per-row kernels
# ------------------------------------------------------------------------------------------


# Grid-stride over the elements of y (row-major): y[i, j] += b[j].
@registry.kernel("nn_add_bias", "void(float32[:, ::1], float32[::1])")
@cuda.jit
def _add_bias_kernel(y, b):
    for idx in range(cuda.grid(1), y.size, cuda.gridsize(1)):
        i, j = idx // y.shape[1], idx % y.shape[1]
        y[i, j] += b[j]


# One thread per column: neighbouring threads read neighbouring words of each row (coalesced)
# and walk down the batch, so no two threads write the same output and no atomics are needed.
@registry.kernel("nn_column_sum", "void(float32[:, ::1], float32[::1])")
@cuda.jit
def _column_sum_kernel(dy, db):
    j = cuda.grid(1)
    if j < db.size:
        acc = float32(0.0)
        for i in range(dy.shape[0]):
            acc += dy[i, j]
        db[j] = acc


# Zero where x < 0, x itself elsewhere: a NaN stays NaN, as torch.relu keeps it (the test
# "x > 0" would be False for NaN and turn it into 0, hiding it).
@registry.kernel("nn_relu", "void(float32[:, ::1], float32[:, ::1])")
@cuda.jit
def _relu_kernel(x, out):
    for idx in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        i, j = idx // x.shape[1], idx % x.shape[1]
        out[i, j] = float32(0.0) if x[i, j] < 0 else x[i, j]


# The derivative of relu is 0 where x <= 0 (0 at x = 0, as in torch) and 1 elsewhere: the
# gradient passes where x is NaN, as torch's does (it tests "x <= 0", False for NaN).
@registry.kernel("nn_relu_backward", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])")
@cuda.jit
def _relu_backward_kernel(x, dy, dx):
    for idx in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        i, j = idx // x.shape[1], idx % x.shape[1]
        dx[i, j] = float32(0.0) if x[i, j] <= 0 else dy[i, j]


# One thread per row of logits z with label y. Subtracting the row's max m before exp keeps
# every exp(z_j - m) in [0, 1] (0 when it underflows), so nothing overflows, and the sum s is
# at least 1, so its log is safe: loss = log(s) - (z_y - m), softmax_j = exp(z_j - m) / s.
# The exponentials are parked in dlogits between the two passes. Each row adds its loss to
# one accumulator.
@registry.kernel("nn_softmax_xent",
                 "void(float32[:, ::1], int32[::1], float32, float32[:, ::1], float32[::1])",
                 "void(float32[:, ::1], int64[::1], float32, float32[:, ::1], float32[::1])",
                 "void(float32[:, ::1], uint8[::1], float32, float32[:, ::1], float32[::1])")
@cuda.jit
def _softmax_xent_kernel(logits, labels, inv_batch, dlogits, loss_sum):
    row = cuda.grid(1)
    if row < logits.shape[0]:
        n = logits.shape[1]
        m = logits[row, 0]
        for j in range(1, n):
            m = max(m, logits[row, j])
        s = float32(0.0)
        for j in range(n):
            e = math.exp(logits[row, j] - m)
            dlogits[row, j] = e
            s += e
        inv_s = float32(1.0) / s
        label = labels[row]
        for j in range(n):
            p = dlogits[row, j] * inv_s
            if j == label:
                p -= float32(1.0)
            dlogits[row, j] = p * inv_batch
        cuda.atomic.add(loss_sum, 0, math.log(s) - (logits[row, label] - m))


@registry.kernel("nn_sgd", "void(float32[::1], float32[::1], float32)")
@cuda.jit
def _sgd_kernel(param, grad, lr):
    for i in range(cuda.grid(1), param.size, cuda.gridsize(1)):
        param[i] -= lr * grad[i]


# ------------------------------------------------------------------------------------------
# Public layers
# ------------------------------------------------------------------------------------------

#: The kernels each layer function below launches on inputs that are not empty. A product
#: (and a transpose of each factor it takes transposed) is one kernel each, and so is a bias,
#: a column sum, an activation, a loss and an update. A profile of a training step counts them
#: (Appendix E, ``tests/test_profiles.py``).
LAUNCHES = {"linear_forward": 2, "linear_backward": 5, "relu_forward": 1, "relu_backward": 1,
            "softmax_cross_entropy": 1, "sgd_update": 1}


def linear_forward(x: Array, w: Array, b: Array) -> Array:
    """``y = x @ w + b`` for ``x`` (batch, in), ``w`` (in, out) and ``b`` (out,), float32.

    Flops: :func:`linear_forward_flops`, ``2 * batch * in * out + batch * out``."""
    on_device = check_arrays(x=(x, 2), w=(w, 2), b=(b, 1))
    _check_batch(x)
    check_equal("x.shape[1]", x.shape[1], "w.shape[0]", w.shape[0])
    check_equal("b.shape[0]", b.shape[0], "w.shape[1]", w.shape[1])
    x_d, w_d, b_d = (to_device(v) for v in (x, w, b))
    y = _matmul(x_d, w_d)
    if y.size:
        blocks = blocks_to_cover(y.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _add_bias_kernel[blocks, THREADS_PER_BLOCK](y, b_d)
    return returned(y, on_device)


def linear_backward(x: Array, w: Array, dy: Array) -> tuple[Array, Array, Array]:
    """``(dx, dw, db)`` of ``y = x @ w + b`` given ``dy = dL/dy`` of shape (batch, out):
    ``dx = dy @ w.T``, ``dw = x.T @ dy`` and ``db = dy.sum(axis=0)`` (a column-sum kernel).
    The transposes are written by ``gpudl.kernels.transpose.transpose``.

    Flops: :func:`linear_backward_flops`, ``4 * batch * in * out + batch * out``."""
    on_device = check_arrays(x=(x, 2), w=(w, 2), dy=(dy, 2))
    _check_batch(x)
    check_equal("x.shape[1]", x.shape[1], "w.shape[0]", w.shape[0])
    check_equal("dy.shape", dy.shape, "(x.shape[0], w.shape[1])", (x.shape[0], w.shape[1]))
    x_d, w_d, dy_d = (to_device(v) for v in (x, w, dy))
    dx = _matmul(dy_d, transpose(w_d))
    dw = _matmul(transpose(x_d), dy_d)
    db = poisoned((dy.shape[1],))
    if db.size:
        blocks = blocks_to_cover(db.size, THREADS_PER_BLOCK)
        _column_sum_kernel[blocks, THREADS_PER_BLOCK](dy_d, db)
    return returned(dx, on_device), returned(dw, on_device), returned(db, on_device)


def relu_forward(x: Array) -> Array:
    """``max(x, 0)`` elementwise for a 2-D float32 array. Flops: :func:`relu_flops`."""
    on_device = check_arrays(x=(x, 2))
    x_d = to_device(x)
    out = poisoned(x.shape)
    if out.size:
        blocks = blocks_to_cover(out.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _relu_kernel[blocks, THREADS_PER_BLOCK](x_d, out)
    return returned(out, on_device)


def relu_backward(x: Array, dy: Array) -> Array:
    """``dy * (x > 0)``: the gradient through ``relu_forward(x)``. Flops: :func:`relu_flops`."""
    on_device = check_arrays(x=(x, 2), dy=(dy, 2))
    check_equal("dy.shape", dy.shape, "x.shape", x.shape)
    x_d, dy_d = to_device(x), to_device(dy)
    dx = poisoned(x.shape)
    if dx.size:
        blocks = blocks_to_cover(dx.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _relu_backward_kernel[blocks, THREADS_PER_BLOCK](x_d, dy_d, dx)
    return returned(dx, on_device)


def softmax_cross_entropy(logits: Array, labels: Array) -> tuple[float, Array]:
    """``(loss, dlogits)``: the mean over the batch of ``-log softmax(logits)[label]`` and
    its gradient ``(softmax(logits) - onehot(labels)) / batch``, one thread per row.

    ``labels`` is a 1-D integer array with one class index in ``[0, classes)`` per row.
    Flops: :func:`softmax_cross_entropy_flops`, ``batch * (6 * classes + 5)``."""
    on_device = check_arrays(logits=(logits, 2))
    _check_batch(logits, "logits")
    if logits.shape[1] == 0:
        raise ValueError(f"logits must have at least one class, got shape {logits.shape}")
    labels_host = _check_labels(labels, on_device, logits.shape)
    batch = logits.shape[0]
    dlogits = poisoned(logits.shape)
    loss_sum = cuda.to_device(np.zeros(1, dtype=np.float32))
    blocks = blocks_to_cover(batch, THREADS_PER_BLOCK)
    _softmax_xent_kernel[blocks, THREADS_PER_BLOCK](
        to_device(logits), labels if on_device else cuda.to_device(labels_host),
        np.float32(1.0 / batch), dlogits, loss_sum)
    return float(loss_sum.copy_to_host()[0]) / batch, returned(dlogits, on_device)


def sgd_update(param: Array, grad: Array, lr: float) -> None:
    """``param -= lr * grad`` in place, for float32 device arrays of one shape and a finite
    learning rate ``lr > 0``.

    Flops: 2 per element."""
    for name, v in (("param", param), ("grad", grad)):
        if not is_device_array(v):
            raise TypeError(f"sgd_update updates device arrays in place: {name} must be a "
                            f"numba device array, got {type(v).__name__}")
        check_float32_array(name, v, v.ndim)
    check_equal("grad.shape", grad.shape, "param.shape", param.shape)
    check_positive("lr", lr)
    if param.size:
        blocks = blocks_to_cover(param.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _sgd_kernel[blocks, THREADS_PER_BLOCK](param.ravel(), grad.ravel(), np.float32(lr))


# ------------------------------------------------------------------------------------------
# Input checks and the host/device plumbing
# ------------------------------------------------------------------------------------------


def _check_sizes(batch: int, in_features: int, out_features: int, bias: bool) -> None:
    for name, size in (("batch", batch), ("in_features", in_features),
                       ("out_features", out_features)):
        check_int(name, size, 0)
    check_bool("bias", bias)


def _check_batch(x: Array, name: str = "x") -> None:
    if x.shape[0] == 0:
        raise ValueError(f"{name} must have a batch of at least one row, got shape {x.shape}")


def _check_labels(labels: object, on_device: bool, logits_shape: tuple[int, int]) -> np.ndarray:
    """Check labels against the logits; return them as a host array."""
    if on_device != is_device_array(labels) or not (on_device or isinstance(labels, np.ndarray)):
        kind = "a numba device array" if on_device else "a NumPy array"
        raise TypeError(f"labels must be {kind} like logits, got {type(labels).__name__}")
    if not np.issubdtype(labels.dtype, np.integer):
        raise TypeError(f"labels must have an integer dtype, got {labels.dtype}")
    check_equal("labels.shape", labels.shape, "(logits.shape[0],)", (logits_shape[0],))
    host = labels.copy_to_host() if on_device else labels
    bad = (host < 0) | (host >= logits_shape[1])
    if bad.any():
        raise ValueError(f"labels must be in [0, {logits_shape[1]}), got {host[bad][:5]} "
                         f"({int(bad.sum())} out of range)")
    return np.ascontiguousarray(host)
