"""Matrix multiply on tensor cores, from the warp-level mma of :mod:`gpudl.kernels.mma`.

Book section: Chapter 8, "A tensor-core matmul".

Every variant computes ``C = bf16(A) @ bf16(B)`` in float32 for float32 ``A`` (M, K) and
``B`` (K, N) of any sizes, on GPUs of compute capability 8.0 or later (and on the
simulator). The inputs are first rounded to bfloat16 (to nearest, ties to even) and packed
two per 32-bit word by ``pack_bf16``, ``A`` along its rows and ``B`` along its columns
(``B^T`` row by row), with ``K`` padded with zeros to a multiple of 16: those words are the
registers that :func:`gpudl.kernels.mma.mma_bf16` takes. Then:

* ``v1_warp_tiles``: each warp computes one 16 x 8 tile of C, loading its fragments straight
  from device memory, one mma per 16 values of K;
* ``v2_shared_tiles``: a block of four warps computes a 64 x 64 tile of C. For each 16 values
  of K the block copies a 64 x 16 slab of A and of B^T into shared memory (coalesced), and
  each warp computes a 32 x 32 part of the tile: two fragments of A and four of B^T, read
  from shared memory without bank conflicts, feed eight mmas. Each loaded word serves 64
  outputs instead of 8, as Chapter 3's tiles did for SIMT kernels.

Accuracy: one mma errs by at most ``18 eps32`` times the sum of the magnitudes of its
products and its accumulator (:mod:`gpudl.kernels.mma`); the accumulator never exceeds the
sum of the magnitudes of the products added so far, so over the ``ceil(K / 16)``
instructions of one output, ``|C - bf16(A) @ bf16(B)| <= 18 ceil(K / 16) eps32 (|bf16(A)| @
|bf16(B)|)``: :func:`error_bound`. The float64 :func:`reference` multiplies the rounded
inputs, so the rounding of the inputs themselves, which no bf16 kernel avoids, is not an
error of the kernel (Chapter 8 measures it against float32).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32, uint32

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_bool,
    check_choice,
    check_equal,
    check_float32_array,
    check_int,
    is_device_array,
)
from gpudl.kernels.arrays import EPS32, check_arrays, launch_into_poisoned, zeros
from gpudl.kernels.grid import blocks_to_cover, tiles_to_cover
from gpudl.kernels.mma import ERROR_ULPS, bf16_round, check_tensor_cores, mma_bf16
from gpudl.kernels.mma import K as MMA_K
from gpudl.kernels.mma import M as MMA_M
from gpudl.kernels.mma import N as MMA_N
from gpudl.launches import check_launch

Array = Any

__all__ = [
    "WARPS", "BM", "BN", "WM", "WN", "VARIANTS",
    "reference", "error_bound", "pack_bf16", "packed",
    "v1_warp_tiles", "v2_shared_tiles", "launch_config", "matmul",
]

WARPS = 4  # warps per block, in both variants
THREADS = 32 * WARPS
WORDS = MMA_K // 2  # 32-bit words of bf16 per row of one mma's K
BM = BN = 64  # v2: tile of C per block
WM = WN = 32  # v2: part of the tile per warp, 2 x 4 mma tiles of 16 x 8
TILES_M, TILES_N = WM // MMA_M, WN // MMA_N


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``bf16(a) @ bf16(b)`` in float64: the product of the rounded inputs."""
    _check_factors(a, b)
    return bf16_round(a).astype(np.float64) @ bf16_round(b).astype(np.float64)


def error_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``18 ceil(K / 16) eps32 (|bf16(a)| @ |bf16(b)|)``, elementwise (module docstring)."""
    _check_factors(a, b)
    steps = -(-a.shape[1] // MMA_K)
    magnitude = np.abs(bf16_round(a)).astype(np.float64) @ np.abs(bf16_round(b))
    return ERROR_ULPS * steps * EPS32 * magnitude


# ------------------------------------------------------------------------------------------
# Packing: float32 -> bf16 pairs in 32-bit words, on the device
# ------------------------------------------------------------------------------------------


# pack_bf16: one thread per word of the output: words[r, w] holds x[r, 2w] in its low half
# and x[r, 2w + 1] in its high half (x is x_bits, or its transpose when transpose is set),
# zero past the end of x's rows. Each float32 (as its bits) becomes the nearest bf16, ties to
# even: add 0x7FFF plus the lowest bit that stays, keep the high 16 bits; a NaN stays a quiet
# NaN.
@registry.kernel("tensor_core_pack_bf16", "void(uint32[:, ::1], uint32[:, ::1], boolean)")
@cuda.jit
def pack_bf16(x_bits, words, transpose):
    w, r = cuda.grid(2)
    if r < words.shape[0] and w < words.shape[1]:
        k = x_bits.shape[0] if transpose else x_bits.shape[1]
        out = uint32(0)
        for half in range(2):
            col = 2 * w + half
            if col < k:
                bits = x_bits[col, r] if transpose else x_bits[r, col]
                if (bits & uint32(0x7FFFFFFF)) > uint32(0x7F800000):
                    high = (bits >> uint32(16)) | uint32(0x40)
                else:
                    high = (bits + uint32(0x7FFF) + ((bits >> uint32(16)) & uint32(1))) >> uint32(
                        16)
                out |= high << uint32(16 * half)
        words[r, w] = out


def packed(x: Array, transpose: bool = False) -> Array:
    """The bf16 words of a float32 device array ``x`` (rows, k), or of its transpose: a
    ``(rows, ceil(k / 16) * 8)`` uint32 device array."""
    check_bool("transpose", transpose)
    if not is_device_array(x):
        raise TypeError(f"x must be a numba device array, got {type(x).__name__}")
    check_float32_array("x", x, 2)
    rows, k = (x.shape[1], x.shape[0]) if transpose else x.shape
    words = cuda.device_array((rows, -(-k // MMA_K) * WORDS), np.uint32)
    if words.size:
        grid = tiles_to_cover(words.shape, 16)
        pack_bf16[grid, (16, 16)](x.view(np.uint32), words, transpose)
    return words


# ------------------------------------------------------------------------------------------
# The kernels (a: (M, Kw) words of A, bt: (N, Kw) words of B^T, c: (M, N) float32)
# ------------------------------------------------------------------------------------------


# v1_warp_tiles: warp w of a block computes the 16 x 8 tile of C at rows 16 blockIdx.y and
# columns 8 (4 blockIdx.x + w). Lane (g, t) loads words t and t + 4 of rows g and g + 8 of A
# and of row g of B^T (zero outside the matrices) and passes them to the mma with its four
# running sums. A warp whose tile lies wholly outside C skips the loop as one (every lane of
# a warp must take part in an mma).
@registry.kernel("tensor_core_v1_warp_tiles",
                 "void(uint32[:, ::1], uint32[:, ::1], float32[:, ::1])", threads_per_block=THREADS,
                 reference="gpudl.kernels.tensor_core_matmul.reference")
@cuda.jit
def v1_warp_tiles(a, bt, c):
    lane, warp = cuda.threadIdx.x % 32, cuda.threadIdx.x // 32
    g, t = lane // 4, lane % 4
    m, n = c.shape
    row0, col0 = cuda.blockIdx.y * MMA_M, (cuda.blockIdx.x * WARPS + warp) * MMA_N
    if col0 < n:
        r0, r1, cb = row0 + g, row0 + g + 8, col0 + g
        d0 = d1 = d2 = d3 = float32(0)
        for w0 in range(0, a.shape[1], WORDS):
            a0 = a[r0, w0 + t] if r0 < m else uint32(0)
            a1 = a[r1, w0 + t] if r1 < m else uint32(0)
            a2 = a[r0, w0 + t + 4] if r0 < m else uint32(0)
            a3 = a[r1, w0 + t + 4] if r1 < m else uint32(0)
            b0 = bt[cb, w0 + t] if cb < n else uint32(0)
            b1 = bt[cb, w0 + t + 4] if cb < n else uint32(0)
            d0, d1, d2, d3 = mma_bf16(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
        col = col0 + 2 * t
        if r0 < m and col < n:
            c[r0, col] = d0
        if r0 < m and col + 1 < n:
            c[r0, col + 1] = d1
        if r1 < m and col < n:
            c[r1, col] = d2
        if r1 < m and col + 1 < n:
            c[r1, col + 1] = d3


# v2_shared_tiles: four warps, a 64 x 64 tile of C; warp (wr, wc) computes rows 32 wr ...
# and columns 32 wc ... of it as 2 x 4 mma tiles, 32 running sums per lane. For each 16
# values of K the block copies 64 rows x 8 words of A and of B^T into shared memory (each
# thread 4 words of each, 8 consecutive threads reading one 32-byte row: coalesced). A lane
# reads word t (or t + 4) of row g (or g + 8) of a slab: 8 words per row, so the 32 lanes hit
# 32 different banks. Each A fragment serves four mmas, each B fragment two.
@registry.kernel("tensor_core_v2_shared_tiles",
                 "void(uint32[:, ::1], uint32[:, ::1], float32[:, ::1])", threads_per_block=THREADS,
                 reference="gpudl.kernels.tensor_core_matmul.reference")
@cuda.jit
def v2_shared_tiles(a, bt, c):
    a_s = cuda.shared.array((BM, WORDS), uint32)
    b_s = cuda.shared.array((BN, WORDS), uint32)
    acc = cuda.local.array((TILES_M, TILES_N, 4), float32)
    tid = cuda.threadIdx.x
    lane, warp = tid % 32, tid // 32
    g, t = lane // 4, lane % 4
    m, n = c.shape
    row0, col0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    wrow, wcol = row0 + (warp // 2) * WM, col0 + (warp % 2) * WN
    active = wrow < m and wcol < n  # the same for every lane of the warp
    for i in range(TILES_M):
        for j in range(TILES_N):
            for e in range(4):
                acc[i, j, e] = float32(0)
    for w0 in range(0, a.shape[1], WORDS):
        for p in range(BM * WORDS // THREADS):
            e = tid + p * THREADS
            r, w = e // WORDS, e % WORDS
            a_s[r, w] = a[row0 + r, w0 + w] if row0 + r < m else uint32(0)
            b_s[r, w] = bt[col0 + r, w0 + w] if col0 + r < n else uint32(0)
        cuda.syncthreads()
        if active:
            for i in range(TILES_M):
                ar = wrow - row0 + i * MMA_M + g
                a0, a1 = a_s[ar, t], a_s[ar + 8, t]
                a2, a3 = a_s[ar, t + 4], a_s[ar + 8, t + 4]
                for j in range(TILES_N):
                    br = wcol - col0 + j * MMA_N + g
                    d = mma_bf16(a0, a1, a2, a3, b_s[br, t], b_s[br, t + 4],
                                 acc[i, j, 0], acc[i, j, 1], acc[i, j, 2], acc[i, j, 3])
                    for e in range(4):
                        acc[i, j, e] = d[e]
        cuda.syncthreads()
    if active:
        for i in range(TILES_M):
            for j in range(TILES_N):
                col = wcol + j * MMA_N + 2 * t
                for half in range(2):
                    row = wrow + i * MMA_M + g + 8 * half
                    if row < m and col < n:
                        c[row, col] = acc[i, j, 2 * half]
                    if row < m and col + 1 < n:
                        c[row, col + 1] = acc[i, j, 2 * half + 1]


_KERNELS: dict[str, Callable] = {"v1_warp_tiles": v1_warp_tiles,
                                 "v2_shared_tiles": v2_shared_tiles}


def launch_config(variant: str, m: int, n: int) -> tuple[tuple[int, int], int]:
    """``(griddim, blockdim)`` of ``variant`` for an (m, n) output: 128 threads per block,
    grid x over the columns of C. A grid beyond CUDA's limits is a ``ValueError`` naming the
    kernel and the limit (:func:`gpudl.launches.check_launch`)."""
    check_choice("variant", variant, _KERNELS)
    check_int("m", m, 1)
    check_int("n", n, 1)
    if variant == "v1_warp_tiles":
        grid = (blocks_to_cover(n, WARPS * MMA_N), blocks_to_cover(m, MMA_M))
    else:
        grid = (blocks_to_cover(n, BN), blocks_to_cover(m, BM))
    check_launch(f"{__name__}.{variant}", grid, THREADS)
    return grid, THREADS


def _check_factors(a: np.ndarray, b: np.ndarray) -> None:
    check_array("a", a, 2)
    check_equal("b.shape[0]", check_array("b", b, 2).shape[0], "a.shape[1]", a.shape[1])


def _launcher(variant: str) -> Callable[[Array, Array, Array], None]:
    def launch(a_words: Array, bt_words: Array, c: Array) -> None:
        _KERNELS[variant][launch_config(variant, *c.shape)](a_words, bt_words, c)

    return launch


#: Variant name -> launcher(a_words, bt_words, c) on device arrays (see :func:`packed`).
for _key in _KERNELS:
    registry.variant("tensor_core", _key)(_launcher(_key))
VARIANTS: dict[str, Callable[[Array, Array, Array], None]] = registry.variants("tensor_core")


def matmul(a: Array, b: Array, variant: str = "v2_shared_tiles") -> Array:
    """``bf16(a) @ bf16(b)`` in float32 for float32 (M, K) and (K, N) arrays of any sizes,
    on tensor cores (compute capability 8.0 or later; the simulator emulates them)."""
    check_choice("variant", variant, VARIANTS)
    on_device = check_arrays(a=(a, 2), b=(b, 2))
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions do not match: a has shape {a.shape} and b has "
                         f"shape {b.shape} (a.shape[1] must equal b.shape[0])")
    check_tensor_cores()
    (m, k), n = a.shape, b.shape[1]
    if k == 0:  # an empty sum: zeros (and nothing to launch)
        return zeros((m, n), on_device)

    def launch(a_d: Array, b_d: Array, c: Array) -> None:
        VARIANTS[variant](packed(a_d), packed(b_d, transpose=True), c)

    return launch_into_poisoned(launch, (a, b), [(m, n)], on_device)[0]
