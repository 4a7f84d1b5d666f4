"""Split-KV decode attention in Triton (Flash-Decoding): one program per chunk of one head's cache,
then one per head to merge the chunks.

Book section: Chapter 10, "What it leaves to the author".

What changes against the Numba twin, ``decode_v2_split_kv`` (:mod:`gpudl.kernels.decode`): the
same chunks, the same online softmax and the same combine rule, written on blocks of values:
a program holds the query as a block of ``HEAD`` values and each tile of ``BLOCK_N`` keys as a
``BLOCK_N x HEAD`` block, so a score is ``tl.sum(k * q, axis=1)`` (a matrix-vector product:
too thin for ``tl.dot``), where the twin's warp adds its lanes' partial scores through a
shared tile. The running maximum is kept in base 2 (scores scaled by ``log2(e) / sqrt(d)``,
``exp2``), in the partials too, which only this variant's combine kernel reads. Positions at
or past a sequence's length are masked: never read.
"""

from __future__ import annotations

from typing import Any

from gpudl import registry
from gpudl.kernels.tiles.attention import LOG2E, head_block
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["BLOCK_N", "BLOCK_S", "WARPS", "v3_triton_split_kv", "v3_triton_combine_splits",
           "launch_split_kv"]

#: Keys per tile (the twin's, since the bound counts them), chunks per step of the combine
#: kernel, and warps per program.
BLOCK_N, BLOCK_S, WARPS = 32, 32, 4
_F = "*fp32:16"


# v3_triton_split_kv: program (c, h, b) walks keys c * split_size ... of cache head
# h // (heads // kv_heads) of sequence b, up to the chunk's end or the sequence's, a tile of
# BLOCK_N keys at a time, and writes its running maximum (base 2), sum and unnormalised
# output. A chunk that starts at or past the length writes nothing.
@registry.triton_kernel("decode_v3_triton_split_kv",
                        f"({_F}, {_F}, {_F}, *i32:16, {_F}, {_F}, {_F}, i32:16, i32:16, "
                        "i32:16, i32:16, i32:16, fp32)",
                        configs=[{"D": 128, "HEAD": 128, "BLOCK_N": BLOCK_N, "num_warps": WARPS}],
                        reference="gpudl.kernels.decode.reference")
@triton.jit
def v3_triton_split_kv(q, k_cache, v_cache, lengths, part_m, part_l, part_acc, heads,
                       kv_heads, max_len, splits, split_size, scale_log2, D: tl.constexpr,
                       HEAD: tl.constexpr, BLOCK_N: tl.constexpr):
    chunk, h, b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    length = tl.load(lengths + b)
    start = chunk * split_size
    if start < length:
        dims = tl.arange(0, HEAD)
        dim_ok = dims < D
        q_r = tl.load(q + (b * heads + h) * D + dims, mask=dim_ok, other=0.0)
        cache = (b * kv_heads + h // (heads // kv_heads)).to(tl.int64) * max_len * D
        end = tl.minimum(length, start + split_size)
        m = tl.full([], float("-inf"), dtype=tl.float32)
        total = tl.zeros([], dtype=tl.float32)
        acc = tl.zeros([HEAD], dtype=tl.float32)
        for j0 in range(start, end, BLOCK_N):
            keys = j0 + tl.arange(0, BLOCK_N)
            tile = (keys[:, None] < end) & dim_ok[None, :]
            at = cache + keys[:, None] * D + dims[None, :]
            x = tl.sum(tl.load(k_cache + at, mask=tile, other=0.0) * q_r[None, :], axis=1)
            x = tl.where(keys < end, x * scale_log2, float("-inf"))
            m_new = tl.maximum(m, tl.max(x, axis=0))
            alpha = tl.math.exp2(m - m_new)
            w = tl.math.exp2(x - m_new)
            total = total * alpha + tl.sum(w, axis=0)
            values = tl.load(v_cache + at, mask=tile, other=0.0)
            acc = acc * alpha + tl.sum(w[:, None] * values, axis=0)
            m = m_new
        part = (b * heads + h) * splits + chunk
        tl.store(part_m + part, m)
        tl.store(part_l + part, total)
        tl.store(part_acc + part * D + dims, acc, mask=dim_ok)


# v3_triton_combine_splits: program (h, b) merges the chunks that hold keys of sequence b:
# M = max_c m_c, o = sum_c 2^(m_c - M) acc_c / sum_c 2^(m_c - M) l_c, BLOCK_S chunks at a time.
@registry.triton_kernel("decode_v3_triton_combine_splits",
                        f"({_F}, {_F}, {_F}, *i32:16, {_F}, i32:16, i32:16, i32:16)",
                        configs=[{"D": 128, "HEAD": 128, "BLOCK_S": BLOCK_S, "num_warps": WARPS}])
@triton.jit
def v3_triton_combine_splits(part_m, part_l, part_acc, lengths, o, heads, splits, split_size,
                             D: tl.constexpr, HEAD: tl.constexpr, BLOCK_S: tl.constexpr):
    h, b = tl.program_id(0), tl.program_id(1)
    used = tl.cdiv(tl.load(lengths + b), split_size)
    first = (b * heads + h) * splits
    dims = tl.arange(0, HEAD)
    m = tl.full([], float("-inf"), dtype=tl.float32)
    for c0 in range(0, used, BLOCK_S):
        chunks = c0 + tl.arange(0, BLOCK_S)
        m_c = tl.load(part_m + first + chunks, mask=chunks < used, other=float("-inf"))
        m = tl.maximum(m, tl.max(m_c, axis=0))
    total = tl.zeros([], dtype=tl.float32)
    acc = tl.zeros([HEAD], dtype=tl.float32)
    for c0 in range(0, used, BLOCK_S):
        chunks = c0 + tl.arange(0, BLOCK_S)
        inside = chunks < used
        w = tl.where(inside, tl.math.exp2(tl.load(part_m + first + chunks, mask=inside,
                                                  other=0.0) - m), 0.0)
        total += tl.sum(w * tl.load(part_l + first + chunks, mask=inside, other=0.0), axis=0)
        tile = inside[:, None] & (dims[None, :] < D)
        values = tl.load(part_acc + (first + chunks[:, None]) * D + dims[None, :], mask=tile,
                         other=0.0)
        acc += tl.sum(w[:, None] * values, axis=0)
    tl.store(o + (b * heads + h) * D + dims, tl.div_rn(acc, tl.broadcast_to(total, (HEAD,))),
             mask=dims < D)


def launch_split_kv(q: Any, k_cache: Any, v_cache: Any, lengths: Any, o: Any,
                    split_size: int, workspace: tuple[Any, Any, Any]) -> None:
    """Both kernels on device arrays: ``q`` and ``o`` ``(batch, heads, d)``, the caches
    ``(batch, kv_heads, max_len, d)``, int32 ``lengths``, and the partials ``workspace``
    ``(batch, heads, splits)`` twice and ``(batch, heads, splits, d)``."""
    batch, heads, d = q.shape
    kv_heads, max_len = k_cache.shape[1], k_cache.shape[2]
    splits = workspace[0].shape[2]
    shape = {"D": d, "HEAD": head_block(d), "num_warps": WARPS}
    launch(v3_triton_split_kv, (splits, heads, batch), q, k_cache, v_cache, lengths,
           *workspace, heads, kv_heads, max_len, splits, split_size, LOG2E / d ** 0.5,
           BLOCK_N=BLOCK_N, **shape)
    launch(v3_triton_combine_splits, (heads, batch), *workspace, lengths, o, heads, splits,
           split_size, BLOCK_S=BLOCK_S, **shape)
