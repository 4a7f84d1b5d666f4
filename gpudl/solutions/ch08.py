"""Solutions to the exercises of Chapter 8, attention and tensor cores.

Book section: Chapter 8, "Exercises": the backward pass of fused attention as kernels that
recompute the scores from the saved log-sum-exp (exercise 1), which lane holds an element of
an mma fragment (exercise 2), the size at which a bf16 matrix product can reach the tensor
cores' peak (exercise 3), and the bytes the fused kernel saves (exercise 4).

The backward pass (FlashAttention-2, Dao 2023): with ``P = exp(S - lse)`` recomputed tile by
tile from ``q``, ``k`` and the forward's ``lse``, ``dV = P^T dO``, ``dP = dO V^T``,
``dS = P * (dP - D)`` with ``D_i = dO_i . O_i`` (the row sums of ``P * dP``), ``dQ = dS K /
sqrt(d)`` and ``dK = dS^T Q / sqrt(d)``. One kernel walks over the keys for each block of
queries (``dQ``), another over the queries for each block of keys (``dK``, ``dV``), so that
no two blocks write one output and no atomics are needed; no ``s x s`` matrix is stored.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_bool, check_choice, check_float32_array
from gpudl.estimate import ridge_point
from gpudl.hardware import spec
from gpudl.kernels import attention as attention_kernels
from gpudl.kernels import attention_error
from gpudl.kernels.arrays import EPS32, poisoned
from gpudl.kernels.grid import blocks_to_cover

TILE = attention_kernels.TILE

# ------------------------------------------------------------------------------------------
# Exercise 1: the backward pass
# ------------------------------------------------------------------------------------------


# _row_dots: delta[z, i] = do[z, i] . o[z, i], one thread per row.
@registry.kernel("ch08_row_dots", "void(float32[:, :, ::1], float32[:, :, ::1], float32[:, ::1])")
@cuda.jit
def _row_dots(o, do, delta):
    i, z = cuda.grid(1), cuda.blockIdx.y
    if i < o.shape[1]:
        total = float32(0)
        for c in range(o.shape[2]):
            total += do[z, i, c] * o[z, i, c]
        delta[z, i] = total


_BACKWARD = "float32[:, :, ::1], " * 4 + "float32[:, ::1], float32[:, ::1], float32[:, :, ::1]"
_BUILDS = ((16, False), (16, True), (64, True))


@registry.factory("ch08_dq", [(b, f"void({_BACKWARD}, float32)") for b in _BUILDS], item=0)
@registry.factory("ch08_dkdv", [(b, f"void({_BACKWARD}, float32[:, :, ::1], float32)")
                                for b in _BUILDS], item=1)
@functools.cache
def backward_kernels(d: int, causal: bool) -> tuple[Any, Any]:
    """The ``dQ`` kernel and the ``dK``/``dV`` kernel for head size ``d`` (shared arrays
    need constant shapes, as in :func:`gpudl.kernels.attention.fused_kernel`)."""
    n_out, threads, d_padded = -(-d // TILE), TILE * TILE, d + 1

    # dq_kernel: 16 query rows per block; thread (ty, tx) recomputes the score of query ty
    # and key tx of each key tile, p = exp(x - lse), dS = p (dO.v - D), and adds dS k to its
    # output columns tx, tx + 16, ...
    @cuda.jit
    def dq_kernel(q, k, v, do, lse, delta, dq, scale):
        q_s = cuda.shared.array((TILE, d), float32)
        do_s = cuda.shared.array((TILE, d), float32)
        k_s = cuda.shared.array((TILE, d_padded), float32)
        v_s = cuda.shared.array((TILE, d_padded), float32)
        ds_s = cuda.shared.array((TILE, TILE), float32)
        acc = cuda.local.array(n_out, float32)
        tx, ty, z = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.y
        t, i0, s = ty * TILE + tx, cuda.blockIdx.x * TILE, q.shape[1]
        i = i0 + ty
        for e in range(t, TILE * d, threads):
            r, c = e // d, e % d
            q_s[r, c] = q[z, i0 + r, c] if i0 + r < s else float32(0)
            do_s[r, c] = do[z, i0 + r, c] if i0 + r < s else float32(0)
        for r in range(n_out):
            acc[r] = float32(0)
        row_lse = lse[z, i] if i < s else float32(0)
        row_delta = delta[z, i] if i < s else float32(0)
        end = min(s, i0 + TILE) if causal else s
        for j0 in range(0, end, TILE):
            for e in range(t, TILE * d, threads):
                r, c = e // d, e % d
                k_s[r, c] = k[z, j0 + r, c] if j0 + r < s else float32(0)
                v_s[r, c] = v[z, j0 + r, c] if j0 + r < s else float32(0)
            cuda.syncthreads()
            j = j0 + tx
            x, dp = float32(0), float32(0)
            for c in range(d):
                x += q_s[ty, c] * k_s[tx, c]
                dp += do_s[ty, c] * v_s[tx, c]
            seen = i < s and j < s and (j <= i or not causal)
            ds_s[ty, tx] = math.exp(x * scale - row_lse) * (dp - row_delta) if seen\
                else float32(0)
            cuda.syncthreads()
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    for jj in range(TILE):
                        acc[r] += ds_s[ty, jj] * k_s[jj, c]
            cuda.syncthreads()
        if i < s:
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    dq[z, i, c] = acc[r] * scale

    # dkdv_kernel: 16 key rows per block; thread (ty, tx) recomputes the score of key ty and
    # query tx of each query tile (causal: from the block's diagonal on), and adds p dO to
    # its columns of dV and dS q to its columns of dK.
    @cuda.jit
    def dkdv_kernel(q, k, v, do, lse, delta, dk, dv, scale):
        k_s = cuda.shared.array((TILE, d), float32)
        v_s = cuda.shared.array((TILE, d), float32)
        q_s = cuda.shared.array((TILE, d_padded), float32)
        do_s = cuda.shared.array((TILE, d_padded), float32)
        p_s = cuda.shared.array((TILE, TILE), float32)
        ds_s = cuda.shared.array((TILE, TILE), float32)
        acc_k = cuda.local.array(n_out, float32)
        acc_v = cuda.local.array(n_out, float32)
        tx, ty, z = cuda.threadIdx.x, cuda.threadIdx.y, cuda.blockIdx.y
        t, j0, s = ty * TILE + tx, cuda.blockIdx.x * TILE, q.shape[1]
        j = j0 + ty
        for e in range(t, TILE * d, threads):
            r, c = e // d, e % d
            k_s[r, c] = k[z, j0 + r, c] if j0 + r < s else float32(0)
            v_s[r, c] = v[z, j0 + r, c] if j0 + r < s else float32(0)
        for r in range(n_out):
            acc_k[r] = float32(0)
            acc_v[r] = float32(0)
        for i0 in range(j0 if causal else 0, s, TILE):
            for e in range(t, TILE * d, threads):
                r, c = e // d, e % d
                q_s[r, c] = q[z, i0 + r, c] if i0 + r < s else float32(0)
                do_s[r, c] = do[z, i0 + r, c] if i0 + r < s else float32(0)
            cuda.syncthreads()
            i = i0 + tx
            x, dp = float32(0), float32(0)
            for c in range(d):
                x += q_s[tx, c] * k_s[ty, c]
                dp += do_s[tx, c] * v_s[ty, c]
            p = float32(0)
            ds = float32(0)
            if i < s and j < s and (j <= i or not causal):
                p = math.exp(x * scale - lse[z, i])
                ds = p * (dp - delta[z, i])
            p_s[ty, tx] = p
            ds_s[ty, tx] = ds
            cuda.syncthreads()
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    for ii in range(TILE):
                        acc_v[r] += p_s[ty, ii] * do_s[ii, c]
                        acc_k[r] += ds_s[ty, ii] * q_s[ii, c]
            cuda.syncthreads()
        if j < s:
            for r in range(n_out):
                c = tx + r * TILE
                if c < d:
                    dk[z, j, c] = acc_k[r] * scale
                    dv[z, j, c] = acc_v[r]

    return dq_kernel, dkdv_kernel


def attention_backward(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                       do: np.ndarray, lse: np.ndarray, causal: bool = False
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` for float32 host arrays of shape ``(heads, s, d)``, from the
    forward's output ``o`` and log-sum-exp ``lse`` (:func:`gpudl.kernels.attention.forward`)
    and the gradient ``do`` of the loss with respect to ``o`` (exercise 1)."""
    check_bool("causal", causal)
    for name, x, ndim in (("q", q, 3), ("k", k, 3), ("v", v, 3), ("o", o, 3), ("do", do, 3),
                          ("lse", lse, 2)):
        check_float32_array(name, x, ndim)
        if x.shape != q.shape[:ndim]:
            raise ValueError(f"{name} must have shape {q.shape[:ndim]}, got {x.shape}")
    heads, s, d = q.shape
    if not 1 <= d <= attention_kernels.MAX_HEAD_DIM or heads * s == 0:
        raise ValueError(
            f"need heads, s >= 1 and 1 <= d <= {attention_kernels.MAX_HEAD_DIM}, got {q.shape}"
        )
    arrays = [cuda.to_device(x) for x in (q, k, v, do, lse)]
    delta = poisoned((heads, s))
    _row_dots[(blocks_to_cover(s, 32), heads), 32](cuda.to_device(o), arrays[3], delta)
    dq, dk, dv = (poisoned(q.shape) for _ in range(3))
    dq_kernel, dkdv_kernel = backward_kernels(d, bool(causal))
    grid, block = (blocks_to_cover(s, TILE), heads), (TILE, TILE)
    scale = np.float32(1 / math.sqrt(d))
    dq_kernel[grid, block](*arrays, delta, dq, scale)
    dkdv_kernel[grid, block](*arrays, delta, dk, dv, scale)
    return dq.copy_to_host(), dk.copy_to_host(), dv.copy_to_host()


def backward_error_bound(q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray,
                         do: np.ndarray, causal: bool = False
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elementwise bounds on the error of :func:`attention_backward`'s ``(dq, dk, dv)``
    against the exact gradients, given the forward's float32 ``o`` and ``lse``.

    As for the forward pass (:mod:`gpudl.kernels.attention`), to first order in ``u``: the
    recomputed ``P`` has relative error ``t = (d + 2) a + |x - lse| + 4`` units of ``u`` plus
    the forward's error on ``lse``; ``dP = dO V^T`` errs by ``(d + 1) u |dO| |V|^T``;
    ``D = dO . o`` by ``(d + 1) u |dO| . |o|`` plus ``|dO|`` times the forward's bound on
    ``o``; ``dS = P (dP - D)`` by ``|P| t |dP - D| + |P| (e_dP + e_D + u (|dP| + |D|)) + u
    |dS|``; and each product over the ``s`` keys or queries adds ``n u`` of its magnitude,
    ``n = s + 2 ceil(s / 16) + 32`` as in the forward pass. The bound is twice the sum, in
    units of ``eps32 = 2u``."""
    q, k, v, o, do = (np.asarray(x, np.float64) for x in (q, k, v, o, do))
    s, d = q.shape[1], q.shape[2]
    n_round = s + 2 * -(-s // TILE) + 32
    bound_o, bound_lse = attention_error.error_bound(q, k, v, causal)
    seen = np.tril(np.ones((s, s), bool)) if causal else np.ones((s, s), bool)
    x = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.where(seen, x, -np.inf)
        m = x.max(-1, keepdims=True)
        lse = m + np.log(np.exp(x - m).sum(-1, keepdims=True))
        p = np.exp(x - lse)
        a = np.abs(q) @ np.abs(k).transpose(0, 2, 1) / math.sqrt(d)
        u = EPS32 / 2
        t = np.where(seen, ((d + 2) * a + np.abs(x - lse) + 4) * u + bound_lse[..., None], 0)
        dp = do @ v.transpose(0, 2, 1)
        e_dp = (d + 1) * u * np.abs(do) @ np.abs(v).transpose(0, 2, 1)
        big_d = (do * o).sum(-1, keepdims=True)
        e_d = ((d + 1) * u * np.abs(do) * np.abs(o) + np.abs(do) * bound_o).sum(-1,
                                                                               keepdims=True)
        ds = p * (dp - big_d)
        e_ds = p * t * np.abs(dp - big_d) + p * (e_dp + e_d + u * (np.abs(dp) + np.abs(big_d)))
        e_ds += u * np.abs(ds)
        scale = 1 / math.sqrt(d)
        n_u = n_round * u
        bq = scale * (e_ds @ np.abs(k) + n_u * np.abs(ds) @ np.abs(k))
        bk = scale * (e_ds.transpose(0, 2, 1) @ np.abs(q)
                      + n_u * np.abs(ds).transpose(0, 2, 1) @ np.abs(q))
        bv = (p * t).transpose(0, 2, 1) @ np.abs(do) + n_u * p.transpose(0, 2, 1) @ np.abs(do)
    return 2 * bq, 2 * bk, 2 * bv


# ------------------------------------------------------------------------------------------
# Exercises 2 to 4
# ------------------------------------------------------------------------------------------


def lane_of(matrix: str, row: int, col: int) -> tuple[int, int, int]:
    """``(lane, register, half)`` holding element ``(row, col)`` of ``matrix`` ("a" 16 x 16,
    "b" 16 x 8, "c" 16 x 8) in an m16n8k16 mma (exercise 2): ``half`` is 0 for the low 16 bits
    of a bf16 pair, 1 for the high; always 0 for C's float registers."""
    shapes = {"a": (16, 16), "b": (16, 8), "c": (16, 8)}
    rows, cols = shapes[check_choice("matrix", matrix, shapes)]
    if not (0 <= row < rows and 0 <= col < cols):
        raise ValueError(f"({row}, {col}) is outside {matrix}'s {rows} x {cols}")
    if matrix == "a":  # registers: rows g, g + 8, g, g + 8; columns 2t.., 2t.., 2t+8.., 2t+8..
        return 4 * (row % 8) + (col % 8) // 2, (row // 8) + 2 * (col // 8), col % 2
    if matrix == "b":  # registers: rows 2t, 2t + 8 (and the next), column g
        return 4 * col + (row % 8) // 2, row // 8, row % 2
    return 4 * (row % 8) + col // 2, 2 * (row // 8) + col % 2, 0


def bf16_matmul_crossing(gpu: str) -> int:
    """The smallest side ``n`` at which a square bf16 product's intensity, at most
    ``2 n^3 / (2 * 3 n^2) = n / 3`` flop/byte (each of A, B, C crossing the bus once, 2 bytes
    a value), reaches ``gpu``'s bf16 ridge point (exercise 3)."""
    g = spec(gpu)
    return math.ceil(3 * ridge_point(g.bf16_tflops * 1e12, g.memory_bandwidth_gbs * 1e9))


def bytes_saved(heads: int, s: int, d: int) -> tuple[int, float]:
    """The device-memory bytes v2 saves over v1 (not causal), and v1's bytes over v2's
    (exercise 4), from :func:`gpudl.kernels.attention.traffic`."""
    v1 = sum(attention_kernels.traffic("v1_three_kernels", heads, s, d).values())
    v2 = sum(attention_kernels.traffic("v2_fused", heads, s, d).values())
    return v1 - v2, v1 / v2

