"""Bias addition and GeLU fused into one kernel, forward and backward, and as a PyTorch
autograd function that runs the kernels on the tensors' own memory.

Book section: *Chapter 6, "Fusing the bias and the GeLU"*.

In a transformer's feed-forward network the first linear layer's output ``x`` (tokens x
features) gets a bias ``b`` and then a GeLU, ``y = gelu(x + b)`` with the exact
``gelu(z) = z Phi(z) = z (1 + erf(z / sqrt 2)) / 2``. Unfused, that is two elementwise
passes, each reading and writing every element; fused, one pass reads ``x`` and ``b`` and
writes ``y`` (8 bytes per element in float32 instead of 16), and the backward pass
``dx = dy gelu'(x + b)``, with ``gelu'(z) = Phi(z) + z phi(z)``, reads ``dy`` and ``x`` and
writes ``dx``: it recomputes ``x + b`` instead of storing it. Megatron-LM fuses the same
pair in its column-parallel layer, where the bias is the rank's own slice and no
communication is needed. The bias gradient is ``dx`` summed over the tokens.

Host functions take float32 NumPy arrays (returning NumPy arrays) or numba device arrays
(returning device arrays); outputs are poisoned (NaN) before the launch.
"""

from __future__ import annotations

import math
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
import torch
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_array, check_equal, check_tensor
from gpudl.interop import as_kernel_array
from gpudl.kernels.arrays import check_arrays, poisoned, returned, to_device
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.nn import MAX_BLOCKS, THREADS_PER_BLOCK

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "BiasGeLU",
    "bias_gelu",
    "bias_gelu_backward",
    "bias_gelu_tensor",
    "reference",
    "reference_backward",
]

_INV_SQRT2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


def reference(x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``gelu(x + b)`` in float64 (``x`` 2-D, ``b`` one value per column)."""
    _check_bias(check_array("x", x, 2), check_array("b", b, 1))
    z = np.asarray(x, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    return 0.5 * z * (1.0 + np.vectorize(math.erf)(z * _INV_SQRT2))


def reference_backward(dy: np.ndarray, x: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``dy * gelu'(x + b)`` in float64: the gradient with respect to ``x`` (and, summed over
    the rows, to ``b``)."""
    _check_bias(check_array("x", x, 2), check_array("b", b, 1))
    check_equal("dy.shape", check_array("dy", dy, 2).shape, "x.shape", x.shape)
    z = np.asarray(x, dtype=np.float64) + np.asarray(b, dtype=np.float64)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z * _INV_SQRT2))
    return np.asarray(dy, dtype=np.float64) * (cdf + z * np.exp(-0.5 * z * z) * _INV_SQRT_2PI)


# One pass, grid-stride over the elements (row-major): each thread reads x[i, j] and b[j],
# and writes y[i, j]. Neighbouring threads touch neighbouring words (coalesced), and b is a
# row's worth of words that the cache serves to every row.
@registry.kernel("bias_gelu_forward", "void(float32[:, ::1], float32[::1], float32[:, ::1])",
                 reference="gpudl.kernels.bias_gelu.reference")
@cuda.jit
def _forward_kernel(x, b, y):
    for idx in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        i, j = idx // x.shape[1], idx % x.shape[1]
        z = x[i, j] + b[j]
        y[i, j] = float32(0.5) * z * (float32(1.0) + math.erf(z * float32(_INV_SQRT2)))


# The backward pass recomputes z = x + b rather than reading a stored copy, and writes
# dx = dy * (Phi(z) + z phi(z)) in the same single pass.
@registry.kernel("bias_gelu_backward",
                 "void(float32[:, ::1], float32[:, ::1], float32[::1], float32[:, ::1])",
                 reference="gpudl.kernels.bias_gelu.reference_backward")
@cuda.jit
def _backward_kernel(dy, x, b, dx):
    for idx in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        i, j = idx // x.shape[1], idx % x.shape[1]
        z = x[i, j] + b[j]
        cdf = float32(0.5) * (float32(1.0) + math.erf(z * float32(_INV_SQRT2)))
        pdf = math.exp(float32(-0.5) * z * z) * float32(_INV_SQRT_2PI)
        dx[i, j] = dy[i, j] * (cdf + z * pdf)


def _check_bias(x: Array, b: Array) -> None:
    check_equal("b.shape[0]", b.shape[0], "x.shape[1]", x.shape[1])


def bias_gelu(x: Array, b: Array) -> Array:
    """``gelu(x + b)`` for float32 ``x`` (rows, features) and ``b`` (features,), one kernel."""
    on_device = check_arrays(x=(x, 2), b=(b, 1))
    _check_bias(x, b)
    y = poisoned(x.shape)
    if y.size:
        blocks = blocks_to_cover(y.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _forward_kernel[blocks, THREADS_PER_BLOCK](to_device(x), to_device(b), y)
    return returned(y, on_device)


def bias_gelu_backward(dy: Array, x: Array, b: Array) -> Array:
    """``dx = dy * gelu'(x + b)`` for float32 arrays, one kernel; ``db`` is ``dx`` summed
    over the rows."""
    on_device = check_arrays(dy=(dy, 2), x=(x, 2), b=(b, 1))
    _check_bias(x, b)
    check_equal("dy.shape", dy.shape, "x.shape", x.shape)
    dx = poisoned(x.shape)
    if dx.size:
        blocks = blocks_to_cover(dx.size, THREADS_PER_BLOCK, MAX_BLOCKS)
        _backward_kernel[blocks, THREADS_PER_BLOCK](to_device(dy), to_device(x), to_device(b), dx)
    return returned(dx, on_device)


def _poisoned_like(t: torch.Tensor) -> torch.Tensor:
    return torch.full_like(t, float("nan"), memory_format=torch.contiguous_format)


class BiasGeLU(torch.autograd.Function):
    """``gelu(x + b)`` for a float32 2-D tensor ``x`` and 1-D ``b``, forward and backward by
    the kernels above, on the tensors' own memory (``gpudl.interop.as_kernel_array``)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``gelu(x + b)``, into a new NaN-poisoned tensor; keeps ``x`` and ``b``."""
        x, b = x.contiguous(), b.contiguous()
        y = _poisoned_like(x)
        if y.numel():
            blocks = blocks_to_cover(y.numel(), THREADS_PER_BLOCK, MAX_BLOCKS)
            _forward_kernel[blocks, THREADS_PER_BLOCK](
                as_kernel_array(x, "x"), as_kernel_array(b, "b"), as_kernel_array(y, "y"))
        ctx.save_for_backward(x, b)
        return y

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dx, db)``: ``dy * gelu'(x + b)`` by one kernel, and its sum over the rows."""
        x, b = ctx.saved_tensors
        dy = dy.contiguous()
        dx = _poisoned_like(x)
        if dx.numel():
            blocks = blocks_to_cover(dx.numel(), THREADS_PER_BLOCK, MAX_BLOCKS)
            _backward_kernel[blocks, THREADS_PER_BLOCK](
                as_kernel_array(dy, "dy"), as_kernel_array(x, "x"), as_kernel_array(b, "b"),
                as_kernel_array(dx, "dx"))
        return dx, dx.sum(dim=0)


def bias_gelu_tensor(x: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``gelu(x + b)`` through :class:`BiasGeLU` for ``x`` of any rank whose last dimension
    is ``b``'s length (the leading dimensions are flattened into rows), float32 only."""
    for name, t in (("x", x), ("b", b)):
        check_tensor(name, t, (torch.float32,))
    if b.dim() != 1 or x.dim() < 1 or x.shape[-1] != b.shape[0]:
        raise ValueError(f"b must be 1-D with x.shape[-1] elements, got x {tuple(x.shape)} "
                         f"and b {tuple(b.shape)}")
    return BiasGeLU.apply(x.reshape(-1, x.shape[-1]), b).view(x.shape)
