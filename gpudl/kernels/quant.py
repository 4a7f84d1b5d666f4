"""Weight-only int8: one float32 scale per output channel, and the matrix-vector product that
decoding spends its time in, with the weights dequantized in memory or in registers.

Book section: *Chapter 9, "Weight-only int8"*.

:func:`quantize_int8` maps each row (output channel) ``o`` of a float32 weight ``w``
``(out, in)`` to int8 ``q[o] = round(w[o] / s_o)``, ``s_o = max_i |w[o, i]| / 127``, so that
``W~ = q s`` is within ``s_o / 2`` of ``w``; an all-zero row gets ``s_o = 0``. The
activations stay float32 (weight-only quantization; GPTQ and AWQ choose the integers more
cleverly, with the same storage). :func:`gemv_int8` computes ``y = x W~^T`` for ``x`` of shape
``(in,)`` or ``(batch, in)``:

* ``v1_dequantize_then_multiply``: ``v1_dequantize`` writes ``W~`` in float32 to device
  memory, then ``v1_gemv`` multiplies: 1 byte read, 4 written and 4 read again per
  weight, more than float32 weights alone;
* ``v2_dequantize_in_registers``: one kernel reads the int8 weights, converts each in a
  register and multiplies the row's sum by ``s_o`` once at the end: 1 byte per weight, a
  quarter of float32's and half of bf16's.

The bound (:func:`error_bound`): against the float64 product with ``W~``, each output is a
sum of ``in`` products rounded in float32 (v1 also rounds ``W~``, v2 the final scaling), so
within ``(in + 1) u sum_i |x_i| |W~_oi|``, ``u = 2**-24``; the bound is twice that,
``(in + 1) eps32 sum_i |x_i| |W~_oi|``. Against the float64 product with the original ``w``,
quantization adds at most ``s_o / 2 sum_i |x_i|`` (:func:`quantization_bound`).

Host functions take host NumPy arrays (returning host arrays) or numba device arrays
(returning device arrays); outputs are poisoned (NaN) before each launch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_choice,
    check_float32_array,
    check_host_or_device,
    check_int,
    check_kernel_array,
)
from gpudl.kernels.arrays import EPS32, poisoned, returned, to_device, zeros
from gpudl.kernels.decode import plain_launch
from gpudl.kernels.grid import blocks_to_cover

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any
Launch = Callable[..., None]

__all__ = ["VARIANTS", "quantize_int8", "dequantize_int8", "gemv_int8", "reference",
           "error_bound", "quantization_bound", "weight_bytes", "v1_dequantize", "v1_gemv",
           "v2_dequantize_in_registers", "warp_sum"]

WARP = backend.WARP_SIZE  # threads per block of the products: one warp per output row
_ELEMENTWISE = backend.pick(gpu=256, sim=32)
_MAX_BLOCKS = backend.pick(gpu=4096, sim=4)


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(q, scale)``: int8 ``(out, in)`` and float32 ``(out,)`` with ``q * scale[:, None]``
    within ``scale / 2`` of the float32 host array ``w``, row by row (module docstring)."""
    check_float32_array("w", w, 2)
    if not isinstance(w, np.ndarray):
        raise TypeError("w must be a NumPy array: weights are quantized once, on the host")
    if not np.isfinite(w).all():
        raise ValueError("w must be finite: NaN or infinity has no int8 value")
    top = np.abs(w).max(axis=1) if w.shape[1] else np.zeros(w.shape[0], np.float32)
    scale = (top / np.float32(127)).astype(np.float32)
    divisor = np.where(scale > 0, scale, 1).astype(np.float64)[:, None]
    q = np.clip(np.rint(w / divisor), -127, 127).astype(np.int8)
    return q, scale


def _check_host_inputs(x: object, q: object, scale: object, with_q: bool = True) -> None:
    """The checks of a reference's inputs: NumPy arrays ``x`` real ``(in,)`` or ``(batch,
    in)``, ``q`` integer ``(out, in)`` and ``scale`` float ``(out,)`` (without ``with_q``,
    ``q`` is not read: any ``out``, and ``x`` of any width)."""
    check_array("x", x)
    if x.ndim not in (1, 2):
        raise ValueError(f"x must be 1-D or 2-D, got {x.ndim}-D with shape {x.shape}")
    check_array("scale", scale, 1, "f")
    if with_q:
        check_array("q", q, 2, "i")
        _check_shapes(x, q, scale)


def _check_shapes(x: Array | None, q: Array, scale: Array) -> None:
    if scale.shape != (q.shape[0],):
        raise ValueError(f"scale must have one value per output row, shape ({q.shape[0]},),"
                         f" got {scale.shape}")
    in_features = q.shape[1] if x is None else x.shape[x.ndim - 1]  # (no index -1: simulated)
    if in_features != q.shape[1]:
        raise ValueError(f"x's last dimension ({in_features}) must be q's in_features "
                         f"({q.shape[1]})")


def reference(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``x @ (q * scale[:, None]).T`` in float64."""
    _check_host_inputs(x, q, scale)
    w = q.astype(np.float64) * scale.astype(np.float64)[:, None]
    return np.asarray(x, np.float64) @ w.T


def error_bound(x: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``(in + 1) eps32 |x| @ |W~|^T``: the most either variant's float32 result may differ
    from :func:`reference`, elementwise (module docstring)."""
    _check_host_inputs(x, q, scale)
    w = np.abs(q.astype(np.float64) * scale.astype(np.float64)[:, None])
    return (q.shape[1] + 1) * EPS32 * (np.abs(np.asarray(x, np.float64)) @ w.T)


def quantization_bound(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``scale_o / 2 * sum_i |x_i|``: how far the product with the rounded weights may be from
    the product with the original ones, elementwise."""
    _check_host_inputs(x, None, scale, with_q=False)
    return np.abs(np.asarray(x, np.float64)).sum(axis=-1, keepdims=True) * (
        scale.astype(np.float64) / 2)


def weight_bytes(variant: str, out_features: int, in_features: int) -> int:
    """Bytes of device memory a variant moves for the weights of one product: v1 reads the
    int8 weights and the scales, writes ``W~`` in float32 and reads it again; v2 reads the
    int8 weights and the scales once."""
    check_choice("variant", variant, tuple(VARIANTS))
    n = check_int("out_features", out_features, 0) * check_int("in_features", in_features, 0)
    return n + 4 * out_features + (8 * n if variant == "v1_dequantize_then_multiply" else 0)


# ------------------------------------------------------------------------------------------
# v1: dequantize into device memory, then a float32 product
# ------------------------------------------------------------------------------------------


# v1_dequantize: W~[o, i] = q[o, i] * scale[o], one element per thread in a grid-stride loop
# (consecutive threads, consecutive bytes in and words out).
@registry.kernel("quant_v1_dequantize", "void(int8[:, ::1], float32[::1], float32[:, ::1])")
@cuda.jit
def v1_dequantize(q, scale, w):
    start, stride = cuda.grid(1), cuda.gridsize(1)
    cols = q.shape[1]
    for e in range(start, q.size, stride):
        o, i = e // cols, e % cols
        w[o, i] = float32(q[o, i]) * scale[o]


@cuda.jit(device=True)
def warp_sum(sums, acc):
    """The 32 lanes' ``acc`` added up through shared memory ``sums``: the total on lane 0
    (the other lanes get 0); every lane has passed the second barrier when it returns."""
    lane = cuda.threadIdx.x
    sums[lane] = acc
    cuda.syncthreads()
    total = float32(0)
    if lane == 0:
        for other in range(WARP):
            total += sums[other]
    cuda.syncthreads()
    return total


# v1_gemv: y[b, o] = sum_i x[b, i] w[o, i] with one warp per output row o: lane l reads
# w[o, l], w[o, l + 32], ... (128 consecutive bytes per warp request), adds its products,
# and lane 0 adds the 32 lanes' sums from shared memory. A decode step's product at batch 1:
# every weight is read once for two flops.
@registry.kernel("quant_v1_gemv", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 reference="gpudl.kernels.quant.reference")
@cuda.jit
def v1_gemv(x, w, y):
    sums = cuda.shared.array(WARP, float32)
    o, lane = cuda.blockIdx.x, cuda.threadIdx.x
    for b in range(x.shape[0]):
        acc = float32(0)
        for i in range(lane, w.shape[1], WARP):
            acc += x[b, i] * w[o, i]
        total = warp_sum(sums, acc)
        if lane == 0:
            y[b, o] = total


# ------------------------------------------------------------------------------------------
# v2: the int8 weights converted in registers
# ------------------------------------------------------------------------------------------


# v2_dequantize_in_registers: v1_gemv reading the int8 weights themselves: each byte is
# converted to float32 in a register, the row's sum is multiplied by scale[o] once, and W~
# never exists in memory. A warp request is 32 consecutive bytes: the kernel moves a
# quarter of the bytes of a float32 product and none of v1's float32 W~.
@registry.kernel("quant_v2_dequantize_in_registers",
                 "void(float32[:, ::1], int8[:, ::1], float32[::1], float32[:, ::1])",
                 reference="gpudl.kernels.quant.reference")
@cuda.jit
def v2_dequantize_in_registers(x, q, scale, y):
    sums = cuda.shared.array(WARP, float32)
    o, lane = cuda.blockIdx.x, cuda.threadIdx.x
    for b in range(x.shape[0]):
        acc = float32(0)
        for i in range(lane, q.shape[1], WARP):
            acc += x[b, i] * float32(q[o, i])
        total = warp_sum(sums, acc)
        if lane == 0:
            y[b, o] = total * scale[o]


@registry.variant("quant", "v1_dequantize_then_multiply",
                  kernels=("quant_v1_dequantize", "quant_v1_gemv"))
def _launch_v1(x: Array, q: Array, scale: Array, y: Array, launch: Launch = plain_launch,
               workspace: Array | None = None) -> None:
    w = poisoned(q.shape) if workspace is None else workspace
    blocks = blocks_to_cover(q.size, _ELEMENTWISE, _MAX_BLOCKS)
    launch(v1_dequantize, blocks, _ELEMENTWISE, q, scale, w)
    launch(v1_gemv, q.shape[0], WARP, x, w, y)


@registry.variant("quant", "v2_dequantize_in_registers")
def _launch_v2(x: Array, q: Array, scale: Array, y: Array, launch: Launch = plain_launch
               ) -> None:
    launch(v2_dequantize_in_registers, q.shape[0], WARP, x, q, scale, y)


#: Variant name -> launcher(x, q, scale, y) on device arrays, x and y 2-D.
VARIANTS: dict[str, Callable[..., None]] = registry.variants("quant")


def _check_weights(q: Array, scale: Array) -> bool:
    check_kernel_array("q", q, 2, np.int8)
    check_float32_array("scale", scale, 1)
    on_device = check_host_or_device({"q": q, "scale": scale})
    _check_shapes(None, q, scale)
    return on_device


def dequantize_int8(q: Array, scale: Array) -> Array:
    """``q * scale[:, None]`` in float32 by ``v1_dequantize``: int8 ``(out, in)`` and
    float32 ``(out,)`` in, float32 ``(out, in)`` out."""
    on_device = _check_weights(q, scale)
    if q.size == 0:
        return zeros(q.shape, on_device)
    w = poisoned(q.shape)
    blocks = blocks_to_cover(q.size, _ELEMENTWISE, _MAX_BLOCKS)
    v1_dequantize[blocks, _ELEMENTWISE](to_device(q), to_device(scale), w)
    return returned(w, on_device)


def gemv_int8(x: Array, q: Array, scale: Array,
              variant: str = "v2_dequantize_in_registers") -> Array:
    """``x @ (q * scale[:, None]).T`` for float32 ``x`` of shape ``(in,)`` or
    ``(batch, in)``, int8 ``q`` ``(out, in)`` and float32 ``scale`` ``(out,)``, by
    ``VARIANTS[variant]``; the result has shape ``(out,)`` or ``(batch, out)``."""
    check_choice("variant", variant, tuple(VARIANTS))
    on_device = _check_weights(q, scale)
    ndim = getattr(x, "ndim", None)
    check_float32_array("x", x, ndim if ndim in (1, 2) else 2)
    check_host_or_device({"x": x, "q": q})
    _check_shapes(x, q, scale)
    in_features = q.shape[1]
    rows = x.reshape(1, in_features) if x.ndim == 1 else x
    shape = (q.shape[0],) if x.ndim == 1 else (x.shape[0], q.shape[0])
    if rows.shape[0] == 0 or q.shape[0] == 0:
        return zeros(shape, on_device)
    y = poisoned((rows.shape[0], q.shape[0]))
    if q.shape[1] == 0:
        y = zeros(y.shape, True)
    else:
        VARIANTS[variant](to_device(rows), to_device(q), to_device(scale), y)
    return returned(y.reshape(shape), on_device)
