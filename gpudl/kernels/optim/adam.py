"""Adam's step as kernels, four ways: unfused, fused, staged through shared memory, and
multi-tensor.

Book section: *Chapter 4, "Four ways to run Adam"* (and *"Does shared memory help Adam?"*,
claim C6, for ``v3_shared``).

Every kernel updates its arrays in place, element by element, as ``torch.optim`` does, and
follows the order of operations of torch's single-tensor code path (``foreach=False``), so
that NaN and infinity propagate as they do in torch: the first moment is updated with torch's
``lerp`` formula, the second moment as ``v * beta2 + ((1 - beta2) * g) * g`` and the parameter
as ``p + (-step_size * m) / denom``. All arithmetic is float32 on float32 state.

The variants (:data:`VARIANTS`) compute the same thing and differ in how many times the
update crosses the memory bus:

* ``v1_unfused``: one kernel per elementwise operation, as an eager framework runs it;
* ``v2_fused``: one kernel, one pass: 28 bytes per parameter;
* ``v3_shared``: ``v2_fused`` with the four arrays staged through shared memory, as the source
  articles suggest; the same 28 bytes of device memory, plus the shared traffic;
* ``v4_multi_tensor``: ``v2_fused`` in a grid-stride loop over a grid sized to the GPU, so that one
  launch covers any number of elements: :mod:`gpudl.optim` keeps all the tensors of a
  parameter group in flat buffers and updates them with one launch per step;
* ``v5_triton_multi_tensor``: ``v4_multi_tensor``'s arithmetic in Triton, one program per block
  of the flat buffers (:mod:`gpudl.kernels.tiles.adam`; Chapter 10, "What it leaves to the author").
"""

from __future__ import annotations

import math
from collections.abc import Callable

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32

from gpudl import registry
from gpudl.checks import check_float32_array
from gpudl.kernels.arrays import Array, launch_in_place
from gpudl.kernels.grid import blocks_to_cover, grid_stride_blocks
from gpudl.kernels.optim.hyper import AdamScalars, adam_scalars
from gpudl.kernels.optim.traffic import THREADS, launch
from gpudl.kernels.tiles import adam as tiled

__all__ = [
    "BYTES_PER_PARAM", "DEFAULT_VARIANT", "VARIANTS",
    "adam_element", "adam_step", "launch_v2_fused", "launch_v3_shared", "launch_v4_multi_tensor",
    "launch_v5_triton_multi_tensor",
    "v1_unfused", "v2_fused", "v3_shared", "v4_multi_tensor",
]

#: Device-memory bytes per parameter of one fp32 Adam step, which reads p, g, m and v and
#: writes p, m and v.
BYTES_PER_PARAM = 7 * 4


@cuda.jit(device=True, inline=True)
def _lerp(a, b, w):
    """torch's lerp, ``a + w (b - a)``, written so that it is exact at ``w = 0`` and 1."""
    if abs(w) < 0.5:
        return a + w * (b - a)
    return b - (b - a) * (float32(1) - w)


@cuda.jit(device=True, inline=True)
def adam_element(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt,
                  eps):
    """One element of Adam's (or AdamW's) step: the new ``(p, m, v)``, in torch's order."""
    if maximize:
        g = -g
    if l2 != 0:
        g = g + l2 * p  # Adam's L2 penalty folded into the gradient
    p = p * decay  # AdamW's decoupled weight decay (decay = 1 for Adam: exact)
    m = _lerp(m, g, w1)
    v = v * beta2 + w2 * g * g
    denom = float32(math.sqrt(v)) / bc2_sqrt + eps
    return p + neg_step_size * m / denom, m, v


# v1_unfused: Adam as an eager framework runs it: each operation of torch's single-tensor
# code is a kernel of its own, which reads its inputs from device memory and writes its
# output back. Intermediate results (the gradient with the L2 term, the denominator) are
# arrays. Without weight decay that is 7 launches and 72 bytes per parameter instead of 28:
# lerp m (read m, g; write m: 12), v *= beta2 (8), v += w2 g g (12), denom = sqrt(v) (8),
# denom /= bc2 (8), denom += eps (8), p += -s m / denom (16). Every launch also pays its
# fixed cost, which dominates for small tensors.


@registry.kernel("adam_v1_neg_into", "void(float32[::1], float32[::1])")
@cuda.jit
def _neg_into(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = -x[i]


@registry.kernel("adam_v1_add_scaled_into",
                 "void(float32[::1], float32[::1], float32, float32[::1])")
@cuda.jit
def _add_scaled_into(x, y, a, out):  # out = x + a y  (torch: grad.add(param, alpha=wd))
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + a * y[i]


@registry.kernel("adam_v1_scale", "void(float32[::1], float32)")
@cuda.jit
def _scale(x, a):  # x *= a  (torch: mul_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * a


@registry.kernel("adam_v1_lerp", "void(float32[::1], float32[::1], float32)")
@cuda.jit
def _lerp_(x, y, w):  # x = lerp(x, y, w)  (torch: lerp_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = _lerp(x[i], y[i], w)


@registry.kernel("adam_v1_add_square", "void(float32[::1], float32[::1], float32)")
@cuda.jit
def _add_square(x, y, a):  # x += a y y  (torch: addcmul_(y, y, value=a))
    i = cuda.grid(1)
    if i < x.size:
        yi = y[i]
        x[i] = x[i] + a * yi * yi


@registry.kernel("adam_v1_sqrt_into", "void(float32[::1], float32[::1])")
@cuda.jit
def _sqrt_into(x, out):  # out = sqrt(x)  (torch: sqrt, a new tensor)
    i = cuda.grid(1)
    if i < x.size:
        out[i] = float32(math.sqrt(x[i]))


@registry.kernel("adam_v1_div_scalar", "void(float32[::1], float32)")
@cuda.jit
def _div_scalar(x, a):  # x /= a  (torch: div)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] / a


@registry.kernel("adam_v1_add_scalar", "void(float32[::1], float32)")
@cuda.jit
def _add_scalar(x, a):  # x += a  (torch: add_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] + a


@registry.kernel("adam_v1_addcdiv", "void(float32[::1], float32[::1], float32[::1], float32)")
@cuda.jit
def _addcdiv(x, t1, t2, a):  # x += a t1 / t2  (torch: addcdiv_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] + a * t1[i] / t2[i]


@registry.variant("adam", "v1_unfused", bytes_per_element=72, kernels=(
    "adam_v1_neg_into", "adam_v1_add_scaled_into", "adam_v1_scale", "adam_v1_lerp",
    "adam_v1_add_square", "adam_v1_sqrt_into", "adam_v1_div_scalar", "adam_v1_add_scalar",
    "adam_v1_addcdiv"))
def v1_unfused(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """Adam unfused: the launches of torch's single-tensor code, one per operation."""
    blocks = blocks_to_cover(p.size, THREADS)
    if k.maximize or k.l2 != 0:  # a new gradient array, as torch makes one
        g_eff = _scratch("grad", p.size)
        if k.maximize:
            launch(_neg_into, blocks, g, g_eff)
            g = g_eff
        if k.l2 != 0:
            launch(_add_scaled_into, blocks, g, p, k.l2, g_eff)
        g = g_eff
    if k.decay != 1:
        launch(_scale, blocks, p, k.decay)
    launch(_lerp_, blocks, m, g, k.w1)
    launch(_scale, blocks, v, k.beta2)
    launch(_add_square, blocks, v, g, k.w2)
    denom = _scratch("denom", p.size)
    launch(_sqrt_into, blocks, v, denom)
    launch(_div_scalar, blocks, denom, k.bc2_sqrt)
    launch(_add_scalar, blocks, denom, k.eps)
    launch(_addcdiv, blocks, p, m, denom, k.neg_step_size)


# v2_fused: one kernel, one thread per element: read p, g, m, v once, compute in registers,
# write p, m, v once. 28 bytes per parameter, the least a step can move with float32 state,
# and one launch per tensor. Adam is memory-bound (about 12 flops for 28 bytes), so its time
# should approach the time a copy of the same bytes takes.
# (threads_per_block: traffic.THREADS on a GPU, 256; the simulator launches 32)
@registry.kernel("adam_v2_fused",
                 "void(float32[::1], float32[::1], float32[::1], float32[::1], boolean, float32, "
                 "float32, float32, float32, float32, float32, float32, float32)",
                 threads_per_block=256)
@cuda.jit
def v2_fused(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt, eps):
    i = cuda.grid(1)
    if i < p.size:
        p[i], m[i], v[i] = adam_element(p[i], g[i], m[i], v[i], maximize, l2, decay, w1,
                                         beta2, w2, neg_step_size, bc2_sqrt, eps)


# v3_shared: what the source articles suggest: the block first copies its slice of p, g, m
# and v into shared memory, waits, computes from shared memory into shared memory, waits, and
# copies the results back. It cannot be faster than v2: every element is still read from and
# written to device memory once (the state must be there when the next step begins, and the
# kernel ends long before), no thread uses a value another thread loaded, and the staging adds
# 14 shared-memory accesses (56 bytes) and two barriers per element.
@registry.kernel("adam_v3_shared",
                 "void(float32[::1], float32[::1], float32[::1], float32[::1], boolean, float32, "
                 "float32, float32, float32, float32, float32, float32, float32)",
                 threads_per_block=256)
@cuda.jit
def v3_shared(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt, eps):
    sp = cuda.shared.array(THREADS, float32)
    sg = cuda.shared.array(THREADS, float32)
    sm = cuda.shared.array(THREADS, float32)
    sv = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i = cuda.grid(1)
    if i < p.size:
        sp[t] = p[i]
        sg[t] = g[i]
        sm[t] = m[i]
        sv[t] = v[i]
    cuda.syncthreads()
    if i < p.size:
        sp[t], sm[t], sv[t] = adam_element(sp[t], sg[t], sm[t], sv[t], maximize, l2, decay,
                                            w1, beta2, w2, neg_step_size, bc2_sqrt, eps)
    cuda.syncthreads()
    if i < p.size:
        p[i] = sp[t]
        m[i] = sm[t]
        v[i] = sv[t]


# v4_multi_tensor: v2's arithmetic in a grid-stride loop over a grid of one wave of resident
# blocks (Chapter 1's v2_grid_stride), so one launch updates any number of elements. Given
# flat buffers that hold every tensor of a parameter group back to back (gpudl.optim lays
# them out so), it is one launch per step for the whole model instead of one per tensor: the
# bytes are v2's, and what it saves is the fixed cost of every launch but one, which is what
# dominates for models made of many small tensors.
@registry.kernel("adam_v4_multi_tensor",
                 "void(float32[::1], float32[::1], float32[::1], float32[::1], boolean, float32, "
                 "float32, float32, float32, float32, float32, float32, float32)",
                 threads_per_block=256)
@cuda.jit
def v4_multi_tensor(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt,
                    eps):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i], m[i], v[i] = adam_element(p[i], g[i], m[i], v[i], maximize, l2, decay, w1,
                                         beta2, w2, neg_step_size, bc2_sqrt, eps)


@registry.variant("adam", "v2_fused", bytes_per_element=BYTES_PER_PARAM)
def launch_v2_fused(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v2_fused`` launch, one thread per element."""
    launch(v2_fused, blocks_to_cover(p.size, THREADS), p, g, m, v, *k)


@registry.variant("adam", "v3_shared", bytes_per_element=BYTES_PER_PARAM)
def launch_v3_shared(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v3_shared`` launch, one thread per element."""
    launch(v3_shared, blocks_to_cover(p.size, THREADS), p, g, m, v, *k)


@registry.variant("adam", "v4_multi_tensor", bytes_per_element=BYTES_PER_PARAM)
def launch_v4_multi_tensor(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v4_multi_tensor`` launch over one wave of resident blocks."""
    launch(v4_multi_tensor, grid_stride_blocks(p.size, THREADS), p, g, m, v, *k)


# v5_triton_multi_tensor: v4 in Triton (gpudl.kernels.tiles.adam): one program per block of
# 1,024 elements of the flat buffers, one launch per parameter group and step.
@registry.variant("adam", "v5_triton_multi_tensor", bytes_per_element=BYTES_PER_PARAM,
                  requires="triton")
def launch_v5_triton_multi_tensor(p: Array, g: Array, m: Array, v: Array,
                                  k: AdamScalars) -> None:
    """One Triton launch, one program per block of the arrays."""
    tiled.launch_adam(p, g, m, v, k)


#: Adam variant name -> launcher(p, g, m, v, scalars) on kernel arrays, updating in place.
VARIANTS: dict[str, Callable[[Array, Array, Array, Array, AdamScalars], None]] = (
    registry.variants("adam"))
DEFAULT_VARIANT = "v4_multi_tensor"

_SCRATCH: dict[str, Array] = {}


def _scratch(name: str, n: int) -> Array:
    """A float32 device array of ``n`` elements for an intermediate of ``v1_unfused``, kept
    from one call to the next (as a framework's caching allocator keeps its blocks, so that
    the timing of the unfused step is not that of an allocation)."""
    if name not in _SCRATCH or _SCRATCH[name].size < n:
        _SCRATCH[name] = cuda.device_array(n, dtype=np.float32)
    return _SCRATCH[name][:n]


def adam_step(p: Array, g: Array, m: Array, v: Array, *, step: int, lr: float = 1e-3,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, decoupled: bool = False, maximize: bool = False,
              variant: str = DEFAULT_VARIANT) -> None:
    """Adam's step number ``step`` (AdamW's if ``decoupled``) on float32 1-D arrays of one
    size, in place: ``p``, ``m`` (first moment) and ``v`` (second moment) are updated, ``g``
    is read. NumPy arrays or numba device arrays (not a mix); ``VARIANTS[variant]`` runs it.
    """
    registry.check_variant("adam", variant, VARIANTS)
    k = adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)
    arrays = {"p": p, "g": g, "m": m, "v": v}
    for name, x in arrays.items():
        check_float32_array(name, x, 1)
    launch_in_place(VARIANTS[variant], arrays, ("p", "m", "v"), k)
