"""One tile of keys of decode attention: the device functions every decode variant calls.

Book section: Chapter 9, "Decode attention, one block per head".

A block is one warp; lane ``t`` holds the query's and the output's head dimensions ``t``,
``t + 32``, ``t + 64`` and ``t + 96`` (``COLUMNS`` of them). For each tile of ``TILE`` (32)
keys the block computes the scores (``contiguous_scores``), takes Chapter 8's online
softmax step (``online_softmax_step``) and adds the weighted values
(``contiguous_values``); ``attend_keys`` runs the three over a range of keys.
:mod:`gpudl.kernels.decode`'s variants and :mod:`gpudl.kernels.paged`'s paged kernel are
built from them (the paged one reads its keys and values through a block table instead).
"""

from __future__ import annotations

import math

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

__all__ = [
    "TILE", "TILE_PADDED", "COLUMNS", "NEG_INF",
    "contiguous_scores", "online_softmax_step", "contiguous_values", "load_query",
    "attend_keys", "store_row",
]

TILE = 32  # keys per tile, and threads per block (one warp)
TILE_PADDED = TILE + 1  # the partial-score tile's row: lanes of one column hit 32 banks
COLUMNS = 4  # head dimensions per thread: t, t + 32, t + 64, t + 96
NEG_INF = float32(-np.inf)


@cuda.jit(device=True)
def contiguous_scores(partial, q_r, k_cache, b, g, j0, keys, d):
    """Lane t's share of each of the tile's scores into column t of ``partial``: the sum of
    ``q[c] k[j, c]`` over its columns c = t, t + 32, ... The lanes read consecutive columns
    of one key row at a time (coalesced), as they later read the values."""
    t = cuda.threadIdx.x
    for jj in range(keys):
        p = float32(0)
        for r in range(COLUMNS):
            c = t + r * TILE
            if c < d:
                p += q_r[r] * k_cache[b, g, j0 + jj, c]
        partial[jj, t] = p
    cuda.syncthreads()


@cuda.jit(device=True)
def online_softmax_step(partial, w_s, m, total, keys, scale):
    """Chapter 8's online softmax for one tile: thread t adds row t of ``partial`` (its
    key's score), the tile's maximum updates the running one, ``w_s`` gets the tile's
    weights ``exp(x - m_new)``. Returns ``(m_new, alpha, total_new)``, with ``alpha =
    exp(m - m_new)`` the factor that rescales what was summed so far."""
    t = cuda.threadIdx.x
    x = NEG_INF
    if t < keys:
        x = float32(0)
        for lane in range(TILE):
            x += partial[t, lane]
        x *= scale
    w_s[t] = x
    cuda.syncthreads()
    m_new = m
    for jj in range(keys):
        if w_s[jj] > m_new:
            m_new = w_s[jj]
    cuda.syncthreads()  # every thread has read the scores
    w_s[t] = math.exp(x - m_new)
    alpha = math.exp(m - m_new)
    cuda.syncthreads()
    tile_sum = float32(0)
    for jj in range(keys):
        tile_sum += w_s[jj]
    return m_new, alpha, alpha * total + tile_sum


@cuda.jit(device=True)
def contiguous_values(acc, w_s, v_cache, b, g, j0, keys, d, alpha):
    """Thread t's output columns rescaled by ``alpha`` plus the tile's weighted values, read
    a row at a time by the 32 lanes (coalesced)."""
    t = cuda.threadIdx.x
    for r in range(COLUMNS):
        c = t + r * TILE
        if c < d:
            part = float32(0)
            for jj in range(keys):
                part += w_s[jj] * v_cache[b, g, j0 + jj, c]
            acc[r] = alpha * acc[r] + part
    cuda.syncthreads()  # the tile's weights are read before the next tile overwrites them


@cuda.jit(device=True)
def load_query(q_r, acc, q, b, h):
    """Thread t's columns t, t + 32, ... of ``q[b, h]`` into ``q_r`` (zeros past ``d``), and
    its output columns ``acc`` set to 0."""
    t, d = cuda.threadIdx.x, q.shape[2]
    for r in range(COLUMNS):
        c = t + r * TILE
        q_r[r] = q[b, h, c] if c < d else float32(0)
        acc[r] = float32(0)


@cuda.jit(device=True)
def attend_keys(partial, w_s, q_r, acc, k_cache, v_cache, b, g, start, end, scale):
    """Keys ``start .. end - 1`` of cache head ``g`` of sequence ``b``, a tile at a time:
    returns the running maximum and sum, ``acc`` holding the unnormalised output."""
    d = k_cache.shape[3]
    m = NEG_INF
    total = float32(0)
    for j0 in range(start, end, TILE):
        keys = min(TILE, end - j0)
        contiguous_scores(partial, q_r, k_cache, b, g, j0, keys, d)
        m, alpha, total = online_softmax_step(partial, w_s, m, total, keys, scale)
        contiguous_values(acc, w_s, v_cache, b, g, j0, keys, d, alpha)
    return m, total


@cuda.jit(device=True)
def store_row(row, acc, divisor):
    """Thread t's output columns ``acc / divisor`` into the 1-D ``row``."""
    t = cuda.threadIdx.x
    for r in range(COLUMNS):
        c = t + r * TILE
        if c < row.shape[0]:
            row[c] = acc[r] / divisor
