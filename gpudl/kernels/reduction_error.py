"""How accurate a float32 sum is: the additions each element goes through in each variant of
:mod:`gpudl.kernels.reduction`, and the error bound they give.

Book section: *Chapter 2, "How accurate is a float32 sum?"*.

Every input element goes through at most ``depth =`` :func:`addition_depth` float32 additions
on its way to the result, each rounding with a relative error of at most ``u = 2**-24``, so the
computed sum differs from the exact one by at most ``depth * u / (1 - depth * u) *
sum(abs(x))`` (Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, section 4.2),
which is below :func:`error_bound`, ``depth * 2**-23 * sum(abs(x))`` (the float32 ``eps``),
while ``depth <= 2**23``: 8 levels per launch for the trees, but n for v1.
"""

from __future__ import annotations

import math

import numpy as np

from gpudl.checks import check_float32_array, check_int
from gpudl.kernels.arrays import EPS32
from gpudl.kernels.grid import blocks_to_cover, grid_stride_blocks
from gpudl.kernels.reduction import ACCUMULATORS, LOADS, LOG2_TPB, TPB, check_variant
from gpudl.kernels.tiles.reduction import SUM_BLOCK, sum_programs

__all__ = ["addition_depth", "error_bound"]


def addition_depth(n: int, variant: str) -> int:
    """The most float32 additions any of ``n`` input elements goes through in ``variant``.

    v1: a chain of n atomics. v2, v3: 8 tree levels per launch. v4, v5: each thread's
    grid-stride chain, 8 levels, then one block's chain over the partials and 8 levels. v6:
    the chain, 8 levels, then one atomic per block. v7: each of a thread's 4 accumulators
    takes at most a quarter of its c elements plus the LOADS - 1 of its tail, 2 levels join
    them, 8 levels in the block, then the last block's chain over the partials and 8 levels.
    v8 (Triton): each position of a program's block of running sums takes one addition per
    trip of its grid-stride loop, then ``tl.sum`` adds the block's ``SUM_BLOCK`` sums in an
    order the compiler picks, counted as a chain of ``SUM_BLOCK - 1``; the program over the
    partials the same again. Never more than n: an addition with only one element below it
    (the rest are padding zeros) is exact.
    """
    check_variant(variant)
    check_int("n", n, 1)
    if variant == "v1_atomic":
        return n
    if variant in ("v2_interleaved", "v3_sequential"):
        launches, size = 1, n
        while size > TPB:
            launches, size = launches + 1, blocks_to_cover(size, TPB)
        return min(n, launches * LOG2_TPB)
    if variant == "v8_triton_block":
        programs = sum_programs(n)
        depth = math.ceil(n / (programs * SUM_BLOCK)) + SUM_BLOCK - 1
        if programs > 1:
            depth += math.ceil(programs / SUM_BLOCK) + SUM_BLOCK - 1
        return min(n, depth)
    blocks = grid_stride_blocks(n, TPB)
    per_thread = math.ceil(n / (blocks * TPB))
    if variant == "v7_last_block":
        chain = math.ceil(per_thread / ACCUMULATORS) + LOADS - 1 + 2
        return min(n, chain + LOG2_TPB + blocks_to_cover(blocks, TPB) + LOG2_TPB)
    depth = per_thread + LOG2_TPB
    if variant == "v6_one_pass_atomic":
        depth += blocks
    elif blocks > 1:
        depth += blocks_to_cover(blocks, TPB) + LOG2_TPB
    return min(n, depth)


def error_bound(x: np.ndarray, variant: str) -> float:
    """How far ``variant``'s float32 sum of the host vector ``x`` may be from the exact sum:
    ``addition_depth(len(x), variant) * eps32 * sum(abs(x))`` (0 for an empty vector)."""
    check_variant(variant)
    check_float32_array("x", x, 1)
    if x.size == 0:
        return 0.0
    return addition_depth(x.size, variant) * EPS32 * math.fsum(np.abs(x.astype(np.float64)))
