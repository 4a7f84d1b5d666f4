"""Attention's first variant: three kernels, the s x s scores and probabilities in memory.

Book section: *Chapter 8*, "v1: three kernels and the scores in memory".

For each head ``z`` of float32 ``q``, ``k``, ``v`` of shape ``(heads, s, d)``,
``v1_three_kernels`` computes ``S = q k^T / sqrt(d)`` into device memory
(``v1_scores``), a row softmax from ``S`` into ``P`` with each row's log-sum-exp
(``v1_softmax``), then ``o = P v`` (``v1_pv``): two ``s x s`` matrices per head
written and read back. :mod:`gpudl.kernels.attention` holds the reference, the fused
variant that writes neither, the entry point and the bytes each variant moves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.kernels.arrays import poisoned
from gpudl.kernels.grid import blocks_to_cover

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any
# launch(kernel, griddim, blockdim, *args): how a host function starts a kernel (plainly, or
# under the tracer).
Launch = Callable[..., None]

__all__ = ["TILE", "NEG_INF", "plain_launch", "v1_scores", "v1_softmax", "v1_pv",
           "v1_three_kernels"]

TILE = 16  # the side of the square tiles of S and of o
TILE_PADDED = TILE + 1  # a module constant: a shape written TILE + 1 in a kernel is not one
WARP = 32
NEG_INF = float32(-np.inf)  # a float32 constant: a Python -inf would be float64 in the kernel


# v1_scores: S = q k^T / sqrt(d), masked, one 16 x 16 tile of S per block (Chapter 3's v3
# tiling, with k's rows in place of B's columns: both tiles are read row by row, coalesced).
# k's tile has a padding column, so that the 16 lanes reading k_tile[tx, c] hit 16 banks.
@registry.kernel("attention_v1_scores",
                 "void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], float32, "
                 "boolean)")
@cuda.jit
def v1_scores(q, k, scores, scale, causal):
    q_tile = cuda.shared.array((TILE, TILE), float32)
    k_tile = cuda.shared.array((TILE, TILE_PADDED), float32)
    tx, ty, z = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z
    i0, j0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    s, d = q.shape[1], q.shape[2]
    acc = float32(0)
    for c0 in range(0, d, TILE):
        inside = c0 + tx < d
        q_tile[ty, tx] = q[z, i0 + ty, c0 + tx] if inside and i0 + ty < s else float32(0)
        k_tile[ty, tx] = k[z, j0 + ty, c0 + tx] if inside and j0 + ty < s else float32(0)
        cuda.syncthreads()
        for c in range(TILE):
            acc += q_tile[ty, c] * k_tile[tx, c]
        cuda.syncthreads()
    i, j = i0 + ty, j0 + tx
    if i < s and j < s:
        scores[z, i, j] = NEG_INF if causal and j > i else acc * scale


# v1_softmax: a block of one warp per row of S. Three passes over the row, each coalesced:
# its maximum, the sum of exp(x - max), then P = exp(x - max) / sum. Each lane reduces every
# 32nd element; the lanes then swap their 32 partial results through shared memory (each
# lane reads all 32, a broadcast) so that every lane holds the row's maximum and sum.
# Subtracting the maximum keeps exp from overflowing; masked scores (-inf) give exactly 0. A
# NaN is never the maximum, but it makes the sum NaN, and so the whole row.
@registry.kernel("attention_v1_softmax",
                 "void(float32[:, :, ::1], float32[:, :, ::1], float32[:, ::1])")
@cuda.jit
def v1_softmax(scores, probs, lse):
    partial = cuda.shared.array(WARP, float32)
    lane, i, z = cuda.threadIdx.x, cuda.blockIdx.x, cuda.blockIdx.y
    s = scores.shape[2]
    m = NEG_INF
    for j in range(lane, s, WARP):
        x = scores[z, i, j]
        if x > m:
            m = x
    partial[lane] = m
    cuda.syncthreads()
    for other in range(WARP):
        if partial[other] > m:
            m = partial[other]
    cuda.syncthreads()
    total = float32(0)
    for j in range(lane, s, WARP):
        total += math.exp(scores[z, i, j] - m)
    partial[lane] = total
    cuda.syncthreads()
    total = float32(0)
    for other in range(WARP):
        total += partial[other]
    for j in range(lane, s, WARP):
        probs[z, i, j] = math.exp(scores[z, i, j] - m) / total
    if lane == 0:
        lse[z, i] = m + math.log(total)


# v1_pv: o = P v, one 16 x 16 tile of o per block, walking along the keys a tile at a time
# (Chapter 3's v3 again). When causal, a row adds no term for the keys it does not see (their
# weight is 0, but 0 times a NaN value would be NaN).
@registry.kernel("attention_v1_pv",
                 "void(float32[:, :, ::1], float32[:, :, ::1], float32[:, :, ::1], boolean)")
@cuda.jit
def v1_pv(probs, v, o, causal):
    p_tile = cuda.shared.array((TILE, TILE), float32)
    v_tile = cuda.shared.array((TILE, TILE), float32)
    tx, ty, z = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.z
    i0, c0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    s, d = v.shape[1], v.shape[2]
    acc = float32(0)
    for j0 in range(0, s, TILE):
        inside = j0 + tx < s
        p_tile[ty, tx] = probs[z, i0 + ty, j0 + tx] if inside and i0 + ty < s else float32(0)
        inside = c0 + tx < d
        v_tile[ty, tx] = v[z, j0 + ty, c0 + tx] if inside and j0 + ty < s else float32(0)
        cuda.syncthreads()
        keys = min(TILE, i0 + ty - j0 + 1) if causal else TILE
        for j in range(keys):
            acc += p_tile[ty, j] * v_tile[j, tx]
        cuda.syncthreads()
    i, c = i0 + ty, c0 + tx
    if i < s and c < d:
        o[z, i, c] = acc


def plain_launch(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
    """``kernel[griddim, blockdim](*args)``: the launch of a variant run outside the tracer."""
    kernel[griddim, blockdim](*args)


@registry.variant("attention", "v1_three_kernels", kernels=(
    "attention_v1_scores", "attention_v1_softmax", "attention_v1_pv"))
def v1_three_kernels(q: Array, k: Array, v: Array, o: Array, lse: Array, causal: bool,
                     launch: Launch = plain_launch, workspace: tuple[Array, Array] | None = None
                     ) -> None:
    """Scores, softmax and ``P v`` as three launches, through two ``(heads, s, s)`` device
    arrays: ``workspace`` if given (a benchmark allocates them once), else new ones."""
    heads, s, d = q.shape
    scores, probs = workspace or (poisoned((heads, s, s)), poisoned((heads, s, s)))
    tiles = blocks_to_cover(s, TILE)
    scale = np.float32(1 / math.sqrt(d))
    launch(v1_scores, (tiles, tiles, heads), (TILE, TILE), q, k, scores, scale, causal)
    launch(v1_softmax, (s, heads), WARP, scores, probs, lse)
    launch(v1_pv, (blocks_to_cover(d, TILE), tiles, heads), (TILE, TILE), probs, v, o, causal)
