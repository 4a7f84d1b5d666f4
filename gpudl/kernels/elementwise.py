"""Elementwise kernels: vector add and SAXPY, on the GPU and on the CPU.

Book section: Chapter 1, "Threads, blocks, grids and warps" (vector add v1 and v2) and "CPU
and GPU on the same problem" (SAXPY on the CPU and the GPU); Chapter 2, "Bytes in flight"
(vector add v3 and v4, SAXPY v2); Chapter 10, "A program owns a block of values" (vector add
v5, whose kernel is :mod:`gpudl.kernels.tiles.elementwise`'s).

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return device arrays). Outputs are allocated poisoned (NaN) before a launch, so an element
that a kernel forgets to write is caught by the comparison with the reference. Empty inputs
give an empty output without a launch (a grid of 0 blocks is an error). Non-contiguous
inputs are rejected (``ValueError``) rather than silently copied.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudl import registry
from gpudl.checks import check_array, check_choice, check_equal, check_real, is_device_array
from gpudl.kernels.arrays import check_arrays, launch_into_poisoned
from gpudl.kernels.grid import blocks_to_cover, check_threads_per_block, grid_stride_blocks
from gpudl.kernels.tiles import elementwise as tiled
from gpudl.kernels.wide import WIDTH, check_aligned, load4, store4

# isort: split
import numpy as np
from numba import cuda, float32, njit, prange, uint64

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "VARIANTS",
    "reference_vector_add",
    "K",
    "VECTORS",
    "v1_naive",
    "v2_grid_stride",
    "v3_k_loads",
    "v4_vector4",
    "launch_v1_naive",
    "launch_v2_grid_stride",
    "launch_v3_k_loads",
    "launch_v4_vector4",
    "launch_v5_triton_block",
    "vector_add",
    "SAXPY_VARIANTS",
    "reference_saxpy",
    "saxpy_v1_naive",
    "saxpy_v2_k_loads",
    "launch_saxpy_v1_naive",
    "launch_saxpy_v2_k_loads",
    "saxpy",
    "saxpy_numpy",
    "saxpy_numba_cpu",
    ]


# ------------------------------------------------------------------------------------------
# Vector add
# ------------------------------------------------------------------------------------------


def reference_vector_add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` in float64 (exact for float32 inputs) on the host."""
    check_equal("b.shape", check_array("b", b, 1).shape, "a.shape", check_array("a", a, 1).shape)
    return np.asarray(a, dtype=np.float64) + np.asarray(b, dtype=np.float64)


# v1_naive: one thread per element. The grid has ceil(n / threads_per_block) blocks; the
# threads of the last block that fall past the end must do nothing, hence the bounds check.
# Neighbouring threads read neighbouring elements, so each warp's loads are coalesced.
@registry.kernel("vector_add_v1_naive", "void(float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_vector_add")
@cuda.jit
def v1_naive(a, b, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = a[i] + b[i]


# v2_grid_stride: a fixed grid sized to the GPU (as many blocks as the SMs can hold at once)
# instead of to the data; each thread loops over i, i + gridsize, i + 2 * gridsize, ...
# Each step of the loop is still coalesced across the warp. What changes: the GPU starts
# and retires one wave of blocks instead of n / threads_per_block of them, each thread
# computes its index once and then just adds the stride, and one launch handles any n. A
# memory-bound kernel cannot beat the copy bandwidth, so the gain is small: v2 should be
# at least as fast as v1 and close to the bandwidth of a plain copy.
@registry.kernel("vector_add_v2_grid_stride", "void(float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_vector_add")
@cuda.jit
def v2_grid_stride(a, b, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = a[i] + b[i]


#: Loads each thread of the K-loads variants issues before its first store.
K = 8
#: 16-byte vectors each thread of ``v4_vector4`` loads from each input.
VECTORS = 2


# v3_k_loads: bytes in flight. A load takes hundreds of cycles to return, and by Little's law
# the bandwidth a GPU reaches is the bytes in flight divided by that latency. v1 and v2 have
# one 4-byte load per input in flight per thread: a thread cannot issue its next load before
# it has stored the sum, and the compiler cannot move the next loads above the store (out
# might alias a or b). Here each thread of a block owns K elements, one block-width apart (so
# every warp's loads stay coalesced), issues all 2K loads, then all K stores: K times the
# bytes in flight. Unsigned indices, compared with an unsigned size, drop the instructions
# that handle Python's negative indices. Only the last block needs the per-element test.
@registry.kernel("vector_add_v3_k_loads", "void(float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_vector_add")
@cuda.jit
def v3_k_loads(a, b, out):
    n = uint64(out.size)
    step = uint64(cuda.blockDim.x)
    first = uint64(cuda.blockIdx.x) * step * uint64(K) + uint64(cuda.threadIdx.x)
    if first + uint64(K - 1) * step < n:
        x = cuda.local.array(K, float32)
        y = cuda.local.array(K, float32)
        for k in range(K):  # unrolled: 2K loads in flight
            x[k] = a[first + uint64(k) * step]
            y[k] = b[first + uint64(k) * step]
        for k in range(K):
            out[first + uint64(k) * step] = x[k] + y[k]
    else:  # the guarded tail, in the last block only
        for k in range(K):
            i = first + uint64(k) * step
            if i < n:
                out[i] = a[i] + b[i]


# v4_vector4: the same bytes in flight in fewer instructions. Each load4 moves 16 bytes
# (ld.global.v4.f32), so a thread issues 2 * VECTORS loads where v3 issues 2K; a warp's 32
# vector loads cover 512 consecutive bytes, still coalesced. The arrays must start on a
# 16-byte boundary (checked by the launcher); the last n % 4 elements, which do not fill a
# vector, are added one per thread by the first threads of the grid.
@registry.kernel("vector_add_v4_vector4", "void(float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_vector_add")
@cuda.jit
def v4_vector4(a, b, out):
    n = uint64(out.size)
    vectors = n // uint64(WIDTH)
    step = uint64(cuda.blockDim.x)
    first = uint64(cuda.blockIdx.x) * step * uint64(VECTORS) + uint64(cuda.threadIdx.x)
    if first + uint64(VECTORS - 1) * step < vectors:
        j0, j1 = first * uint64(WIDTH), (first + step) * uint64(WIDTH)
        a0, b0, a1, b1 = load4(a, j0), load4(b, j0), load4(a, j1), load4(b, j1)
        store4(out, j0, (a0[0] + b0[0], a0[1] + b0[1], a0[2] + b0[2], a0[3] + b0[3]))
        store4(out, j1, (a1[0] + b1[0], a1[1] + b1[1], a1[2] + b1[2], a1[3] + b1[3]))
    else:
        for k in range(VECTORS):
            j = (first + uint64(k) * step) * uint64(WIDTH)
            if j < vectors * uint64(WIDTH):
                x, y = load4(a, j), load4(b, j)
                store4(out, j, (x[0] + y[0], x[1] + y[1], x[2] + y[2], x[3] + y[3]))
    i = vectors * uint64(WIDTH) + uint64(cuda.grid(1))  # the scalar tail
    if i < n:
        out[i] = a[i] + b[i]


@registry.variant("vector_add", "v1_naive", bytes_per_element=12, flops_per_element=1)
def launch_v1_naive(a: Array, b: Array, out: Array, threads_per_block: int) -> None:
    """Launch ``v1_naive`` on device arrays (``out.size >= 1``)."""
    v1_naive[blocks_to_cover(out.size, threads_per_block), threads_per_block](a, b, out)


@registry.variant("vector_add", "v2_grid_stride", bytes_per_element=12,
                  flops_per_element=1)
def launch_v2_grid_stride(a: Array, b: Array, out: Array, threads_per_block: int) -> None:
    """Launch ``v2_grid_stride`` on device arrays (``out.size >= 1``)."""
    blocks = grid_stride_blocks(out.size, threads_per_block)
    v2_grid_stride[blocks, threads_per_block](a, b, out)


@registry.variant("vector_add", "v3_k_loads", bytes_per_element=12, flops_per_element=1)
def launch_v3_k_loads(a: Array, b: Array, out: Array, threads_per_block: int) -> None:
    """Launch ``v3_k_loads`` on device arrays: one block per ``K * threads_per_block``."""
    v3_k_loads[blocks_to_cover(out.size, K * threads_per_block), threads_per_block](a, b, out)


@registry.variant("vector_add", "v4_vector4", bytes_per_element=12, flops_per_element=1)
def launch_v4_vector4(a: Array, b: Array, out: Array, threads_per_block: int) -> None:
    """Launch ``v4_vector4`` on device arrays that start on 16-byte boundaries."""
    for name, x in (("a", a), ("b", b), ("out", out)):
        check_aligned(name, x)
    blocks = max(1, blocks_to_cover(out.size // WIDTH, VECTORS * threads_per_block))
    v4_vector4[blocks, threads_per_block](a, b, out)


# v5_triton_block: v1 in Triton (gpudl.kernels.tiles.elementwise): a program per block of
# 1,024 elements, a mask instead of the bounds check, 16-byte loads chosen by the compiler.
@registry.variant("vector_add", "v5_triton_block", bytes_per_element=12, flops_per_element=1,
                  requires="triton")
def launch_v5_triton_block(a: Array, b: Array, out: Array, threads_per_block: int) -> None:
    """Launch the Triton kernel ``v5_triton_block`` on device arrays (``out.size >= 1``);
    ``threads_per_block`` does not apply (a program has ``tiled.WARPS`` warps)."""
    tiled.launch_vector_add(a, b, out)


#: Vector add's variants, key -> launcher(a, b, out, threads_per_block) on device arrays.
VARIANTS: dict[str, Callable] = registry.variants("vector_add")


def vector_add(a: Array, b: Array, variant: str = "v2_grid_stride",
               threads_per_block: int = 256) -> Array:
    """``a + b`` for two vectors on the GPU, with the kernel ``VARIANTS[variant]``, in the
    format that variant's kernel declares (float32 for every variant here)."""
    registry.check_variant("vector_add", variant, VARIANTS)
    check_threads_per_block(threads_per_block)
    launch = VARIANTS[variant]
    return _run(lambda a_, b_, out: launch(a_, b_, out, threads_per_block),
                registry.variant_records("vector_add")[variant].precision, a=a, b=b)


# ------------------------------------------------------------------------------------------
# SAXPY: out = alpha * x + y, on the GPU and on the CPU
# ------------------------------------------------------------------------------------------


def reference_saxpy(alpha: float, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``alpha * x + y`` in float64 on the host."""
    check_real("alpha", alpha)
    check_equal("y.shape", check_array("y", y, 1).shape, "x.shape", check_array("x", x, 1).shape)
    return float(alpha) * np.asarray(x, dtype=np.float64) + np.asarray(y, dtype=np.float64)


# One thread per element, as in v1_naive, with one multiply more: SAXPY moves the same 12
# bytes per element as vector add for 2 flops, so its speed is set by memory bandwidth.
@registry.kernel("saxpy_v1_naive", "void(float32, float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_saxpy")
@cuda.jit
def saxpy_v1_naive(alpha, x, y, out):
    i = cuda.grid(1)
    if i < out.size:
        out[i] = alpha * x[i] + y[i]


@registry.variant("saxpy", "v1_naive", bytes_per_element=12, flops_per_element=2)
def launch_saxpy_v1_naive(alpha: float, x: Array, y: Array, out: Array,
                          threads_per_block: int) -> None:
    """Launch ``saxpy_v1_naive`` on device arrays (``out.size >= 1``)."""
    blocks = blocks_to_cover(out.size, threads_per_block)
    saxpy_v1_naive[blocks, threads_per_block](np.float32(alpha), x, y, out)


# saxpy_v2_k_loads: SAXPY with vector add v3's K loads per input in flight per thread.
@registry.kernel("saxpy_v2_k_loads", "void(float32, float32[::1], float32[::1], float32[::1])",
                 threads_per_block=256, reference="gpudl.kernels.elementwise.reference_saxpy")
@cuda.jit
def saxpy_v2_k_loads(alpha, x, y, out):
    n = uint64(out.size)
    step = uint64(cuda.blockDim.x)
    first = uint64(cuda.blockIdx.x) * step * uint64(K) + uint64(cuda.threadIdx.x)
    if first + uint64(K - 1) * step < n:
        u = cuda.local.array(K, float32)
        v = cuda.local.array(K, float32)
        for k in range(K):
            u[k] = x[first + uint64(k) * step]
            v[k] = y[first + uint64(k) * step]
        for k in range(K):
            out[first + uint64(k) * step] = alpha * u[k] + v[k]
    else:
        for k in range(K):
            i = first + uint64(k) * step
            if i < n:
                out[i] = alpha * x[i] + y[i]


@registry.variant("saxpy", "v2_k_loads", bytes_per_element=12, flops_per_element=2)
def launch_saxpy_v2_k_loads(alpha: float, x: Array, y: Array, out: Array,
                            threads_per_block: int) -> None:
    """Launch ``saxpy_v2_k_loads`` on device arrays: one block per ``K * threads_per_block``."""
    blocks = blocks_to_cover(out.size, K * threads_per_block)
    saxpy_v2_k_loads[blocks, threads_per_block](np.float32(alpha), x, y, out)


#: SAXPY variant name -> launcher(alpha, x, y, out, threads_per_block) on device arrays.
SAXPY_VARIANTS: dict[str, Callable] = registry.variants("saxpy")


def saxpy(alpha: float, x: Array, y: Array, threads_per_block: int = 256,
          variant: str = "v1_naive") -> Array:
    """``alpha * x + y`` for float32 vectors on the GPU, in a new array (``y`` is unchanged),
    with the kernel ``SAXPY_VARIANTS[variant]``."""
    check_real("alpha", alpha)
    check_threads_per_block(threads_per_block)
    check_choice("variant", variant, SAXPY_VARIANTS)
    launch = SAXPY_VARIANTS[variant]
    return _run(lambda x_, y_, out: launch(alpha, x_, y_, out, threads_per_block),
                registry.variant_records("saxpy")[variant].precision, x=x, y=y)


def _cpu_out(x: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    """The output array of a CPU SAXPY: ``out`` if given (checked), else a new one.

    Benchmarks pass ``out``: a fresh 64 MB array costs thousands of first-touch page faults,
    which would be timed as if they were arithmetic."""
    if out is None:
        return np.empty_like(x)
    _check_host_vectors(x=x, out=out)
    return out


def saxpy_numpy(
    alpha: float, x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """SAXPY on the CPU with NumPy (float32; two passes over memory, one core)."""
    check_real("alpha", alpha)
    _check_host_vectors(x=x, y=y)
    out = _cpu_out(x, out)
    np.multiply(np.float32(alpha), x, out=out)
    return np.add(out, y, out=out)


@njit(parallel=True)
def _saxpy_cpu(alpha, x, y, out):
    for i in prange(x.size):
        out[i] = alpha * x[i] + y[i]


def saxpy_numba_cpu(
    alpha: float, x: np.ndarray, y: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """SAXPY on the CPU with Numba, one loop split across all CPU cores (``prange``)."""
    check_real("alpha", alpha)
    _check_host_vectors(x=x, y=y)
    out = _cpu_out(x, out)
    _saxpy_cpu(np.float32(alpha), x, y, out)
    return out


# ------------------------------------------------------------------------------------------
# Input checks and the host/device plumbing
# ------------------------------------------------------------------------------------------


def _vectors(**arrays: object) -> dict[str, tuple[object, int]]:
    return {name: (x, 1) for name, x in arrays.items()}


def _check_host_vectors(**arrays: object) -> None:
    """Check float32, 1-D, contiguous NumPy vectors of one shape (the CPU versions)."""
    for name, x in arrays.items():
        if is_device_array(x):
            raise TypeError(f"{name} must be a NumPy array, got a numba device array")
    check_arrays(same_shape=True, **_vectors(**arrays))


def _run(launch: Callable, dtype: str, **arrays: object) -> Array:
    """Check the vectors (of the format ``dtype``) and launch into a poisoned output of their
    length and format."""
    on_device = check_arrays(same_shape=True, dtype=dtype, **_vectors(**arrays))
    inputs = list(arrays.values())
    (out,) = launch_into_poisoned(launch, inputs, [inputs[0].shape[0]], on_device, dtype)
    return out
