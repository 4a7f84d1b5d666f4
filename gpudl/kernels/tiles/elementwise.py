"""Vector add in Triton: one program per block of elements.

Book section: Chapter 10, "A program owns a block of values".

What changes against its Numba twin, ``vector_add_v1_naive`` (:mod:`gpudl.kernels.elementwise`):
a program, not a thread, is the unit of work. Program ``pid`` owns ``BLOCK`` consecutive elements
and handles them as one block of values (``tl.arange``); Triton's compiler decides how the
``num_warps * 32`` threads of the program split them: here 8 consecutive floats per thread,
loaded 16 bytes at a time (two ``ld.global.v4`` per input, since a launch's arrays start on
16-byte boundaries: what Chapter 2's ``vector_add_v4_vector4`` does by hand). The last
program's elements past ``n`` are masked (``mask=``) rather than skipped by a bounds check.
"""

from __future__ import annotations

from typing import Any

from gpudl import registry
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["BLOCK", "WARPS", "v5_triton_block", "launch_vector_add"]

#: Elements per program, and warps per program (8 elements per thread).
BLOCK, WARPS = 1024, 4


# v5_triton_block: vector add v1, one program per BLOCK elements instead of one thread per
# element. The masked loads and store replace the bounds check; Triton spreads the block
# over the program's threads in contiguous runs, so each thread loads 16 bytes at a time.
@registry.triton_kernel("vector_add_v5_triton_block", "(*fp32:16, *fp32:16, *fp32:16, i32:16)",
                        configs=[{"BLOCK": BLOCK, "num_warps": WARPS}],
                        reference="gpudl.kernels.elementwise.reference_vector_add")
@triton.jit
def v5_triton_block(a, b, out, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(a + offsets, mask=inside)
    y = tl.load(b + offsets, mask=inside)
    tl.store(out + offsets, x + y, mask=inside)


def launch_vector_add(a: Any, b: Any, out: Any) -> None:
    """``v5_triton_block`` on float32 device vectors of one size (``out.size >= 1``): one
    program per ``BLOCK`` elements."""
    launch(v5_triton_block, (triton.cdiv(out.size, BLOCK),), a, b, out, out.size, BLOCK=BLOCK,
           num_warps=WARPS)
