"""Memory-access patterns: coalesced, strided and misaligned copies.

Book section: Chapter 2, "Coalescing" (the three copies) and "Bytes in flight" (copy v2 and
v3); the transposes are :mod:`gpudl.kernels.transpose`'s.

Global memory is read in 32-byte sectors. When the 32 lanes of a warp load 32 consecutive
float32 words starting on a 128-byte boundary, the warp's request touches 4 sectors and uses
every byte of them (coalesced); any other pattern touches more sectors for the same useful
bytes. :mod:`gpudl.trace` counts the sectors of each request on the simulator.

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return device arrays), float32 and C-contiguous. Outputs are allocated poisoned (NaN) before a
launch, so an element that a kernel forgets to write is caught by the comparison with the
reference. Empty results are returned without a launch (a grid of 0 blocks is an error).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32, uint64

from gpudl import registry
from gpudl.checks import check_array, check_choice, check_float32_array, check_int, check_ints
from gpudl.kernels.arrays import launch_into_poisoned
from gpudl.kernels.elementwise import VECTORS, K
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.wide import WIDTH, check_aligned, load4, store4

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "coalescing_report",
    "THREADS_PER_BLOCK",
    "COPY_VARIANTS",
    "reference_copy",
    "reference_copy_strided",
    "reference_copy_offset",
    "copy_v1_naive",
    "copy_v2_k_loads",
    "copy_v3_vector4",
    "copy_strided_kernel",
    "copy_offset_kernel",
    "launch_copy_v1_naive",
    "launch_copy_v2_k_loads",
    "launch_copy_v3_vector4",
    "launch_copy_strided",
    "launch_copy_offset",
    "copy",
    "copy_strided",
    "copy_offset",
]

THREADS_PER_BLOCK = 256

# ------------------------------------------------------------------------------------------
# Copies: the same bytes out, different addresses in
# ------------------------------------------------------------------------------------------


def reference_copy(x: np.ndarray) -> np.ndarray:
    """``x`` copied, in NumPy."""
    return np.array(check_array("x", x, 1), copy=True)


def reference_copy_strided(x: np.ndarray, stride: int) -> np.ndarray:
    """``x[::stride]`` copied, in NumPy."""
    check_array("x", x, 1)
    return np.ascontiguousarray(x[::check_int("stride", stride, 1)])


def reference_copy_offset(x: np.ndarray, offset: int) -> np.ndarray:
    """``x[offset:]`` copied, in NumPy."""
    _check_offset(check_array("x", x, 1), offset)
    return np.array(x[offset:], copy=True)


# copy_v1_naive: one thread per element. Lane k of a warp reads word k of a 32-word run that
# starts on a 128-byte boundary (the allocation is 256-byte aligned and each warp starts at a
# multiple of 32 words), so a warp's read is one request for 4 sectors of 32 bytes, all used.
# Every other copy here moves the same bytes out and is measured against this one.
@registry.kernel("copy_v1_naive", "void(float32[::1], float32[::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.memory.reference_copy")
@cuda.jit
def copy_v1_naive(x, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i]


# copy_v2_k_loads: each thread copies K elements a block-width apart, all K loads
# issued before the first store: K times the bytes in flight of copy_v1_naive, whose thread
# has one 4-byte load outstanding (Little's law: bandwidth = bytes in flight / latency).
# Unsigned indices against an unsigned size (as in elementwise.v3_k_loads); only the last
# block tests each element.
@registry.kernel("copy_v2_k_loads", "void(float32[::1], float32[::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.memory.reference_copy")
@cuda.jit
def copy_v2_k_loads(x, out):
    n = uint64(out.size)
    step = uint64(cuda.blockDim.x)
    first = uint64(cuda.blockIdx.x) * step * uint64(K) + uint64(cuda.threadIdx.x)
    if first + uint64(K - 1) * step < n:
        v = cuda.local.array(K, float32)
        for k in range(K):  # unrolled: K loads in flight
            v[k] = x[first + uint64(k) * step]
        for k in range(K):
            out[first + uint64(k) * step] = v[k]
    else:
        for k in range(K):
            i = first + uint64(k) * step
            if i < n:
                out[i] = x[i]


# copy_v3_vector4: the same bytes in flight with 16-byte loads and stores
# (gpudl.kernels.wide): VECTORS vectors of 4 floats per thread, then a scalar tail of the
# last n % 4 elements. Both arrays must start on a 16-byte boundary.
@registry.kernel("copy_v3_vector4", "void(float32[::1], float32[::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.memory.reference_copy")
@cuda.jit
def copy_v3_vector4(x, out):
    n = uint64(out.size)
    vectors = n // uint64(WIDTH)
    step = uint64(cuda.blockDim.x)
    first = uint64(cuda.blockIdx.x) * step * uint64(VECTORS) + uint64(cuda.threadIdx.x)
    if first + uint64(VECTORS - 1) * step < vectors:
        j0, j1 = first * uint64(WIDTH), (first + step) * uint64(WIDTH)
        v0, v1 = load4(x, j0), load4(x, j1)
        store4(out, j0, v0)
        store4(out, j1, v1)
    else:
        for k in range(VECTORS):
            j = (first + uint64(k) * step) * uint64(WIDTH)
            if j < vectors * uint64(WIDTH):
                store4(out, j, load4(x, j))
    i = vectors * uint64(WIDTH) + uint64(cuda.grid(1))
    if i < n:
        out[i] = x[i]


# copy_strided_kernel: lane k reads x[k * stride]. The warp's 32 words are stride words
# apart: stride 2 spreads them over 8 sectors (half of each sector wasted), stride 8 or more
# puts every lane in a sector of its own (32 sectors, 28 of every 32 bytes fetched for
# nothing). The writes stay coalesced, so the slowdown is the price of uncoalesced reads.
@registry.kernel("copy_strided", "void(float32[::1], float32[::1], int64)",
                 reference="gpudl.kernels.memory.reference_copy_strided")
@cuda.jit
def copy_strided_kernel(x, out, stride):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i * stride]


# copy_offset_kernel: lane k reads x[k + offset]. The words are consecutive but the run
# starts offset words past a sector boundary, so unless offset is a multiple of 8 words the
# warp's 128 bytes straddle 5 sectors instead of 4. At most one extra sector per request:
# misalignment costs far less than striding.
@registry.kernel("copy_offset",
                 "void(float32[::1], float32[::1], int32)",
                 "void(float32[::1], float32[::1], int64)",
                 reference="gpudl.kernels.memory.reference_copy_offset")
@cuda.jit
def copy_offset_kernel(x, out, offset):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = x[i + offset]


@registry.variant("copy", "v1_naive", bytes_per_element=8)
def launch_copy_v1_naive(x: Array, out: Array) -> None:
    """Launch ``copy_v1_naive`` on device arrays, one thread per element of ``out``."""
    copy_v1_naive[blocks_to_cover(out.size, THREADS_PER_BLOCK), THREADS_PER_BLOCK](x, out)


@registry.variant("copy", "v2_k_loads", bytes_per_element=8)
def launch_copy_v2_k_loads(x: Array, out: Array) -> None:
    """Launch ``copy_v2_k_loads``: one block per ``K * THREADS_PER_BLOCK`` elements."""
    copy_v2_k_loads[blocks_to_cover(out.size, K * THREADS_PER_BLOCK), THREADS_PER_BLOCK](x, out)


@registry.variant("copy", "v3_vector4", bytes_per_element=8)
def launch_copy_v3_vector4(x: Array, out: Array) -> None:
    """Launch ``copy_v3_vector4`` on arrays that start on 16-byte boundaries."""
    check_aligned("x", x)
    check_aligned("out", out)
    blocks = max(1, blocks_to_cover(out.size // WIDTH, VECTORS * THREADS_PER_BLOCK))
    copy_v3_vector4[blocks, THREADS_PER_BLOCK](x, out)


#: Copy variant name -> launcher(x, out) on device arrays (``out.size >= 1``).
COPY_VARIANTS: dict[str, Callable] = registry.variants("copy")


def launch_copy_strided(x: Array, out: Array, stride: int) -> None:
    """Launch ``copy_strided_kernel``: ``out[i] = x[i * stride]`` (every index within ``x``:
    ``(out.size - 1) * stride < x.size``)."""
    check_int("stride", stride, 1)
    if out.size and (out.size - 1) * stride >= x.size:
        raise ValueError(f"stride {stride} reads past the end of x: out has {out.size} "
                         f"elements, x {x.size}")
    blocks = blocks_to_cover(out.size, THREADS_PER_BLOCK)
    copy_strided_kernel[blocks, THREADS_PER_BLOCK](x, out, stride)


def launch_copy_offset(x: Array, out: Array, offset: int) -> None:
    """Launch ``copy_offset_kernel``: ``out[i] = x[i + offset]`` (every index within ``x``:
    ``offset + out.size <= x.size``)."""
    _check_offset(x, offset)
    if offset + out.size > x.size:
        raise ValueError(f"offset {offset} reads past the end of x: out has {out.size} "
                         f"elements, x {x.size}")
    blocks = blocks_to_cover(out.size, THREADS_PER_BLOCK)
    copy_offset_kernel[blocks, THREADS_PER_BLOCK](x, out, offset)


def copy(x: Array, variant: str = "v1_naive") -> Array:
    """A copy of the float32 vector ``x`` made by the coalesced kernel
    ``COPY_VARIANTS[variant]``."""
    check_choice("variant", variant, COPY_VARIANTS)
    on_device = check_float32_array("x", x, 1)
    return _run(x, on_device, x.shape, COPY_VARIANTS[variant])


def copy_strided(x: Array, stride: int) -> Array:
    """``x[::stride]`` for a float32 vector, made by ``copy_strided_kernel``."""
    on_device = check_float32_array("x", x, 1)
    check_int("stride", stride, 1)
    n_out = math.ceil(x.size / stride)
    return _run(x, on_device, (n_out,), lambda x_, out: launch_copy_strided(x_, out, stride))


def copy_offset(x: Array, offset: int) -> Array:
    """``x[offset:]`` for a float32 vector, made by ``copy_offset_kernel``."""
    on_device = check_float32_array("x", x, 1)
    _check_offset(x, offset)
    n_out = x.size - offset
    return _run(x, on_device, (n_out,), lambda x_, out: launch_copy_offset(x_, out, offset))


# ------------------------------------------------------------------------------------------
# What the tracer sees (Chapter 2, "Seeing memory transactions without a GPU"): run with
# gpudl.trace.on_simulator, so a lab prints the same on a GPU.
# ------------------------------------------------------------------------------------------


def coalescing_report(strides: tuple[int, ...] = (1, 2, 4, 8, 16, 32),
                      offsets: tuple[int, ...] = (1,)) -> list[dict]:
    """Global 32-byte sectors per warp request of the strided and misaligned copy kernels.

    One row per access pattern: ``pattern``, ``sectors`` (mean sectors per load request over
    full warps) and ``ideal`` (4: 32 lanes x 4 bytes = 128 bytes = 4 sectors)."""
    from gpudl.trace import trace

    check_ints("strides", strides, 1, minimum_count=0)
    check_ints("offsets", offsets, 0, minimum_count=0)

    rows = []
    for stride in strides:
        x = np.arange(128 * stride, dtype=np.float32)
        out = np.full(128, np.nan, dtype=np.float32)
        t = trace(copy_strided_kernel, 1, 128, x, out, stride)
        stats = t.sectors_per_request("x")
        rows.append({"pattern": f"stride {stride}", "sectors": stats.mean, "ideal": stats.ideal})
    for offset in offsets:
        x = np.arange(128 + offset, dtype=np.float32)
        out = np.full(128, np.nan, dtype=np.float32)
        t = trace(copy_offset_kernel, 1, 128, x, out, offset)
        stats = t.sectors_per_request("x")
        rows.append({"pattern": f"offset {offset}", "sectors": stats.mean, "ideal": stats.ideal})
    return rows


def _check_offset(x: Array, offset: int) -> None:
    if check_int("offset", offset, 0) >= x.size:
        raise ValueError(f"offset must be < len(x) = {x.size}, got {offset}")


def _run(x: Array, on_device: bool, out_shape: tuple[int, ...], launch: Callable) -> Array:
    """Launch on the checked ``x`` into a poisoned output of ``out_shape``."""
    return launch_into_poisoned(launch, [x], [out_shape], on_device)[0]
