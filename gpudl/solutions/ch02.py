"""Solutions to the exercises of Chapter 2, the memory hierarchy.

Book section: Chapter 2, "Reductions, step by step" (exercise: write the warp-shuffle stage).
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl.kernels.reduction import _check_input

WARP = backend.WARP_SIZE
FULL_MASK = 0xFFFFFFFF
THREADS_PER_BLOCK = 128


@cuda.jit(device=True)
def warp_reduce_sum(value):
    """The sum of ``value`` over the 32 lanes of the warp, in every lane.

    A butterfly: at each of the five steps every lane adds the value of the lane whose
    index differs in one bit (offset 16, 8, 4, 2, 1), so after step k each lane holds the
    sum of its group of 2**k lanes, and after the fifth the whole warp's. Every lane of the
    warp must call it (full mask)."""
    offset = WARP // 2
    while offset > 0:
        value += cuda.shfl_xor_sync(FULL_MASK, value, offset)
        offset //= 2
    return value


@cuda.jit
def _warp_sums_kernel(x, lane_totals):
    i = cuda.grid(1)
    # Guard the work, not the return: lanes past the end add 0 but still take part in
    # every shuffle, as the full mask promises.
    total = warp_reduce_sum(x[i] if i < x.size else float32(0))
    if i < lane_totals.size:
        lane_totals[i] = total


def warp_sums(x: np.ndarray, every_lane: bool = False) -> np.ndarray:
    """The float32 sums of ``x[0:32]``, ``x[32:64]``, ... (the last group padded with 0).

    With ``every_lane=True``, one row per warp with what each of its 32 lanes ended with
    (all equal, for a butterfly)."""
    if _check_input(x):
        raise TypeError("x must be a NumPy array, got a device array")
    warps = -(-x.size // WARP)
    lane_totals = np.full(warps * WARP, np.nan, dtype=np.float32)  # poisoned
    if warps:
        blocks = -(-lane_totals.size // THREADS_PER_BLOCK)
        _warp_sums_kernel[blocks, THREADS_PER_BLOCK](x, lane_totals)
    per_lane = lane_totals.reshape(warps, WARP)
    return per_lane if every_lane else per_lane[:, 0].copy()
