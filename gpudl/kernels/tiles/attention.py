"""FlashAttention-2's forward pass in Triton: a block of queries per program, the keys and values
a tile at a time, online softmax in base 2.

Book section: Chapter 10, "What it leaves to the author".

What changes against the Numba twin, ``attention_v2_fused`` (:mod:`gpudl.kernels.attention`):
the same online softmax (Dao 2023's FlashAttention-2 order: the output is divided by the sum
once, at the end), on tiles that ``tl.dot`` multiplies: ``BLOCK_M`` queries per program,
``BLOCK_N`` keys per step. The scores are scaled by ``log2(e) / sqrt(d)`` once, so that every
exponential is an ``exp2`` (one ``ex2.approx`` instruction). A causal program walks the keys
before its diagonal without any mask, then the one or two tiles that cross it with the mask;
there a value a query does not see is zeroed before the product (``0 * NaN`` would otherwise
make a NaN value reach the earlier queries of the tile), and a NaN a query does see is put
back by a product of the mask with the NaN positions. Nothing ``s x s`` is written.

One kernel serves two variants: ``attention_v3_triton_flash`` (float32, IEEE products, the
family's bound) and ``attention_v4_triton_flash_float16`` (float16 ``q``, ``k``, ``v`` and
``o``, float32 ``lse`` and accumulation; the probabilities are rounded to float16 before the
second product, as FlashAttention does: tensor cores on a GPU).
"""

from __future__ import annotations

import math
from typing import Any

from gpudl import backend, registry
from gpudl.checks import check_int
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["CONFIGS", "LOG2E", "head_block", "flash_forward", "launch_forward"]

#: The base-2 logarithm of e, by which (and by 1 / sqrt(d)) the scores are scaled so that
#: exp2 computes exp.
LOG2E = 1.0 / math.log(2.0)
# On a GPU: 64 queries x 32 keys with IEEE float32 products (8 warps: with 4 the registers
# spill), 128 x 64 in float16 (Triton's FlashAttention tutorial at d = 64), 128 x 32 with 8
# warps when causal (the diagonal's mask and NaN product spill at 128 x 64 on an A100); on the
# simulator Chapter 8's 16 x 16, so that the tiles the bound counts are the tiles run.
_GPU32 = {"BLOCK_M": 64, "BLOCK_N": 32, "num_warps": 8, "num_stages": 2}
_GPU16 = {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
_GPU16_CAUSAL = {"BLOCK_M": 128, "BLOCK_N": 32, "num_warps": 8, "num_stages": 3}
_SIM = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4}
#: (precision, causal) -> the tile sizes, warps and stages launched.
CONFIGS = {("float32", False): backend.pick(gpu=_GPU32, sim=_SIM),
           ("float32", True): backend.pick(gpu=_GPU32, sim=_SIM),
           ("float16", False): backend.pick(gpu=_GPU16, sim=_SIM),
           ("float16", True): backend.pick(gpu=_GPU16_CAUSAL, sim=_SIM)}
_SIGNATURE = "(*{0}:16, *{0}:16, *{0}:16, *{0}:16, *fp32:16, i32:16, fp32)"


def head_block(d: int) -> int:
    """The width of the tiles' head dimension: ``d`` rounded up to a power of two, at least 16
    (``tl.dot`` needs 16); the columns past ``d`` are masked."""
    return max(16, 1 << (check_int("d", d, 1) - 1).bit_length())


@triton.jit
def _attend(acc, m_i, l_i, q_t, k, v, head, rows, dims, lo, hi, s, scale_log2,
            D: tl.constexpr, BLOCK_N: tl.constexpr, DIAGONAL: tl.constexpr):
    """The keys ``lo`` to ``hi`` of one head, BLOCK_N at a time: scores, the online softmax
    step, and the weighted values added to ``acc``; masked where the tile crosses the
    diagonal (``DIAGONAL``) and past the sequence."""
    dim_ok = dims < D
    for start in range(lo, hi, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_ok = cols < s
        k_t = tl.load(k + head + cols[None, :] * D + dims[:, None],
                      mask=dim_ok[:, None] & col_ok[None, :], other=0.0)
        v_t = tl.load(v + head + cols[:, None] * D + dims[None, :],
                      mask=col_ok[:, None] & dim_ok[None, :], other=0.0)
        seen = col_ok[None, :] & (rows[:, None] >= 0)
        if DIAGONAL:
            seen = seen & (cols[None, :] <= rows[:, None])
        x = tl.where(seen, tl.dot(q_t, k_t, input_precision="ieee") * scale_log2,
                     float("-inf"))
        m_new = tl.maximum(m_i, tl.max(x, axis=1))
        alpha = tl.math.exp2(m_i - m_new)
        p = tl.math.exp2(x - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        if DIAGONAL:  # a NaN value reaches only the queries that see its key
            nan_v = v_t != v_t
            reached = tl.dot(seen.to(v_t.dtype), nan_v.to(v_t.dtype),
                             input_precision="ieee") > 0
            v_t = tl.where(nan_v, 0.0, v_t)
        acc = acc * alpha[:, None] + tl.dot(p.to(v_t.dtype), v_t, input_precision="ieee")
        if DIAGONAL:
            acc = tl.where(reached, float("nan"), acc)
        m_i = m_new
    return acc, m_i, l_i


# flash_forward: program (b, z) owns queries b * BLOCK_M ... of head z. It keeps each row's
# running maximum m (base 2), sum l and unnormalised output acc in registers while _attend
# walks the keys, then writes o = acc / l and lse = ln 2 * (m + log2 l).
@registry.triton_kernel("attention_v4_triton_flash_float16", _SIGNATURE.format("fp16"),
                        configs=[_GPU16 | {"D": 64, "HEAD": 64, "CAUSAL": False},
                                 _GPU16_CAUSAL | {"D": 64, "HEAD": 64, "CAUSAL": True}],
                        precision="float16", reference="gpudl.kernels.attention.reference")
@registry.triton_kernel("attention_v3_triton_flash", _SIGNATURE.format("fp32"),
                        configs=[_GPU32 | {"D": 64, "HEAD": 64, "CAUSAL": False},
                                 _GPU32 | {"D": 64, "HEAD": 64, "CAUSAL": True}],
                        reference="gpudl.kernels.attention.reference")
@triton.jit
def flash_forward(q, k, v, o, lse, s, scale_log2, D: tl.constexpr, HEAD: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    start_m = tl.program_id(0) * BLOCK_M
    head = tl.program_id(1).to(tl.int64) * s * D
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, HEAD)
    inside = (rows[:, None] < s) & (dims[None, :] < D)
    q_t = tl.load(q + head + rows[:, None] * D + dims[None, :], mask=inside, other=0.0)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD], dtype=tl.float32)
    if CAUSAL:  # the keys before the diagonal, unmasked, then the diagonal's
        acc, m_i, l_i = _attend(acc, m_i, l_i, q_t, k, v, head, rows, dims, 0, start_m, s,
                                scale_log2, D, BLOCK_N, False)
        acc, m_i, l_i = _attend(acc, m_i, l_i, q_t, k, v, head, rows, dims, start_m,
                                tl.minimum(start_m + BLOCK_M, s), s, scale_log2, D, BLOCK_N,
                                True)
    else:
        acc, m_i, l_i = _attend(acc, m_i, l_i, q_t, k, v, head, rows, dims, 0, s, s,
                                scale_log2, D, BLOCK_N, False)
    out = tl.div_rn(acc, tl.broadcast_to(l_i[:, None], (BLOCK_M, HEAD)))
    tl.store(o + head + rows[:, None] * D + dims[None, :], out.to(o.dtype.element_ty),
             mask=inside)
    tl.store(lse + tl.program_id(1).to(tl.int64) * s + rows,
             (m_i + tl.log2(l_i)) * 0.6931471805599453, mask=rows < s)  # ln 2


def launch_forward(q: Any, k: Any, v: Any, o: Any, lse: Any, causal: bool,
                   precision: str) -> None:
    """``flash_forward`` on C-contiguous device arrays ``(heads, s, d)`` of ``precision``
    (``lse`` float32 ``(heads, s)``), ``s, d >= 1``: one program per ``BLOCK_M`` queries of
    each head, with ``CONFIGS[(precision, causal)]``."""
    heads, s, d = q.shape
    config = CONFIGS[(precision, bool(causal))]
    launch(flash_forward, (triton.cdiv(s, config["BLOCK_M"]), heads), q, k, v, o, lse, s,
           LOG2E / math.sqrt(d), D=d, HEAD=head_block(d), CAUSAL=bool(causal), **config)
