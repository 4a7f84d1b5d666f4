"""Matrix transpose: one side of the copy is necessarily a column, and a tile in shared
memory turns it into a row.

Book section: Chapter 2, "Shared memory and bank conflicts" (v1, the naive transpose, is first
met in "Coalescing"; v4, the one that loads first, in "Bytes in flight").

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return device arrays), float32, 2-D and C-contiguous. Outputs are allocated poisoned (NaN)
before a launch; empty results are returned without a launch.
"""

from __future__ import annotations

from collections.abc import Callable

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_array, check_choice, check_float32_array, check_int
from gpudl.kernels.arrays import Array, launch_into_poisoned
from gpudl.kernels.grid import tiles_to_cover

__all__ = [
    "BLOCK_ROWS",
    "FAMILY",
    "LOADS_ROWS",
    "PADDED",
    "TILE",
    "VARIANTS",
    "launch_v1_naive",
    "launch_v2_shared",
    "launch_v3_padded",
    "launch_v4_padded_loads_first",
    "reference_transpose",
    "transpose",
    "transpose_grid",
    "transpose_report",
    "v1_naive",
    "v2_shared",
    "v3_padded",
    "v4_padded_loads_first",
]

# Each block owns a TILE x TILE tile of the input and has TILE x BLOCK_ROWS = 32 x 8 threads,
# so each thread handles TILE / BLOCK_ROWS = 4 rows of the tile (NVIDIA's "An efficient
# matrix transpose in CUDA C/C++" layout). threadIdx.x runs along a row, so a warp is one row
# of 32 threads, as with 32 x 32 threads; but a block of 256 threads instead of 1024 lets
# several blocks share an SM, and each thread's index arithmetic serves 4 elements. It is
# also 4 times fewer simulated threads.
TILE = 32
BLOCK_ROWS = 8
PADDED = TILE + 1  # a named constant: a shared array's shape must be literal integers


def reference_transpose(x: np.ndarray) -> np.ndarray:
    """``x.T`` as a new C-contiguous array, in NumPy."""
    return np.ascontiguousarray(check_array("x", x, 2).T)


# v1_naive: thread (row, col) reads x[row, col] and writes out[col, row]. A warp reads 32
# consecutive words of a row of x (coalesced: 4 sectors) and writes them down a column of
# out, rows x.shape[0] * 4 bytes apart: 32 sectors per request, each 1/8 used.
@registry.kernel("transpose_v1_naive", "void(float32[:, ::1], float32[:, ::1])",
                 threads_per_block=TILE * BLOCK_ROWS)
@cuda.jit
def v1_naive(x, out):
    col = cuda.blockIdx.x * TILE + cuda.threadIdx.x
    for k in range(0, TILE, BLOCK_ROWS):
        row = cuda.blockIdx.y * TILE + cuda.threadIdx.y + k
        if row < x.shape[0] and col < x.shape[1]:
            out[col, row] = x[row, col]


# v2_shared: stage the tile in shared memory. The block reads its tile row by row (coalesced)
# into tile[row, col], waits, then writes rows of out (coalesced) from columns of the tile:
# lane t reads tile[t, c]. Both global sides now take 4 sectors per request. But shared memory
# has 32 banks of 4-byte words, bank = word index % 32, and tile[t, c] is word 32 t + c: all
# 32 lanes hit bank c, a 32-way bank conflict that serialises the read into 32 steps.
@registry.kernel("transpose_v2_shared", "void(float32[:, ::1], float32[:, ::1])",
                 threads_per_block=TILE * BLOCK_ROWS)
@cuda.jit
def v2_shared(x, out):
    tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    for k in range(0, TILE, BLOCK_ROWS):
        if row0 + ty + k < x.shape[0] and col0 + tx < x.shape[1]:
            tile[ty + k, tx] = x[row0 + ty + k, col0 + tx]
    cuda.syncthreads()
    for k in range(0, TILE, BLOCK_ROWS):
        if col0 + ty + k < out.shape[0] and row0 + tx < out.shape[1]:
            out[col0 + ty + k, row0 + tx] = tile[tx, ty + k]


# v3_padded: v2 with one unused column in the tile (TILE x TILE + 1). tile[t, c] is now word
# 33 t + c, in bank (t + c) % 32: the 32 lanes of the column read hit 32 different banks, so
# the read is conflict-free, and the row-wise write stays conflict-free. This is the
# transpose that should run at close to copy bandwidth.
@registry.kernel("transpose_v3_padded", "void(float32[:, ::1], float32[:, ::1])",
                 threads_per_block=TILE * BLOCK_ROWS)
@cuda.jit
def v3_padded(x, out):
    tile = cuda.shared.array((TILE, PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    for k in range(0, TILE, BLOCK_ROWS):
        if row0 + ty + k < x.shape[0] and col0 + tx < x.shape[1]:
            tile[ty + k, tx] = x[row0 + ty + k, col0 + tx]
    cuda.syncthreads()
    for k in range(0, TILE, BLOCK_ROWS):
        if col0 + ty + k < out.shape[0] and row0 + tx < out.shape[1]:
            out[col0 + ty + k, row0 + tx] = tile[tx, ty + k]


# v4_padded_loads_first: v3 with more bytes in flight. In v3 each thread stores every value
# it loads into the tile before its next load, so it waits for each load in turn: one 4-byte
# load in flight. Here a block of TILE x LOADS_ROWS = 32 x 4 threads gives each thread
# TILE / LOADS_ROWS = 8 rows of the tile; it issues all 8 loads into registers first, then
# the 8 shared-memory stores. The padded tile keeps the column reads conflict-free.
LOADS_ROWS = 4
_ROWS_PER_THREAD = TILE // LOADS_ROWS  # a named constant: a local array's shape is literal


@registry.kernel("transpose_v4_padded_loads_first", "void(float32[:, ::1], float32[:, ::1])",
                 threads_per_block=TILE * BLOCK_ROWS)
@cuda.jit
def v4_padded_loads_first(x, out):
    tile = cuda.shared.array((TILE, PADDED), float32)
    v = cuda.local.array(_ROWS_PER_THREAD, float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    for k in range(_ROWS_PER_THREAD):  # unrolled: 8 loads in flight
        if row0 + ty + k * LOADS_ROWS < x.shape[0] and col0 + tx < x.shape[1]:
            v[k] = x[row0 + ty + k * LOADS_ROWS, col0 + tx]
    for k in range(_ROWS_PER_THREAD):  # (values past the edge are never read back)
        tile[ty + k * LOADS_ROWS, tx] = v[k]
    cuda.syncthreads()
    for k in range(_ROWS_PER_THREAD):
        if col0 + ty + k * LOADS_ROWS < out.shape[0] and row0 + tx < out.shape[1]:
            out[col0 + ty + k * LOADS_ROWS, row0 + tx] = tile[tx, ty + k * LOADS_ROWS]


def transpose_grid(shape: tuple[int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
    """``(griddim, blockdim)`` of a transpose of an array of ``shape``: one block per tile."""
    return tiles_to_cover(shape, TILE), (TILE, BLOCK_ROWS)


@registry.variant("transpose", "v1_naive", bytes_per_element=8)
def launch_v1_naive(x: Array, out: Array) -> None:
    """Launch ``v1_naive`` on device arrays."""
    v1_naive[transpose_grid(x.shape)](x, out)


@registry.variant("transpose", "v2_shared", bytes_per_element=8)
def launch_v2_shared(x: Array, out: Array) -> None:
    """Launch ``v2_shared`` on device arrays."""
    v2_shared[transpose_grid(x.shape)](x, out)


@registry.variant("transpose", "v3_padded", bytes_per_element=8)
def launch_v3_padded(x: Array, out: Array) -> None:
    """Launch ``v3_padded`` on device arrays."""
    v3_padded[transpose_grid(x.shape)](x, out)


@registry.variant("transpose", "v4_padded_loads_first", bytes_per_element=8)
def launch_v4_padded_loads_first(x: Array, out: Array) -> None:
    """Launch ``v4_padded_loads_first``: one block of 32 x 4 threads per tile."""
    grid, _ = transpose_grid(x.shape)
    v4_padded_loads_first[grid, (TILE, LOADS_ROWS)](x, out)


#: The family of the transposes in :mod:`gpudl.registry` (their one names: ``transpose_v1_naive``).
FAMILY = "transpose"
#: Key -> launcher(x, out) on device arrays.
VARIANTS: dict[str, Callable] = registry.variants(FAMILY)


def transpose(x: Array, variant: str = "v3_padded") -> Array:
    """``x.T`` for a 2-D float32 array of any shape, with the kernel ``VARIANTS[variant]``."""
    check_choice("variant", variant, VARIANTS)
    on_device = check_float32_array("x", x, 2)
    return launch_into_poisoned(VARIANTS[variant], [x], [(x.shape[1], x.shape[0])],
                                on_device)[0]


# ------------------------------------------------------------------------------------------
# What the tracer sees: run with gpudl.trace.on_simulator, so a lab prints the same on a GPU.
# ------------------------------------------------------------------------------------------


def transpose_report(side: int = 64) -> dict[str, dict]:
    """For each transpose variant on a ``side`` x ``side`` matrix: global sectors per request
    on the read (``x``) and the write (``out``), and the shared tile's bank-conflict degree
    on its row-wise store and its column-wise load (None for the naive kernel, which has no
    tile)."""
    from gpudl.trace import trace

    check_int("side", side, 1, 256)

    x = np.arange(side * side, dtype=np.float32).reshape(side, side)
    report = {}
    for name, kernel in (("v1_naive", v1_naive), ("v2_shared", v2_shared),
                         ("v3_padded", v3_padded)):
        out = np.full((side, side), np.nan, dtype=np.float32)
        t = trace(kernel, *transpose_grid(x.shape), x, out)
        if not np.array_equal(out, x.T):
            raise RuntimeError(f"the traced {name} transpose is wrong")
        row = {"read_sectors": t.sectors_per_request("x").mean,
               "write_sectors": t.sectors_per_request("out", op="store").mean,
               "tile_store_conflicts": None, "tile_load_conflicts": None}
        if name != "v1_naive":
            row["tile_store_conflicts"] = t.bank_conflict_degree("tile", op="store").max
            row["tile_load_conflicts"] = t.bank_conflict_degree("tile", op="load").max
        report[name] = row
    return report
