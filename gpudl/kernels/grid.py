"""The grid: the indices every thread of a launch sees, and how many blocks a launch needs.

Book section: *Chapter 1, "Threads, blocks, grids and warps"*.

:func:`thread_ids` records what each thread of a launch reads from ``blockIdx``,
``threadIdx``, ``cuda.grid(1)``, its warp and its lane. :func:`blocks_to_cover` gives one
thread per element (optionally at most so many blocks, for a kernel that loops over its
grid); :func:`grid_stride_blocks` gives one full wave of resident blocks, for kernels that
loop over the elements in strides of the whole grid; :func:`tiles_to_cover` gives one block
per square tile of a matrix. Every kernel module sizes its grids here.

Every launch is held to CUDA's limits by :func:`gpudl.launches.check_launch`.
"""

from __future__ import annotations

import functools

from gpudl import backend, registry
from gpudl.checks import check_int, check_ints
from gpudl.launches import MAX_THREADS_PER_BLOCK

# isort: split
import numpy as np
from numba import cuda

__all__ = [
    "THREAD_ID_COLUMNS",
    "blocks_to_cover",
    "check_threads_per_block",
    "grid_stride_blocks",
    "resident_blocks",
    "thread_ids",
    "tiles_to_cover",
]

#: The columns of :func:`thread_ids`.
THREAD_ID_COLUMNS = ("blockIdx.x", "threadIdx.x", "grid index", "warp", "lane")
@registry.kernel("grid_thread_ids", "void(int64[:, ::1])")
@cuda.jit
def _thread_ids_kernel(out):
    i = cuda.grid(1)
    out[i, 0] = cuda.blockIdx.x
    out[i, 1] = cuda.threadIdx.x
    out[i, 2] = i
    out[i, 3] = cuda.threadIdx.x // cuda.warpsize
    out[i, 4] = cuda.laneid


def thread_ids(blocks: int, threads_per_block: int) -> np.ndarray:
    """One row per thread of a ``[blocks, threads_per_block]`` launch, with the columns
    :data:`THREAD_ID_COLUMNS`: block index, thread index in the block, index in the grid
    (``cuda.grid(1)``), warp within the block and lane within the warp."""
    check_int("blocks", blocks, 1)
    check_int("threads_per_block", threads_per_block, 1, MAX_THREADS_PER_BLOCK)
    out = cuda.to_device(np.full((blocks * threads_per_block, 5), -1, dtype=np.int64))
    _thread_ids_kernel[blocks, threads_per_block](out)
    return out.copy_to_host()


def blocks_to_cover(n: int, threads_per_block: int, maximum: int | None = None) -> int:
    """Blocks of ``threads_per_block`` threads for one thread per element of ``n`` (0 for no
    element); at most ``maximum`` blocks where it is given, for a kernel that loops over its
    grid (the grid-stride loop covers the rest)."""
    check_int("n", n, 0)
    check_int("threads_per_block", threads_per_block, 1)
    blocks = -(-n // threads_per_block)
    return blocks if maximum is None else min(blocks, check_int("maximum", maximum, 1))


def tiles_to_cover(shape: tuple[int, int], tile: int) -> tuple[int, int]:
    """The grid of one block per ``tile`` x ``tile`` tile of a ``(rows, cols)`` matrix, as
    ``griddim`` ``(x, y)``: x along the columns, y along the rows."""
    if not isinstance(shape, tuple | list) or len(shape) != 2:
        raise TypeError(f"shape must be a (rows, cols) tuple, got {shape!r}")
    rows, cols = check_ints("shape", shape, 1)
    check_int("tile", tile, 1)
    return blocks_to_cover(cols, tile), blocks_to_cover(rows, tile)


def resident_blocks(threads_per_block: int) -> int:
    """Blocks of this size that all SMs hold at once (full occupancy); 4 on the simulator."""
    return _resident_blocks(check_int("threads_per_block", threads_per_block, 1,
                                      MAX_THREADS_PER_BLOCK))


@functools.cache
def _resident_blocks(threads_per_block: int) -> int:
    if backend.is_simulator():
        return 4
    dev = cuda.get_current_device()
    per_sm = max(1, dev.MAX_THREADS_PER_MULTIPROCESSOR // threads_per_block)
    return dev.MULTIPROCESSOR_COUNT * per_sm


def grid_stride_blocks(n: int, threads_per_block: int, maximum: int | None = None) -> int:
    """One full wave of resident blocks on a GPU, 4 on the simulator; never more than needed,
    nor more than ``maximum`` where it is given (a smaller grid on one backend)."""
    most = resident_blocks(threads_per_block)
    if maximum is not None:
        most = min(most, check_int("maximum", maximum, 1))
    return blocks_to_cover(n, threads_per_block, most)


def check_threads_per_block(threads_per_block: int) -> None:
    """``TypeError`` unless an int, ``ValueError`` unless a multiple of 32 from 32 to 1024."""
    check_int("threads_per_block", threads_per_block)
    if not (0 < threads_per_block <= MAX_THREADS_PER_BLOCK and threads_per_block % 32 == 0):
        raise ValueError(
            f"threads_per_block must be a multiple of 32 between 32 and 1024, "
            f"got {threads_per_block!r}"
        )

