"""Adam's step in Triton: one program per block of a flat buffer.

Book section: Chapter 10, "What it leaves to the author".

What changes against the Numba twin, ``adam_v4_multi_tensor`` (:mod:`gpudl.kernels.optim`):
the same arithmetic in the same order (torch's single-tensor code path, so that NaN and
infinity propagate as in torch), on blocks of ``BLOCK`` elements instead of one element per
thread in a grid-stride loop: one program per block of the group's flat buffers
(:mod:`gpudl.optim` keeps every tensor of a parameter group in them), so one launch updates the
whole model, as v4's does. The scalars' branches (``maximize``, the L2 term, the form of
torch's ``lerp``) are taken once per program rather than once per element, the loads and
stores are 16 bytes wide, and the square root and the divisions are the correctly rounded
ones (``tl.sqrt_rn``, ``tl.div_rn``), as Numba's: Triton's plain ``/`` is an approximation.
"""

from __future__ import annotations

from typing import Any

from gpudl import registry
from gpudl.kernels.tiles.runtime import launch, tl, triton

__all__ = ["BLOCK", "WARPS", "v5_triton_multi_tensor", "launch_adam"]

#: Elements per program, and warps per program (8 elements per thread).
BLOCK, WARPS = 1024, 4


# v5_triton_multi_tensor: program pid updates elements pid * BLOCK ... of p, m and v from g:
# 28 bytes per element, as v2 and v4. Offsets are 64-bit: a model's flat buffer may hold more
# than 2**31 elements.
@registry.triton_kernel("adam_v5_triton_multi_tensor",
                        "(*fp32:16, *fp32:16, *fp32:16, *fp32:16, i32, i1, fp32, fp32, fp32, "
                        "fp32, fp32, fp32, fp32, fp32)",
                        configs=[{"BLOCK": BLOCK, "num_warps": WARPS}],
                        reference="gpudl.kernels.optim.reference_adam")
@triton.jit
def v5_triton_multi_tensor(p, g, m, v, n, maximize, l2, decay, w1, beta2, w2, neg_step_size,
                           bc2_sqrt, eps, BLOCK: tl.constexpr):
    offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    param = tl.load(p + offsets, mask=inside)
    grad = tl.load(g + offsets, mask=inside)
    first = tl.load(m + offsets, mask=inside)
    second = tl.load(v + offsets, mask=inside)
    if maximize:
        grad = -grad
    if l2 != 0:
        grad = grad + l2 * param  # Adam's L2 penalty folded into the gradient
    param = param * decay  # AdamW's decoupled weight decay (1 for Adam: exact)
    if (w1 < 0.5) and (w1 > -0.5):  # torch's lerp, exact at w1 = 0 and 1
        first = first + w1 * (grad - first)
    else:
        first = grad - (grad - first) * (1.0 - w1)
    second = second * beta2 + w2 * grad * grad
    denom = tl.div_rn(tl.sqrt_rn(second), bc2_sqrt) + eps
    param = param + tl.div_rn(neg_step_size * first, denom)
    tl.store(p + offsets, param, mask=inside)
    tl.store(m + offsets, first, mask=inside)
    tl.store(v + offsets, second, mask=inside)


def launch_adam(p: Any, g: Any, m: Any, v: Any, scalars: tuple) -> None:
    """``v5_triton_multi_tensor`` on float32 device vectors of one size (``>= 1``) with the
    step's kernel scalars (:class:`gpudl.kernels.optim.AdamScalars`): one program per
    ``BLOCK`` elements."""
    launch(v5_triton_multi_tensor, (triton.cdiv(p.size, BLOCK),), p, g, m, v, p.size, *scalars,
           BLOCK=BLOCK, num_warps=WARPS)
