"""Matrix multiply, from one thread per output to 2-D register blocking.

Book section: Chapter 3, "Matrix multiply, step by step", after Simon Boehm, "How to
Optimize a CUDA Matmul Kernel for cuBLAS-like Performance: a Worklog" (2022,
https://siboehm.com/articles/22/CUDA-MMM).

Every variant computes ``C = A @ B`` for row-major float32 ``A`` (M, K) and ``B`` (K, N) of
any sizes, accumulating in float32 as cuBLAS's SGEMM does. No variant splits K between
threads (each output is one thread's running sum), so they differ only in where the
operands come from (global memory, shared memory, registers) and how often each loaded
value is reused.

``v6_triton_tiles`` and ``v7_triton_float16`` are the same product in Triton
(:mod:`gpudl.kernels.tiles.matmul`; Chapter 10, "A matmul of tiles"): float32 with IEEE
products, and float16 A, B and C with float32 accumulation (tensor cores on a GPU).

Accuracy: an output is a dot product of K float32 products added in float32 (one chain per
thread, tile after tile; an FMA rounds once where a multiply and an add round twice). In
any order, the computed value is within ``gamma_K * sum_k |a_ik| |b_kj|`` of the exact one,
``gamma_K = K u / (1 - K u)`` with ``u = 2**-24`` (Higham, *Accuracy and Stability of
Numerical Algorithms*, 2002, section 3.1), barring underflow. While ``K u <= 1/2``,
``gamma_K <= 2 K u = K * eps32``, and the slack between the two also covers the float64
reference's own rounding: :func:`error_bound` is ``K * eps32 * (|A| @ |B|)``, elementwise.
A NaN in row i of A makes row i of C NaN (and a NaN in column j of B, column j).
For ``v7_triton_float16`` (float16 inputs are exact in float32, and so are their products),
:func:`error_bound` with ``precision="float16"`` doubles the float32 bound, since tensor
cores may truncate rather than round their float32 additions (Fasi et al., "Numerical
behavior of NVIDIA tensor cores", 2021), and adds one rounding to float16 of the result.

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return a device array if either input is one), float32 and C-contiguous. The output is
filled with NaN on the device before each launch, so an element no thread writes is caught.
An empty output (M or N = 0) is returned without a launch, and K = 0 gives zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32, uint32

from gpudl import registry
from gpudl.checks import check_array, check_choice, check_equal, check_int
from gpudl.kernels.arrays import EPS32, check_arrays, launch_into_poisoned, rounding_bound, zeros
from gpudl.kernels.grid import blocks_to_cover
from gpudl.kernels.tiles import matmul as tiled
from gpudl.launches import check_launch

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "NAIVE_X", "NAIVE_Y", "TILE",
    "V4_BM", "V4_BN", "V4_BK", "V4_TM", "V4_THREADS",
    "V5_BM", "V5_BN", "V5_BK", "V5_TM", "V5_TN", "V5_THREADS",
    "VARIANTS",
    "reference", "error_bound", "flops",
    "v1_naive", "v2_coalesced", "v3_tiled", "v4_register_1d", "v5_register_2d",
    "launch_config", "launch_v6_triton_tiles", "launch_v7_triton_float16", "matmul",
]


# Shared and local arrays need shapes that are literal integers when the kernel is compiled:
# numba reads these module-level ints as constants.
NAIVE_X, NAIVE_Y = 32, 8  # v1, v2: 256 threads, threadIdx.x runs over one warp's 32 lanes
TILE = 16  # v3: a TILE x TILE block computes a TILE x TILE tile of C
V4_BM, V4_BN, V4_BK, V4_TM = 64, 64, 8, 8  # v4: 64 x 64 tile of C, K in steps of 8
V4_THREADS = V4_BM * V4_BN // V4_TM  # 512: one per column of TM outputs
V5_BM, V5_BN, V5_BK, V5_TM, V5_TN = 128, 128, 8, 8, 8  # v5: 128 x 128 tile, 8 x 8 per thread
V5_THREAD_ROWS, V5_THREAD_COLS = V5_BM // V5_TM, V5_BN // V5_TN  # 16 x 16 threads
V5_THREADS = V5_THREAD_ROWS * V5_THREAD_COLS  # 256
# _load_tile gives every thread of a block the same number of elements of a tile to copy.
if any(size % threads for size, threads in [
        (V4_BM * V4_BK, V4_THREADS), (V4_BK * V4_BN, V4_THREADS),
        (V5_BM * V5_BK, V5_THREADS), (V5_BK * V5_BN, V5_THREADS)]):
    raise ValueError("each tile's size must be a multiple of its block's thread count")


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` in float64 NumPy (float32 inputs convert exactly)."""
    _check_factors(a, b)
    return a.astype(np.float64) @ b.astype(np.float64)


def error_bound(a: np.ndarray, b: np.ndarray, precision: str = "float32") -> np.ndarray:
    """``K * eps32 * (|a| @ |b|)``: the most a float32 ``a @ b`` may differ from
    :func:`reference`, elementwise; with ``precision="float16"`` (float16 factors, float32
    accumulation, a float16 result) twice that plus one rounding to float16 (derivation in
    the module docstring)."""
    _check_factors(a, b)
    check_choice("precision", precision, ("float32", "float16"))
    magnitude = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    bound = a.shape[1] * EPS32 * magnitude
    if precision == "float32":
        return bound
    return 2 * bound + rounding_bound(magnitude + 2 * bound, "float16")


def flops(m: int, k: int, n: int) -> int:
    """Floating-point operations of an (m, k) @ (k, n) product: one multiply and one add
    for each of the k terms of each of the m * n outputs."""
    return 2 * check_int("m", m, 0) * check_int("k", k, 0) * check_int("n", n, 0)


# ------------------------------------------------------------------------------------------
# The kernels, in the order of the worklog
# ------------------------------------------------------------------------------------------


# v1_naive: one thread per output, threadIdx.x running down the rows of C. The 32 lanes of a
# warp hold 32 consecutive rows and one column: at each step of k they read a[row, k] from
# 32 rows K * 4 bytes apart (32 sectors per request, one word of each used) and the same
# b[k, col] (a broadcast), and finally write a column of C (32 sectors again). Every input
# is read from global memory (or the caches) once per output that uses it: 2 K loads per
# 2 K flops.
@registry.kernel("matmul_v1_naive", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=NAIVE_X * NAIVE_Y, reference="gpudl.kernels.matmul.reference")
@cuda.jit
def v1_naive(a, b, c):
    row = cuda.blockIdx.x * NAIVE_X + cuda.threadIdx.x
    col = cuda.blockIdx.y * NAIVE_Y + cuda.threadIdx.y
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc


# v2_coalesced: the same arithmetic with threadIdx.x running along a row of C. A warp now
# holds 32 consecutive columns of one row: a[row, k] is one word for all lanes (a
# broadcast), b[k, col:col + 32] is 128 consecutive bytes (4 sectors, all used) and so is the
# write of C. The same loads in far fewer sectors: v1 fetched a 32-byte sector for every 4
# useful bytes of A and of C; v2 uses every byte it fetches.
@registry.kernel("matmul_v2_coalesced", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=NAIVE_X * NAIVE_Y, reference="gpudl.kernels.matmul.reference")
@cuda.jit
def v2_coalesced(a, b, c):
    row = cuda.blockIdx.y * NAIVE_Y + cuda.threadIdx.y
    col = cuda.blockIdx.x * NAIVE_X + cuda.threadIdx.x
    if row < c.shape[0] and col < c.shape[1]:
        acc = float32(0)
        for k in range(a.shape[1]):
            acc += a[row, k] * b[k, col]
        c[row, col] = acc


@cuda.jit(device=True)
def _load_tile(tile, src, row0, col0, t, threads):
    """Thread ``t`` of ``threads`` copies elements t, t + threads, ... (row-major) of the
    shared ``tile`` from ``src[row0:, col0:]``: consecutive threads, consecutive addresses.
    An element outside ``src`` becomes 0, which adds nothing to any dot product. The trip
    count is a constant (tile.size is a multiple of threads), so the compiler unrolls it."""
    cols = tile.shape[1]
    for p in range(tile.size // threads):
        i = t + p * threads
        row, col = row0 + i // cols, col0 + i % cols
        inside = row < src.shape[0] and col < src.shape[1]
        tile[i // cols, i % cols] = src[row, col] if inside else float32(0)


# v3_tiled: a block of TILE x TILE threads computes a TILE x TILE tile of C. It walks along K
# a TILE-wide slab at a time: each thread copies one element of A's slab and one of B's into
# shared memory (coalesced), the block waits, and each thread does TILE multiply-adds from
# shared memory. Each element loaded from global memory now serves TILE outputs instead of
# one; the cost is two syncthreads per slab and two shared loads per FMA.
# Partial tiles at the edges are zero-filled, so M, N and K need not be multiples of TILE.
@registry.kernel("matmul_v3_tiled", "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=TILE * TILE, reference="gpudl.kernels.matmul.reference")
@cuda.jit
def v3_tiled(a, b, c):
    a_tile = cuda.shared.array((TILE, TILE), float32)
    b_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    t = ty * TILE + tx
    row0, col0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    acc = float32(0)
    for k0 in range(0, a.shape[1], TILE):
        _load_tile(a_tile, a, row0, k0, t, TILE * TILE)
        _load_tile(b_tile, b, k0, col0, t, TILE * TILE)
        cuda.syncthreads()
        for k in range(TILE):
            acc += a_tile[ty, k] * b_tile[k, tx]
        cuda.syncthreads()
    if row0 + ty < c.shape[0] and col0 + tx < c.shape[1]:
        c[row0 + ty, col0 + tx] = acc


# v4_register_1d: each of 512 threads computes a column of V4_TM = 8 outputs of a 64 x 64
# tile of C, with K in slabs of 8. For each k, a thread loads b_tile[k, col] once into a
# register and reuses it for its 8 outputs, reading the 8 A values from shared memory (the
# whole warp reads the same A word: a broadcast). Shared loads per FMA fall from 2 to 9/8
# (in Boehm's profile v3's time goes to its shared loads), and each global load now serves
# 64 outputs instead of 16.
@registry.kernel("matmul_v4_register_1d",
                 "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=V4_THREADS, reference="gpudl.kernels.matmul.reference")
@cuda.jit
def v4_register_1d(a, b, c):
    a_tile = cuda.shared.array((V4_BM, V4_BK), float32)
    b_tile = cuda.shared.array((V4_BK, V4_BN), float32)
    acc = cuda.local.array(V4_TM, float32)
    t = cuda.threadIdx.x
    tr, tc = t // V4_BN, t % V4_BN  # outputs: rows tr * TM ... tr * TM + TM - 1, column tc
    row0, col0 = cuda.blockIdx.y * V4_BM, cuda.blockIdx.x * V4_BN
    for i in range(V4_TM):
        acc[i] = float32(0)
    for k0 in range(0, a.shape[1], V4_BK):
        _load_tile(a_tile, a, row0, k0, t, V4_THREADS)
        _load_tile(b_tile, b, k0, col0, t, V4_THREADS)
        cuda.syncthreads()
        for k in range(V4_BK):
            b_k = b_tile[k, tc]
            for i in range(V4_TM):
                acc[i] += a_tile[tr * V4_TM + i, k] * b_k
        cuda.syncthreads()
    col = col0 + tc
    for i in range(V4_TM):
        row = row0 + tr * V4_TM + i
        if row < c.shape[0] and col < c.shape[1]:
            c[row, col] = acc[i]


# v5_register_2d: each of 256 threads computes an 8 x 8 set of outputs of a 128 x 128 tile
# of C, accumulated in a local array that the compiler keeps in 64 registers. For each k a
# thread loads 8 values of A and 8 of B into registers and does their 64 products (an outer
# product): 16 shared loads for 64 FMAs, 1/4 per FMA, and each global load serves 128
# outputs. Thread (tr, tc) owns rows tr + 16 i and columns tc + 16 j (i, j < 8) rather than
# an 8 x 8 square, so at every shared load a warp's lanes read consecutive words of B (or a
# broadcast of two words of A, in different banks): no bank conflicts, and C is written in
# runs of 16 consecutive floats. The thread index is made unsigned: numba then knows that
# the indices built from it are never negative and drops Python's negative-index wraparound
# and floor-division sign fixes, which otherwise keep one address per shared load in
# registers (ptxas 12.9, sm_90: 157 registers instead of 126: one block per SM, not two).
@registry.kernel("matmul_v5_register_2d",
                 "void(float32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=V5_THREADS, reference="gpudl.kernels.matmul.reference")
@cuda.jit
def v5_register_2d(a, b, c):
    a_tile = cuda.shared.array((V5_BM, V5_BK), float32)
    b_tile = cuda.shared.array((V5_BK, V5_BN), float32)
    acc = cuda.local.array((V5_TM, V5_TN), float32)
    a_reg = cuda.local.array(V5_TM, float32)
    b_reg = cuda.local.array(V5_TN, float32)
    t = uint32(cuda.threadIdx.x)
    tr, tc = t // V5_THREAD_COLS, t % V5_THREAD_COLS
    row0, col0 = cuda.blockIdx.y * V5_BM, cuda.blockIdx.x * V5_BN
    for i in range(V5_TM):
        for j in range(V5_TN):
            acc[i, j] = float32(0)
    for k0 in range(0, a.shape[1], V5_BK):
        _load_tile(a_tile, a, row0, k0, t, V5_THREADS)
        _load_tile(b_tile, b, k0, col0, t, V5_THREADS)
        cuda.syncthreads()
        for k in range(V5_BK):
            for i in range(V5_TM):
                a_reg[i] = a_tile[tr + i * V5_THREAD_ROWS, k]
            for j in range(V5_TN):
                b_reg[j] = b_tile[k, tc + j * V5_THREAD_COLS]
            for i in range(V5_TM):
                for j in range(V5_TN):
                    acc[i, j] += a_reg[i] * b_reg[j]
        cuda.syncthreads()
    for i in range(V5_TM):
        row = row0 + tr + i * V5_THREAD_ROWS
        for j in range(V5_TN):
            col = col0 + tc + j * V5_THREAD_COLS
            if row < c.shape[0] and col < c.shape[1]:
                c[row, col] = acc[i, j]


# ------------------------------------------------------------------------------------------
# Launch configurations and launchers (device arrays; c has shape (M, N), M, N, K >= 1)
# ------------------------------------------------------------------------------------------

_KERNELS: dict[str, Callable] = {
    "v1_naive": v1_naive,
    "v2_coalesced": v2_coalesced,
    "v3_tiled": v3_tiled,
    "v4_register_1d": v4_register_1d,
    "v5_register_2d": v5_register_2d,
}
# rows and columns of C per block, threads per block
_BLOCKS = {
    "v2_coalesced": (NAIVE_Y, NAIVE_X, (NAIVE_X, NAIVE_Y)),
    "v3_tiled": (TILE, TILE, (TILE, TILE)),
    "v4_register_1d": (V4_BM, V4_BN, (V4_THREADS,)),
    "v5_register_2d": (V5_BM, V5_BN, (V5_THREADS,)),
}


def launch_config(variant: str, m: int, n: int) -> tuple[tuple[int, int], tuple[int, ...]]:
    """``(griddim, blockdim)`` of ``variant`` for an (m, n) output: one block per tile of C.

    Grid x runs over the columns of C, except in v1, whose x runs over the rows. A grid
    beyond CUDA's limits is a ``ValueError`` naming the kernel and the limit
    (:func:`gpudl.launches.check_launch`)."""
    check_choice("variant", variant, _KERNELS)  # the Numba variants: Triton sizes its own
    check_int("m", m, 1)
    check_int("n", n, 1)
    if variant == "v1_naive":
        grid = (blocks_to_cover(m, NAIVE_X), blocks_to_cover(n, NAIVE_Y))
        block = (NAIVE_X, NAIVE_Y)
    else:
        rows, cols, block = _BLOCKS[variant]
        grid = (blocks_to_cover(n, cols), blocks_to_cover(m, rows))
    check_launch(f"{__name__}.{variant}", grid, block)
    return grid, block


def _launcher(variant: str) -> Callable[[Array, Array, Array], None]:
    def launch(a: Array, b: Array, c: Array) -> None:
        _KERNELS[variant][launch_config(variant, *c.shape)](a, b, c)

    return launch


for _key in _KERNELS:
    registry.variant("matmul", _key)(_launcher(_key))


# v6_triton_tiles: v5's product in Triton (gpudl.kernels.tiles.matmul): 128 x 128 tiles of C,
# tl.dot with IEEE float32 products, programs grouped so that tiles of B are reused in L2.
@registry.variant("matmul", "v6_triton_tiles", requires="triton")
def launch_v6_triton_tiles(a: Array, b: Array, c: Array) -> None:
    """The Triton kernel on float32 device arrays."""
    tiled.launch_matmul(a, b, c, "float32")


# v7_triton_float16: the same kernel on float16 A and B, accumulating in float32 and storing
# float16: on a GPU its tl.dot runs on the tensor cores (mma.sync, or wgmma on an H100).
@registry.variant("matmul", "v7_triton_float16", requires="triton")
def launch_v7_triton_float16(a: Array, b: Array, c: Array) -> None:
    """The Triton kernel on float16 device arrays."""
    tiled.launch_matmul(a, b, c, "float16")


#: Variant name -> launcher(a, b, c) on device arrays, writing a @ b into c.
VARIANTS: dict[str, Callable[[Array, Array, Array], None]] = registry.variants("matmul")


def matmul(a: Array, b: Array, variant: str = "v5_register_2d") -> Array:
    """``a @ b`` for (M, K) and (K, N) arrays of any sizes, in the format the variant's kernel
    declares (float32, or float16 for ``v7_triton_float16``), computed by the kernel
    ``VARIANTS[variant]`` into a NaN-poisoned output."""
    _check_variant(variant)
    records = registry.VARIANTS["matmul"]  # a variant a test adds is float32
    precision = records[variant].precision if variant in records else "float32"
    on_device = check_arrays(dtype=precision, a=(a, 2), b=(b, 2))
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"inner dimensions do not match: a has shape {a.shape} and b has shape {b.shape} "
            "(a.shape[1] must equal b.shape[0])"
        )
    (m, k), n = a.shape, b.shape[1]
    if k == 0:  # an empty sum: zeros (and nothing to launch)
        return zeros((m, n), on_device, precision)
    return launch_into_poisoned(VARIANTS[variant], (a, b), [(m, n)], on_device, precision)[0]


# ------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------


def _check_factors(a: np.ndarray, b: np.ndarray) -> None:
    check_array("a", a, 2)
    check_equal("b.shape[0]", check_array("b", b, 2).shape[0], "a.shape[1]", a.shape[1])


def _check_variant(variant: str) -> None:
    registry.check_variant("matmul", variant, VARIANTS)

