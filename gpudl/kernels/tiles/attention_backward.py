"""FlashAttention-2's backward pass in Triton: the scores recomputed tile by tile from the forward's
log-sum-exp, one kernel for ``dK`` and ``dV``, one for ``dQ``.

Book section: Chapter 10, "What it leaves to the author".

What changes against the Numba twin, the backward kernels of Chapter 8's exercise
(``gpudl.solutions.ch08``): the same algorithm (Dao 2023), with ``P = exp(S / sqrt(d) - lse)``,
``dV = P^T dO``, ``dP = dO V^T``, ``dS = P * (dP - D)``, ``D_i = dO_i . O_i``, ``dQ = dS K /
sqrt(d)`` and ``dK = dS^T Q / sqrt(d)``, each product a ``tl.dot`` of tiles. A program of
``flash_backward_dkdv`` owns ``BLOCK_N`` keys and walks over the queries that see them,
one of ``flash_backward_dq`` owns ``BLOCK_M`` queries and walks over the keys they see:
every output has one writer, no atomics, and no ``s x s`` matrix is stored. Float32 with IEEE
products, as :data:`gpudl.kernels.attention`'s ``v3_triton_flash``, the forward pass it
differentiates.
"""

from __future__ import annotations

import math
from typing import Any

from gpudl import backend, registry
from gpudl.checks import check_bool, check_float32_array, check_host_or_device
from gpudl.kernels.arrays import poisoned, returned, to_device, zeros
from gpudl.kernels.tiles.attention import head_block
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["CONFIG", "flash_backward_delta", "flash_backward_dkdv", "flash_backward_dq",
           "flash_backward"]

_GPU = {"BLOCK_M": 32, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2}  # 4 warps spill
#: The tile sizes, warps and stages launched (on the simulator Chapter 8's 16 x 16).
CONFIG = backend.pick(gpu=_GPU, sim={"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4})
_BUILDS = [_GPU | {"D": 64, "HEAD": 64, "CAUSAL": False},
           _GPU | {"D": 64, "HEAD": 64, "CAUSAL": True}]
_F = "*fp32:16"


@triton.jit
def _rows(x, head, rows, dims, s, D: tl.constexpr):
    """Rows ``rows`` of one head's ``(s, D)`` block of ``x`` (at offset ``head``), columns
    ``dims``; 0 outside it."""
    inside = (rows[:, None] < s) & (dims[None, :] < D)
    return tl.load(x + head + rows[:, None] * D + dims[None, :], mask=inside, other=0.0)


# flash_backward_delta: D_i = dO_i . O_i, one program per BLOCK_M rows of one head.
@registry.triton_kernel("attention_v3_triton_flash_delta", f"({_F}, {_F}, {_F}, i32:16)",
                        configs=[{"D": 64, "HEAD": 64, "BLOCK_M": 32, "num_warps": 4}])
@triton.jit
def flash_backward_delta(o, do, delta, s, D: tl.constexpr, HEAD: tl.constexpr,
                         BLOCK_M: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD)
    head = tl.program_id(1).to(tl.int64) * s
    total = tl.sum(_rows(o, head * D, rows, dims, s, D) * _rows(do, head * D, rows, dims, s, D),
                   axis=1)
    tl.store(delta + head + rows, total, mask=rows < s)


# flash_backward_dkdv: program (b, z) owns keys b * BLOCK_N ... of head z and walks over the
# blocks of queries that see them (causal: from its own block on), recomputing P^T.
@registry.triton_kernel("attention_v3_triton_flash_dkdv",
                        f"({_F}, {_F}, {_F}, {_F}, {_F}, {_F}, {_F}, {_F}, i32:16, fp32)",
                        configs=_BUILDS)
@triton.jit
def flash_backward_dkdv(q, k, v, do, lse, delta, dk, dv, s, scale, D: tl.constexpr,
                        HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        CAUSAL: tl.constexpr):
    start_n = tl.program_id(0) * BLOCK_N
    rows_of = tl.program_id(1).to(tl.int64) * s
    head = rows_of * D
    cols = start_n + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, HEAD)
    k_t, v_t = _rows(k, head, cols, dims, s, D), _rows(v, head, cols, dims, s, D)
    dk_acc = tl.zeros([BLOCK_N, HEAD], dtype=tl.float32)
    dv_acc = tl.zeros([BLOCK_N, HEAD], dtype=tl.float32)
    first = (start_n // BLOCK_M) * BLOCK_M if CAUSAL else 0
    for start_m in range(first, s, BLOCK_M):
        rows = start_m + tl.arange(0, BLOCK_M)
        q_t, do_t = _rows(q, head, rows, dims, s, D), _rows(do, head, rows, dims, s, D)
        lse_t = tl.load(lse + rows_of + rows, mask=rows < s, other=0.0)
        delta_t = tl.load(delta + rows_of + rows, mask=rows < s, other=0.0)
        seen = (cols[:, None] < s) & (rows[None, :] < s)
        if CAUSAL:
            seen = seen & (cols[:, None] <= rows[None, :])
        x = tl.dot(k_t, tl.trans(q_t), input_precision="ieee") * scale
        p = tl.where(seen, tl.exp(x - lse_t[None, :]), 0.0)  # P^T: keys x queries
        dv_acc += tl.dot(p, do_t, input_precision="ieee")
        dp = tl.dot(v_t, tl.trans(do_t), input_precision="ieee")
        dk_acc += tl.dot(p * (dp - delta_t[None, :]), q_t, input_precision="ieee")
    keys_in = (cols[:, None] < s) & (dims[None, :] < D)
    tl.store(dk + head + cols[:, None] * D + dims[None, :], dk_acc * scale, mask=keys_in)
    tl.store(dv + head + cols[:, None] * D + dims[None, :], dv_acc, mask=keys_in)


# flash_backward_dq: program (b, z) owns queries b * BLOCK_M ... of head z and walks over the
# keys they see, recomputing P.
@registry.triton_kernel("attention_v3_triton_flash_dq",
                        f"({_F}, {_F}, {_F}, {_F}, {_F}, {_F}, {_F}, i32:16, fp32)",
                        configs=_BUILDS)
@triton.jit
def flash_backward_dq(q, k, v, do, lse, delta, dq, s, scale, D: tl.constexpr,
                      HEAD: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                      CAUSAL: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    rows_of = tl.program_id(1).to(tl.int64) * s
    head = rows_of * D
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD)
    q_t, do_t = _rows(q, head, rows, dims, s, D), _rows(do, head, rows, dims, s, D)
    lse_t = tl.load(lse + rows_of + rows, mask=rows < s, other=0.0)
    delta_t = tl.load(delta + rows_of + rows, mask=rows < s, other=0.0)
    dq_acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    end = tl.minimum(start_m + BLOCK_M, s) if CAUSAL else s
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k_t, v_t = _rows(k, head, cols, dims, s, D), _rows(v, head, cols, dims, s, D)
        seen = (rows[:, None] < s) & (cols[None, :] < s)
        if CAUSAL:
            seen = seen & (cols[None, :] <= rows[:, None])
        x = tl.dot(q_t, tl.trans(k_t), input_precision="ieee") * scale
        p = tl.where(seen, tl.exp(x - lse_t[:, None]), 0.0)
        dp = tl.dot(do_t, tl.trans(v_t), input_precision="ieee")
        dq_acc += tl.dot(p * (dp - delta_t[:, None]), k_t, input_precision="ieee")
    tl.store(dq + head + rows[:, None] * D + dims[None, :], dq_acc * scale,
             mask=(rows[:, None] < s) & (dims[None, :] < D))


def flash_backward(q: Any, k: Any, v: Any, o: Any, do: Any, lse: Any,
                   causal: bool = False) -> tuple[Any, Any, Any]:
    """``(dq, dk, dv)`` of attention for float32 ``(heads, s, d)`` arrays, host (NumPy out) or
    device (device arrays out), from the forward's ``o`` and ``lse`` (``(heads, s)``,
    :func:`gpudl.kernels.attention.forward`) and the gradient ``do`` of the loss with respect
    to ``o``: three Triton launches (``D``, then ``dK`` and ``dV``, then ``dQ``)."""
    check_bool("causal", causal)
    arrays = {"q": q, "k": k, "v": v, "o": o, "do": do, "lse": lse}
    for name, x in arrays.items():
        check_float32_array(name, x, 2 if name == "lse" else 3)
        ndim = 2 if name == "lse" else 3
        if x.shape != q.shape[:ndim]:
            raise ValueError(f"{name} must have shape {q.shape[:ndim]}, got {x.shape}")
    on_device = check_host_or_device(arrays)
    heads, s, d = q.shape
    if not 1 <= d <= 128:
        raise ValueError(f"the head size d = q.shape[2] must be from 1 to 128, got {d}")
    if heads * s == 0:
        return tuple(zeros(q.shape, on_device) for _ in range(3))
    q, k, v, o, do, lse = (to_device(x) for x in arrays.values())
    delta, dq, dk, dv = poisoned((heads, s)), *(poisoned(q.shape) for _ in range(3))
    shape = {"D": d, "HEAD": head_block(d)}
    launch(flash_backward_delta, (triton.cdiv(s, CONFIG["BLOCK_M"]), heads), o, do, delta, s,
           BLOCK_M=CONFIG["BLOCK_M"], num_warps=CONFIG["num_warps"], **shape)
    meta = shape | CONFIG | {"CAUSAL": bool(causal)}
    scale = 1 / math.sqrt(d)
    launch(flash_backward_dkdv, (triton.cdiv(s, CONFIG["BLOCK_N"]), heads), q, k, v, do, lse,
           delta, dk, dv, s, scale, **meta)
    launch(flash_backward_dq, (triton.cdiv(s, CONFIG["BLOCK_M"]), heads), q, k, v, do, lse,
           delta, dq, s, scale, **meta)
    return tuple(returned(x, on_device) for x in (dq, dk, dv))
