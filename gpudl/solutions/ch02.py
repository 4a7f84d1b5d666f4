"""Solutions to the exercises of Chapter 2, the memory hierarchy.

Book section: Chapter 2, "Exercises": write the warp-shuffle stage of a reduction, find a
bank conflict with the tracer, and place fp32 Adam on an A100's roofline.
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_float32_array, check_int
from gpudl.estimate import ridge_point, roofline
from gpudl.hardware import SPECS
from gpudl.kernels.grid import blocks_to_cover
from gpudl.trace import trace

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


@registry.kernel("ch02_warp_sums", "void(float32[::1], float32[::1])")
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
    if check_float32_array("x", x, 1):
        raise TypeError("x must be a NumPy array, got a device array")
    warps = -(-x.size // WARP)
    lane_totals = np.full(warps * WARP, np.nan, dtype=np.float32)  # poisoned
    if warps:
        blocks = blocks_to_cover(lane_totals.size, THREADS_PER_BLOCK)
        _warp_sums_kernel[blocks, THREADS_PER_BLOCK](x, lane_totals)
    per_lane = lane_totals.reshape(warps, WARP)
    return per_lane if every_lane else per_lane[:, 0].copy()


@registry.kernel("ch02_column_read", "void(float32[::1], int64)")
@cuda.jit
def _column_read_kernel(out, width):
    tile = cuda.shared.array(0, float32)  # a 32 x width tile, row-major, in dynamic shared memory
    lane = cuda.threadIdx.x
    for j in range(width):  # each lane fills its own row
        tile[lane * width + j] = lane * width + j
    cuda.syncthreads()
    out[lane] = tile[lane * width]  # the warp reads column 0: lane k reads row k


def column_read_conflicts(width: int) -> int:
    """Bank-conflict degree of one warp reading column 0 of a 32 x ``width`` float32 tile.

    Word ``k * width`` lies in bank ``(k * width) % 32``: with a width of 32 (or 64) every
    lane's word is in bank 0, a 32-way conflict; a width of 33 spreads them over all 32 banks.
    Counted by the tracer, so this runs on the simulator only."""
    check_int("width", width, 1)
    out = np.full(WARP, np.nan, dtype=np.float32)
    t = trace(_column_read_kernel, 1, WARP, out, width, dynamic_shared_bytes=WARP * width * 4)
    if not np.array_equal(out, np.arange(WARP, dtype=np.float32) * width):
        raise RuntimeError("the column read returned the wrong words")
    return t.bank_conflict_degree(array="dynamic", op="load").max


def exercise_roofline_a100() -> tuple[float, float]:
    """(ridge point in flop/byte, attainable flop/s of fp32 Adam) on an A100 80GB in FP32.

    fp32 Adam does about 12 flops per parameter while moving 28 bytes (read p, g, m, v;
    write p, m, v), an intensity of 12 / 28 flop/byte, far left of the ridge."""
    a100 = SPECS["A100 80GB SXM"]
    peak, bandwidth = a100.fp32_tflops * 1e12, a100.memory_bandwidth_gbs * 1e9
    return ridge_point(peak, bandwidth), float(roofline(12 / 28, peak, bandwidth))
