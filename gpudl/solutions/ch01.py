"""Solutions to the exercises of Chapter 1, GPU hardware and SIMT.

Book section: Chapter 1, "Exercises".
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda

from gpudl import registry
from gpudl.hardware import Occupancy, occupancy
from gpudl.kernels.grid import blocks_to_cover


@registry.kernel("ch01_fma_grid_stride",
                 "void(float32[::1], float32[::1], float32[::1], float32[::1])")
@cuda.jit
def fma_grid_stride(a, b, c, out):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, out.size, stride):
        out[i] = a[i] * b[i] + c[i]


def fused_multiply_add(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Exercise 1: ``a * b + c`` for float32 vectors, on a fixed grid with a grid-stride loop."""
    arrays = (a, b, c)
    if not all(isinstance(x, np.ndarray) and x.dtype == np.float32 for x in arrays):
        raise TypeError("a, b and c must be float32 NumPy arrays")
    if not all(x.ndim == 1 and x.shape == a.shape for x in arrays):
        raise ValueError(f"a, b and c must be 1-D of one length, got {[x.shape for x in arrays]}")
    out = np.full_like(a, np.nan)  # poisoned: an element the kernel skips stays NaN
    if a.size:
        threads = 128
        blocks = blocks_to_cover(a.size, threads, maximum=backend.pick(gpu=1024, sim=4))
        fma_grid_stride[blocks, threads](a, b, c, out)
    return out


def exercise2_occupancy() -> Occupancy:
    """Exercise 2: 128 threads, 96 registers, 16 KB shared memory per block on an A100."""
    return occupancy(128, 96, 16 * 1024, (8, 0))


def implied_clock_ghz(fp32_tflops: float, sm_count: int, cores_per_sm: int) -> float:
    """Exercise 3: the SM clock at which every FP32 core does one FMA (2 flops) per cycle."""
    return fp32_tflops * 1e12 / (sm_count * cores_per_sm * 2) / 1e9

