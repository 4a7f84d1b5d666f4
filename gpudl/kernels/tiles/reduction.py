"""Reductions in Triton: a sum and a row softmax, each reducing a block of values at a time.

Book section: Chapter 10, "Reductions inside a block".

What changes against the Numba twins. The sum (``reduce_v8_triton_block``, twin of
``reduce_v5_warp_shuffle``, :mod:`gpudl.kernels.reduction`): a program adds whole blocks of
``BLOCK`` values into a block of ``BLOCK`` running sums, one per position, in a grid-stride
loop, then reduces that block with ``tl.sum``: the shared-memory tree, the barriers and the
warp shuffles that v3 to v5 write by hand are the compiler's choice now, and so is the order of
the additions inside the block. A second launch of one program sums the programs' partials.

The row softmax (``softmax_v2_triton_online``, twin of ``softmax_v1_three_passes``,
``gpudl.kernels.softmax``): one program per row reads the row once to find both its
maximum and its sum (online softmax: each of the block's positions keeps a running maximum
and a running sum, rescaled by ``exp(m_old - m_new)`` whenever its maximum grows; the block's
positions are merged at the end), then once more to write ``exp(x - max) / sum``: 12 bytes per
element where the three-pass twin moves 16.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend, registry
from gpudl.checks import check_int
from gpudl.kernels.arrays import poisoned
from gpudl.kernels.grid import blocks_to_cover, resident_blocks
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["SUM_BLOCK", "SUM_WARPS", "SOFTMAX_BLOCK", "SOFTMAX_WARPS", "v8_triton_block",
           "v2_triton_online", "sum_passes", "launch_softmax", "sum_programs"]

#: Values per block of the sum, and warps per program (8 values per thread).
SUM_BLOCK, SUM_WARPS = 1024, 4
#: Columns per block of the softmax (fewer on the simulator, so that its tests cross blocks),
#: and warps per program.
SOFTMAX_BLOCK, SOFTMAX_WARPS = backend.pick(gpu=1024, sim=32), 4


# v8_triton_block: program pid adds blocks pid, pid + programs, ... of BLOCK values into a
# block of running sums (one chain of additions per position, its loads 16 bytes wide), then
# tl.sum reduces the block: Triton writes the tree, its shuffles and its barriers.
@registry.triton_kernel("reduce_v8_triton_block", "(*fp32:16, *fp32:16, i32:16, i32)",
                        configs=[{"BLOCK": SUM_BLOCK, "num_warps": SUM_WARPS}],
                        reference="gpudl.kernels.reduction.reference_sum")
@triton.jit
def v8_triton_block(x, partials, n, trips, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for trip in range(trips):
        offsets = (trip * programs + pid) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(x + offsets, mask=offsets < n, other=0.0)
    tl.store(partials + pid, tl.sum(acc, axis=0))


def sum_programs(n: int) -> int:
    """Programs of the sum's first launch over ``n`` values: one per block, at most as many
    as the GPU holds at once (a grid-stride loop covers the rest)."""
    check_int("n", n, 1)
    return blocks_to_cover(n, SUM_BLOCK, maximum=resident_blocks(backend.WARP_SIZE * SUM_WARPS))


def sum_passes(x: Any, out: Any) -> None:
    """The sum of the float32 device vector ``x`` (``x.size >= 1``) into ``out[0]``: one
    launch over ``x`` into one partial per program, then one program over the partials."""
    programs = sum_programs(x.size)
    if programs > 1:
        partials = poisoned(programs)
        launch(v8_triton_block, (programs,), x, partials, x.size,
               triton.cdiv(x.size, programs * SUM_BLOCK), BLOCK=SUM_BLOCK, num_warps=SUM_WARPS)
        x = partials
    launch(v8_triton_block, (1,), x, out, x.size, triton.cdiv(x.size, SUM_BLOCK),
           BLOCK=SUM_BLOCK, num_warps=SUM_WARPS)


# v2_triton_online: one program per row. The first loop keeps, for each position of the
# block, a running maximum m and a running sum of exp(x - m), rescaling the sum when m grows
# (a NaN is never the maximum, but it makes the sum NaN); the positions are then merged into
# the row's maximum and sum. The second loop writes the probabilities. A position that has
# seen only -inf (masked columns) keeps m = -inf and shifts by 0, so exp gives 0, not NaN.
@registry.triton_kernel("softmax_v2_triton_online", "(*fp32:16, *fp32:16, i32:16)",
                        configs=[{"BLOCK": 1024, "num_warps": SOFTMAX_WARPS}],
                        reference="gpudl.kernels.softmax.reference")
@triton.jit
def v2_triton_online(x, out, cols, BLOCK: tl.constexpr):
    row = x + tl.program_id(0).to(tl.int64) * cols
    m = tl.full([BLOCK], float("-inf"), dtype=tl.float32)
    total = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        v = tl.load(row + offsets, mask=offsets < cols, other=float("-inf"))
        m_new = tl.where(v > m, v, m)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        total = total * tl.exp(m - shift) + tl.exp(v - shift)
        m = m_new
    row_max = tl.max(m, axis=0)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    row_total = tl.sum(total * tl.exp(m - shift), axis=0)
    written = out + tl.program_id(0).to(tl.int64) * cols
    for start in range(0, cols, BLOCK):
        offsets = start + tl.arange(0, BLOCK)
        v = tl.load(row + offsets, mask=offsets < cols)
        tl.store(written + offsets, tl.div_rn(tl.exp(v - shift), row_total),
                 mask=offsets < cols)


def launch_softmax(x: Any, out: Any) -> None:
    """``v2_triton_online`` on float32 device arrays of one shape ``(rows, cols)``, both
    ``>= 1``: one program per row."""
    launch(v2_triton_online, (x.shape[0],), x, out, x.shape[1], BLOCK=SOFTMAX_BLOCK,
           num_warps=SOFTMAX_WARPS)
