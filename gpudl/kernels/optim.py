"""Optimizer steps as kernels: SGD with momentum, Adam and AdamW, unfused to multi-tensor.

Book section: Chapter 4, "Optimizers on the GPU" (the update rules, the four Adam variants, the
bytes each moves, mixed precision) and "Is shared memory the answer?" (claim C6).

Every kernel updates its arrays in place, element by element, as ``torch.optim`` does, and
follows the order of operations of torch's single-tensor code path (``foreach=False``), so
that NaN and infinity propagate as they do in torch: Adam's first moment is updated with
torch's ``lerp`` formula, its second moment as ``v * beta2 + ((1 - beta2) * g) * g`` and the
parameter as ``p + (-step_size * m) / denom``. All arithmetic is float32 on float32 state.

The Adam variants (:data:`VARIANTS`) compute the same thing and differ in how many times the
update crosses the memory bus:

* ``unfused``: one kernel per elementwise operation, as an eager framework runs it;
* ``fused``: one kernel, one pass: 28 bytes per parameter;
* ``shared``: ``fused`` with the four arrays staged through shared memory, as the source
  articles suggest; the same 28 bytes of device memory, plus the shared traffic;
* ``multi_tensor``: ``fused`` in a grid-stride loop over a grid sized to the GPU, so that one
  launch covers any number of elements: :mod:`gpudl.optim` keeps all the tensors of a
  parameter group in flat buffers and updates them with one launch per step.

:func:`adam_step_mixed` is the mixed-precision step: float16 or bfloat16 parameters and
gradients, float32 master weights and moments. :func:`traffic` counts the launches and the
bytes of device and shared memory each step asks for, on the simulator (:mod:`gpudl.trace`).

Accuracy: :func:`reference_adam` and :func:`reference_sgd` are torch's formulas in float64;
:func:`adam_error_bound` and :func:`sgd_error_bound` bound how far a float32 step may be from
them, elementwise, by adding the rounding errors along each result's path (derivation in their
docstrings), barring underflow and overflow.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32, int16, uint16, uint32

from gpudl.checks import check_bool, check_float32_array, check_int, check_real, is_device_array
from gpudl.kernels.arrays import to_device
from gpudl.kernels.elementwise import grid_stride_blocks

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "THREADS", "EPS32", "BYTES_PER_PARAM", "VARIANTS", "DEFAULT_VARIANT", "LOW_DTYPES",
    "AdamScalars", "SgdScalars", "Traffic",
    "check_adam_hyper", "check_sgd_hyper", "adam_scalars", "sgd_scalars",
    "reference_adam", "adam_error_bound", "reference_sgd", "sgd_error_bound",
    "v1_unfused", "v2_fused", "v3_shared", "v4_multi_tensor", "adam_mixed", "sgd_kernel",
    "sgd_momentum_kernel",
    "launch_fused", "launch_shared", "launch_multi_tensor", "launch_mixed", "launch_sgd",
    "adam_step", "adam_step_mixed", "sgd_step", "traffic",
]

#: Threads per block; one warp on the simulator, which runs each thread as a Python thread.
THREADS = backend.pick(gpu=256, sim=32)
EPS32 = float(np.finfo(np.float32).eps)  # 2**-23
#: Device-memory bytes per parameter of one fp32 Adam step, which reads p, g, m and v and
#: writes p, m and v.
BYTES_PER_PARAM = 7 * 4
#: NumPy dtypes of low-precision parameters and gradients, float16, or bfloat16 seen through
#: its bit pattern as int16 (NumPy has no bfloat16; ``tensor.view(torch.int16)``).
LOW_DTYPES = (np.dtype(np.float16), np.dtype(np.int16))

# ------------------------------------------------------------------------------------------
# Hyperparameters: torch's checks, and the float32 scalars the kernels receive
# ------------------------------------------------------------------------------------------


def check_adam_hyper(lr: float, betas: tuple[float, float], eps: float,
                     weight_decay: float) -> tuple[float, tuple[float, float], float, float]:
    """``(lr, betas, eps, weight_decay)`` as floats, checked as ``torch.optim.Adam`` checks
    them (same messages, with the rule added): ``lr``, ``eps`` and ``weight_decay`` >= 0,
    each beta in [0, 1). ``TypeError`` for what is not a real number or a pair."""
    lr, eps, weight_decay = (check_real(n, x) for n, x in (("lr", lr), ("eps", eps),
                                                       ("weight_decay", weight_decay)))
    if isinstance(betas, str) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    b1, b2 = check_real("betas[0]", betas[0]), check_real("betas[1]", betas[1])
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr} (lr must be >= 0)")
    if not 0.0 <= eps:
        raise ValueError(f"Invalid epsilon value: {eps} (eps must be >= 0)")
    for index, beta in enumerate((b1, b2)):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {index}: {beta} "
                             "(betas must lie in [0, 1))")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (weight_decay must be >= 0)")
    return lr, (b1, b2), eps, weight_decay


def check_sgd_hyper(lr: float, momentum: float, dampening: float, weight_decay: float,
                    nesterov: bool) -> tuple[float, float, float, float, bool]:
    """``(lr, momentum, dampening, weight_decay, nesterov)`` checked as ``torch.optim.SGD``
    checks them: ``lr``, ``momentum`` and ``weight_decay`` >= 0, and Nesterov momentum needs
    a momentum > 0 and no dampening."""
    lr, momentum, dampening, weight_decay = (
        check_real(n, x) for n, x in (("lr", lr), ("momentum", momentum), ("dampening", dampening),
                                 ("weight_decay", weight_decay)))
    nesterov = check_bool("nesterov", nesterov)
    if not 0.0 <= lr:
        raise ValueError(f"Invalid learning rate: {lr} (lr must be >= 0)")
    if not 0.0 <= momentum:
        raise ValueError(f"Invalid momentum value: {momentum} (momentum must be >= 0)")
    if not 0.0 <= weight_decay:
        raise ValueError(f"Invalid weight_decay value: {weight_decay} (weight_decay must be >= 0)")
    if nesterov and (momentum <= 0 or dampening != 0):
        raise ValueError("Nesterov momentum requires a momentum and zero dampening "
                         f"(got momentum={momentum}, dampening={dampening})")
    return lr, momentum, dampening, weight_decay, nesterov


class AdamScalars(NamedTuple):
    """What an Adam kernel receives after its arrays, computed on the host for one step."""

    maximize: bool
    l2: np.float32  # Adam's L2 term: g + l2 * p (0 for AdamW)
    decay: np.float32  # AdamW's decoupled decay: p * (1 - lr * weight_decay) (1 for Adam)
    w1: np.float32  # 1 - beta1, the lerp weight of the first moment
    beta2: np.float32
    w2: np.float32  # 1 - beta2
    neg_step_size: np.float32  # -lr / (1 - beta1**step)
    bc2_sqrt: np.float32  # sqrt(1 - beta2**step)
    eps: np.float32


def adam_scalars(step: int, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                 maximize: bool = False) -> AdamScalars:
    """The kernel scalars of Adam's step number ``step`` (1 for the first), computed in
    float64 from the checked hyperparameters and rounded once to float32, as torch's float
    tensors round the Python floats they are given. ``decoupled`` selects AdamW's weight
    decay."""
    step = check_int("step", step, 1)
    lr, (b1, b2), eps, wd = check_adam_hyper(lr, betas, eps, weight_decay)
    decoupled, maximize = check_bool("decoupled", decoupled), check_bool("maximize", maximize)
    f = np.float32
    return AdamScalars(
        maximize=maximize,
        l2=f(0.0 if decoupled else wd),
        decay=f(1.0 - lr * wd if decoupled else 1.0),
        w1=f(1.0 - b1), beta2=f(b2), w2=f(1.0 - b2),
        neg_step_size=f(-lr / (1.0 - b1**step)),
        bc2_sqrt=f((1.0 - b2**step) ** 0.5),
        eps=f(eps),
    )


class SgdScalars(NamedTuple):
    """What ``sgd_kernel`` or ``sgd_momentum_kernel`` receives after its arrays."""

    maximize: bool
    l2: np.float32  # weight decay: g + l2 * p
    has_momentum: bool
    first: bool  # no momentum buffer yet: it starts as the gradient, as in torch
    momentum: np.float32
    w: np.float32  # 1 - dampening
    nesterov: bool
    neg_lr: np.float32


def sgd_scalars(first: bool, lr: float = 1e-3, momentum: float = 0.0, dampening: float = 0.0,
                weight_decay: float = 0.0, nesterov: bool = False,
                maximize: bool = False) -> SgdScalars:
    """The scalars of one SGD step; ``first`` when the momentum buffer does not exist yet."""
    lr, momentum, dampening, wd, nesterov = check_sgd_hyper(lr, momentum, dampening,
                                                            weight_decay, nesterov)
    f = np.float32
    return SgdScalars(check_bool("maximize", maximize), f(wd), momentum != 0,
                      check_bool("first", first), f(momentum), f(1.0 - dampening), nesterov,
                      f(-lr))


# ------------------------------------------------------------------------------------------
# References in float64 and the error bounds of a float32 step
# ------------------------------------------------------------------------------------------


def _lerp64(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """torch's ``lerp``: exact at both ends, NaN where ``b - a`` is ``inf - inf``."""
    with np.errstate(invalid="ignore", over="ignore"):
        return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1.0 - w)


def _f64(*arrays: Array) -> list[np.ndarray]:
    return [np.array(a, dtype=np.float64) for a in arrays]


def reference_adam(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, step: int,
                   lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                   eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                   maximize: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New ``(p, m, v)`` after Adam's step ``step`` (AdamW's if ``decoupled``), in float64,
    by ``torch.optim.Adam``'s single-tensor formulas. The inputs are not modified."""
    step = check_int("step", step, 1)
    lr, (b1, b2), eps, wd = check_adam_hyper(lr, betas, eps, weight_decay)
    p, g, m, v = _f64(p, g, m, v)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if maximize:
            g = -g
        if wd != 0 and not decoupled:
            g = g + wd * p
        if wd != 0 and decoupled:
            p = p * (1.0 - lr * wd)
        m = _lerp64(m, g, 1.0 - b1)
        v = v * b2 + (1.0 - b2) * g * g
        denom = np.sqrt(v) / (1.0 - b2**step) ** 0.5 + eps
        p = p + (-lr / (1.0 - b1**step)) * m / denom
    return p, m, v


def adam_error_bound(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, step: int,
                     lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                     eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                     maximize: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elementwise bounds on ``|x - x_ref|`` for the float32 ``(p, m, v)`` of one Adam step
    from these float32 inputs, ``x_ref`` being :func:`reference_adam`'s.

    Each float32 operation, and each float64 scalar rounded to float32, errs by at most
    ``u = eps32 / 2`` relative to its result. Along the paths, with ``G = |g| + l2 |p|``:
    the gradient term errs by at most ``3u G``; the lerp that updates ``m`` by
    ``7u (|m| + G)``; ``v``, a sum of non-negative terms, by ``10u V`` with ``V = beta2 v +
    (1 - beta2) G**2``, which is ``10u R`` of ``v`` itself with ``R = V / v_new`` (``R`` is
    about 1, but large when the gradient term nearly cancels, ``g`` against ``l2 p``, and
    ``beta2 v`` is small); the denominator, a square root of it, by ``(4 + 5 R) u`` of
    itself; the update ``s m / denom`` (``s`` the step size) by ``(14 + 5 R) u U`` with
    ``U = s (|m| + G) / denom``; the new ``p`` by ``3u |p| + (15 + 5 R) u U``. The bounds
    round these up: ``12 eps32 |p| + (8 + 3 R) eps32 U``, ``4 eps32 (|m| + G)`` and
    ``6 eps32 V``. A fused multiply-add rounds once where a multiply and an add round
    twice, so it stays within them."""
    step = check_int("step", step, 1)
    lr, (b1, b2), eps, wd = check_adam_hyper(lr, betas, eps, weight_decay)
    _, _, v_new = reference_adam(p, g, m, v, step=step, lr=lr, betas=(b1, b2), eps=eps,
                                 weight_decay=wd, decoupled=decoupled, maximize=maximize)
    p, g, m, v = (np.abs(a) for a in _f64(p, g, m, v))
    big_g = g + (0.0 if decoupled else wd) * p
    big_m = m + big_g
    big_v = b2 * v + (1.0 - b2) * big_g**2
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        denom = np.sqrt(v_new) / (1.0 - b2**step) ** 0.5 + eps
        big_u = lr / (1.0 - b1**step) * big_m / denom
        ratio = np.where(big_v == 0, 1.0, big_v / np.abs(v_new))  # R; inf if v_new is 0
        update = np.where(big_u == 0, 0.0, (8 + 3 * ratio) * big_u)
    return 12 * EPS32 * p + EPS32 * update, 4 * EPS32 * big_m, 6 * EPS32 * big_v


def reference_sgd(p: np.ndarray, g: np.ndarray, buf: np.ndarray | None, *, lr: float = 1e-3,
                  momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
                  nesterov: bool = False, maximize: bool = False
                  ) -> tuple[np.ndarray, np.ndarray | None]:
    """New ``(p, buf)`` after one step of ``torch.optim.SGD``, in float64. ``buf`` is the
    momentum buffer, ``None`` before the first step (it then starts as the gradient); the
    returned buffer is ``None`` when ``momentum`` is 0."""
    lr, momentum, dampening, wd, nesterov = check_sgd_hyper(lr, momentum, dampening,
                                                            weight_decay, nesterov)
    p, g = _f64(p, g)
    with np.errstate(invalid="ignore", over="ignore"):
        if maximize:
            g = -g
        if wd != 0:
            g = g + wd * p
        new_buf = None
        if momentum != 0:
            new_buf = g.copy() if buf is None else (
                np.asarray(buf, np.float64) * momentum + (1.0 - dampening) * g)
            g = g + momentum * new_buf if nesterov else new_buf
        return p - lr * g, new_buf


def sgd_error_bound(p: np.ndarray, g: np.ndarray, buf: np.ndarray | None, *, lr: float = 1e-3,
                    momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
                    nesterov: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Elementwise bounds on the error of a float32 SGD step's ``(p, buf)``, as
    :func:`adam_error_bound` derives them: with ``G = |g| + wd |p|``, the buffer ``B =
    momentum |buf| + |1 - dampening| G`` (``G`` on the first step) errs by at most ``8u B``,
    the direction ``D`` (``G``, ``B``, or ``G + momentum B`` with Nesterov) by ``11u D``, and
    the new ``p`` by ``u |p| + 14u lr D``: the bounds are ``8 eps32 (|p| + lr D)`` and
    ``6 eps32 B``."""
    lr, momentum, dampening, wd, nesterov = check_sgd_hyper(lr, momentum, dampening,
                                                            weight_decay, nesterov)
    p, g = (np.abs(a) for a in _f64(p, g))
    big_g = g + wd * p
    big_b = big_g if buf is None else momentum * np.abs(np.asarray(buf, np.float64)) + abs(
        1.0 - dampening) * big_g
    if momentum == 0:
        big_d = big_g
    else:
        big_d = big_g + momentum * big_b if nesterov else big_b
    return 8 * EPS32 * (p + lr * big_d), 6 * EPS32 * big_b


# ------------------------------------------------------------------------------------------
# Device functions: one element's update, and bfloat16 from and to its bit pattern
# ------------------------------------------------------------------------------------------


@cuda.jit(device=True, inline=True)
def _lerp(a, b, w):
    """torch's lerp, ``a + w (b - a)``, written so that it is exact at ``w = 0`` and 1."""
    if abs(w) < 0.5:
        return a + w * (b - a)
    return b - (b - a) * (float32(1) - w)


@cuda.jit(device=True, inline=True)
def _adam_element(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt,
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


@cuda.jit(device=True, inline=True)
def _bf16_to_f32(bits):
    """A bfloat16 (its bit pattern, int16) as float32: the same 16 bits, followed by 16
    zeros. Exact, for every value."""
    return uint32(uint32(bits.view(np.uint16)) << uint32(16)).view(np.float32)


@cuda.jit(device=True, inline=True)
def _f32_to_bf16(x):
    """float32 to bfloat16 bits (int16), rounded to nearest, ties to even, as torch rounds:
    add 0x7FFF plus the lowest bit that survives, then drop the low 16 bits. A carry out of
    the mantissa raises the exponent, which is correct rounding; past the largest bfloat16
    it gives infinity. NaN would risk carrying into infinity, so it becomes the quiet NaN
    0x7FC0."""
    if x != x:
        return int16(0x7FC0)
    u = x.view(np.uint32)
    rounded = uint32(u + uint32(0x7FFF) + ((u >> uint32(16)) & uint32(1))) >> uint32(16)
    return uint16(rounded).view(np.int16)


# ------------------------------------------------------------------------------------------
# The Adam variants
# ------------------------------------------------------------------------------------------
# v1_unfused: Adam as an eager framework runs it: each operation of torch's single-tensor
# code is a kernel of its own, which reads its inputs from device memory and writes its
# output back. Intermediate results (the gradient with the L2 term, the denominator) are
# arrays. Without weight decay that is 7 launches and 72 bytes per parameter instead of 28:
# lerp m (read m, g; write m: 12), v *= beta2 (8), v += w2 g g (12), denom = sqrt(v) (8),
# denom /= bc2 (8), denom += eps (8), p += -s m / denom (16). Every launch also pays its
# fixed cost, which dominates for small tensors.


@cuda.jit
def _neg_into(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = -x[i]


@cuda.jit
def _add_scaled_into(x, y, a, out):  # out = x + a y  (torch: grad.add(param, alpha=wd))
    i = cuda.grid(1)
    if i < x.size:
        out[i] = x[i] + a * y[i]


@cuda.jit
def _scale(x, a):  # x *= a  (torch: mul_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] * a


@cuda.jit
def _lerp_(x, y, w):  # x = lerp(x, y, w)  (torch: lerp_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = _lerp(x[i], y[i], w)


@cuda.jit
def _add_square(x, y, a):  # x += a y y  (torch: addcmul_(y, y, value=a))
    i = cuda.grid(1)
    if i < x.size:
        yi = y[i]
        x[i] = x[i] + a * yi * yi


@cuda.jit
def _sqrt_into(x, out):  # out = sqrt(x)  (torch: sqrt, a new tensor)
    i = cuda.grid(1)
    if i < x.size:
        out[i] = float32(math.sqrt(x[i]))


@cuda.jit
def _div_scalar(x, a):  # x /= a  (torch: div)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] / a


@cuda.jit
def _add_scalar(x, a):  # x += a  (torch: add_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] + a


@cuda.jit
def _addcdiv(x, t1, t2, a):  # x += a t1 / t2  (torch: addcdiv_)
    i = cuda.grid(1)
    if i < x.size:
        x[i] = x[i] + a * t1[i] / t2[i]


def v1_unfused(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """Adam unfused: the launches of torch's single-tensor code, one per operation."""
    blocks = _blocks(p.size)
    if k.maximize or k.l2 != 0:  # a new gradient array, as torch makes one
        g_eff = _scratch("grad", p.size)
        if k.maximize:
            _launch(_neg_into, blocks, g, g_eff)
            g = g_eff
        if k.l2 != 0:
            _launch(_add_scaled_into, blocks, g, p, k.l2, g_eff)
        g = g_eff
    if k.decay != 1:
        _launch(_scale, blocks, p, k.decay)
    _launch(_lerp_, blocks, m, g, k.w1)
    _launch(_scale, blocks, v, k.beta2)
    _launch(_add_square, blocks, v, g, k.w2)
    denom = _scratch("denom", p.size)
    _launch(_sqrt_into, blocks, v, denom)
    _launch(_div_scalar, blocks, denom, k.bc2_sqrt)
    _launch(_add_scalar, blocks, denom, k.eps)
    _launch(_addcdiv, blocks, p, m, denom, k.neg_step_size)


# v2_fused: one kernel, one thread per element: read p, g, m, v once, compute in registers,
# write p, m, v once. 28 bytes per parameter, the least a step can move with float32 state,
# and one launch per tensor. Adam is memory-bound (about 12 flops for 28 bytes), so its time
# should approach the time a copy of the same bytes takes.
@cuda.jit
def v2_fused(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt, eps):
    i = cuda.grid(1)
    if i < p.size:
        p[i], m[i], v[i] = _adam_element(p[i], g[i], m[i], v[i], maximize, l2, decay, w1,
                                         beta2, w2, neg_step_size, bc2_sqrt, eps)


# v3_shared: what the source articles suggest: the block first copies its slice of p, g, m
# and v into shared memory, waits, computes from shared memory into shared memory, waits, and
# copies the results back. It cannot be faster than v2: every element is still read from and
# written to device memory once (the state must be there when the next step begins, and the
# kernel ends long before), no thread uses a value another thread loaded, and the staging adds
# 14 shared-memory accesses (56 bytes) and two barriers per element.
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
        sp[t], sm[t], sv[t] = _adam_element(sp[t], sg[t], sm[t], sv[t], maximize, l2, decay,
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
@cuda.jit
def v4_multi_tensor(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt,
                    eps):
    for i in range(cuda.grid(1), p.size, cuda.gridsize(1)):
        p[i], m[i], v[i] = _adam_element(p[i], g[i], m[i], v[i], maximize, l2, decay, w1,
                                         beta2, w2, neg_step_size, bc2_sqrt, eps)


# adam_mixed: mixed precision. Parameters and gradients are float16 or bfloat16 (as the
# forward and backward passes use them); the optimizer keeps a float32 master copy of each
# parameter and float32 moments, updates those, and writes the new parameter rounded to
# nearest even. Per parameter it reads g (2 bytes), the master, m, v (12) and writes the
# master, m, v (12) and p (2): 28 bytes, as in fp32. The low-precision parameter is only
# written; the small updates accumulate in the master copy, where float16 or bfloat16 would
# round many of them away. bfloat16 arrives as int16 bits (NumPy has no bfloat16), converted
# with _bf16_to_f32 and _f32_to_bf16; ``bf16`` is the same for every thread.
@cuda.jit
def adam_mixed(p_low, g_low, master, m, v, bf16, maximize, l2, decay, w1, beta2, w2,
               neg_step_size, bc2_sqrt, eps):
    for i in range(cuda.grid(1), master.size, cuda.gridsize(1)):
        if bf16:
            g = _bf16_to_f32(g_low[i])
        else:
            g = float32(g_low[i])
        p, m[i], v[i] = _adam_element(master[i], g, m[i], v[i], maximize, l2, decay, w1,
                                      beta2, w2, neg_step_size, bc2_sqrt, eps)
        master[i] = p
        if bf16:
            p_low[i] = _f32_to_bf16(p)
        else:
            p_low[i] = p


@cuda.jit(device=True, inline=True)
def _sgd_gradient(g, p, maximize, l2):
    """The gradient SGD follows: negated to maximize, plus the L2 term, in torch's order."""
    if maximize:
        g = -g
    if l2 != 0:
        g = g + l2 * p
    return g


# sgd_kernel: torch.optim.SGD's step without momentum, p -= lr * g, in one pass: 12 bytes per
# parameter (read p, g; write p).
@cuda.jit
def sgd_kernel(p, g, maximize, l2, neg_lr):
    i = cuda.grid(1)
    if i < p.size:
        x = p[i]
        p[i] = x + neg_lr * _sgd_gradient(g[i], x, maximize, l2)


# sgd_momentum_kernel: with momentum, the buffer too: the gradient itself on the first step,
# then momentum * buf + (1 - dampening) * g; Nesterov's look-ahead g + momentum * buf; and
# p -= lr * direction. 20 bytes per parameter (read p, g, buf; write p, buf). Plain SGD has
# a kernel of its own rather than this one with an unused buffer: handing it the parameter
# as a stand-in buffer passed one memory twice, which the simulator copies twice
# (gpudl.aliasing).
@cuda.jit
def sgd_momentum_kernel(p, g, buf, maximize, l2, first, momentum, w, nesterov, neg_lr):
    i = cuda.grid(1)
    if i < p.size:
        x = p[i]
        d = _sgd_gradient(g[i], x, maximize, l2)
        b = d if first else buf[i] * momentum + w * d
        buf[i] = b
        d = d + momentum * b if nesterov else b
        p[i] = x + neg_lr * d


# ------------------------------------------------------------------------------------------
# Launchers (kernel arrays: device arrays, or NumPy arrays on the simulator; size >= 1)
# ------------------------------------------------------------------------------------------


def _blocks(n: int) -> int:
    return math.ceil(n / THREADS)


def launch_fused(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v2_fused`` launch, one thread per element."""
    _launch(v2_fused, _blocks(p.size), p, g, m, v, *k)


def launch_shared(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v3_shared`` launch, one thread per element."""
    _launch(v3_shared, _blocks(p.size), p, g, m, v, *k)


def launch_multi_tensor(p: Array, g: Array, m: Array, v: Array, k: AdamScalars) -> None:
    """One ``v4_multi_tensor`` launch over one wave of resident blocks."""
    _launch(v4_multi_tensor, grid_stride_blocks(p.size, THREADS), p, g, m, v, *k)


def launch_mixed(p_low: Array, g_low: Array, master: Array, m: Array, v: Array,
                 k: AdamScalars) -> None:
    """One ``adam_mixed`` launch over one wave of resident blocks."""
    bf16 = np.dtype(p_low.dtype) == np.int16
    _launch(adam_mixed, grid_stride_blocks(master.size, THREADS), p_low, g_low, master, m, v,
            bf16, *k)


def launch_sgd(p: Array, g: Array, buf: Array | None, k: SgdScalars) -> None:
    """One SGD launch: ``sgd_kernel`` without momentum (``buf`` None), else
    ``sgd_momentum_kernel`` on the momentum buffer ``buf``."""
    if k.has_momentum != (buf is not None):
        given = "None" if buf is None else "an array"
        raise ValueError("a momentum buffer is needed exactly when momentum != 0, got "
                         f"momentum={float(k.momentum)} and buf={given}")
    if buf is None:
        _launch(sgd_kernel, _blocks(p.size), p, g, k.maximize, k.l2, k.neg_lr)
    else:
        _launch(sgd_momentum_kernel, _blocks(p.size), p, g, buf, k.maximize, k.l2, k.first,
                k.momentum, k.w, k.nesterov, k.neg_lr)


#: Adam variant name -> launcher(p, g, m, v, scalars) on kernel arrays, updating in place.
VARIANTS: dict[str, Callable[[Array, Array, Array, Array, AdamScalars], None]] = {
    "unfused": v1_unfused,
    "fused": launch_fused,
    "shared": launch_shared,
    "multi_tensor": launch_multi_tensor,
}
DEFAULT_VARIANT = "multi_tensor"

_SCRATCH: dict[str, Array] = {}


def _scratch(name: str, n: int) -> Array:
    """A float32 device array of ``n`` elements for an intermediate of ``v1_unfused``, kept
    from one call to the next (as a framework's caching allocator keeps its blocks, so that
    the timing of the unfused step is not that of an allocation)."""
    if name not in _SCRATCH or _SCRATCH[name].size < n:
        _SCRATCH[name] = cuda.device_array(n, dtype=np.float32)
    return _SCRATCH[name][:n]


# ------------------------------------------------------------------------------------------
# Counting launches and bytes on the simulator
# ------------------------------------------------------------------------------------------


@dataclass
class Traffic:
    """Kernel launches and bytes accessed, by memory and direction, over some steps."""

    launches: int = 0
    kernels: list[str] = field(default_factory=list)
    bytes: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, op) -> bytes

    def total(self, kind: str = "global") -> int:
        """Bytes loaded plus stored in ``kind`` memory ("global": device memory, "shared")."""
        return sum(n for (k, _), n in self.bytes.items() if k == kind)

    def record(self, kernel: Any, blocks: int, args: tuple) -> None:
        from gpudl.trace import trace

        t = trace(kernel, blocks, THREADS, *args)
        self.launches += 1
        self.kernels.append(kernel.py_func.__name__)
        for a in t.accesses:
            self.bytes[(a.kind, a.op)] = self.bytes.get((a.kind, a.op), 0) + a.size


_traffic: Traffic | None = None


def _launch(kernel: Any, blocks: int, *args: Any) -> None:
    if _traffic is not None:
        _traffic.record(kernel, blocks, args)
    else:
        kernel[blocks, THREADS](*args)


@contextmanager
def traffic() -> Iterator[Traffic]:
    """Count every launch of this module's kernels inside the ``with`` block, and the bytes
    each reads and writes, by running them under :func:`gpudl.trace.trace` (simulator only:
    wrap the caller in :func:`gpudl.trace.on_simulator` on a GPU). The counts are facts about
    the kernels, the same on any GPU; caches are not modelled."""
    global _traffic
    if not backend.is_simulator():
        raise RuntimeError("counting traffic needs the simulator; call it through "
                           "gpudl.trace.on_simulator on a GPU")
    if _traffic is not None:
        raise RuntimeError("traffic() is already counting")
    _traffic = Traffic()
    try:
        yield _traffic
    finally:
        _traffic = None


# ------------------------------------------------------------------------------------------
# Public entry points: checks, and host arrays in and out
# ------------------------------------------------------------------------------------------


def _check_same_size(arrays: dict[str, Array]) -> None:
    sizes = {name: x.size for name, x in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"arrays must have the same size, got {sizes}")


def _check_low(name: str, x: object) -> bool:
    on_device = is_device_array(x)
    if not (on_device or isinstance(x, np.ndarray)):
        raise TypeError(f"{name} must be a NumPy array or a numba device array, got "
                        f"{type(x).__name__}")
    if np.dtype(x.dtype) not in LOW_DTYPES:
        raise TypeError(f"{name} must be float16, or int16 holding bfloat16 bits, got "
                        f"{x.dtype}")
    if x.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got {x.ndim}-D with shape {x.shape}")
    if not (x.is_c_contiguous() if on_device else x.flags.c_contiguous):
        raise ValueError(f"{name} must be contiguous, got a strided view")
    return on_device


def _run_in_place(launch: Callable, arrays: dict[str, Array], outputs: tuple[str, ...],
                  kinds: set[bool], *scalars: Any) -> None:
    """Launch on device arrays in place; host arrays go to the device and their outputs come
    back into them."""
    if len(kinds) > 1:
        raise TypeError("arrays must be all NumPy arrays or all device arrays, got a mix")
    _check_same_size(arrays)
    if next(iter(arrays.values())).size == 0:
        return
    if kinds == {True}:
        launch(*arrays.values(), *scalars)
        return
    on_device = {name: to_device(x) for name, x in arrays.items()}
    launch(*on_device.values(), *scalars)
    for name in outputs:
        on_device[name].copy_to_host(arrays[name])


def adam_step(p: Array, g: Array, m: Array, v: Array, *, step: int, lr: float = 1e-3,
              betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
              weight_decay: float = 0.0, decoupled: bool = False, maximize: bool = False,
              variant: str = DEFAULT_VARIANT) -> None:
    """Adam's step number ``step`` (AdamW's if ``decoupled``) on float32 1-D arrays of one
    size, in place: ``p``, ``m`` (first moment) and ``v`` (second moment) are updated, ``g``
    is read. NumPy arrays or numba device arrays (not a mix); ``VARIANTS[variant]`` runs it.
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {list(VARIANTS)}, got {variant!r}")
    k = adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)
    arrays = {"p": p, "g": g, "m": m, "v": v}
    kinds = {check_float32_array(name, x, 1) for name, x in arrays.items()}
    _run_in_place(VARIANTS[variant], arrays, ("p", "m", "v"), kinds, k)


def adam_step_mixed(p_low: Array, g_low: Array, master: Array, m: Array, v: Array, *,
                    step: int, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                    eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                    maximize: bool = False) -> None:
    """A mixed-precision Adam step in place: ``p_low`` and ``g_low`` are float16, or int16
    arrays holding bfloat16 bits (both the same); ``master``, ``m`` and ``v`` are float32.
    The master weights, ``m`` and ``v`` take the fp32 step; ``p_low`` receives the new master
    weights rounded to nearest, ties to even."""
    k = adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)
    kinds = {_check_low("p_low", p_low), _check_low("g_low", g_low)}
    if p_low.dtype != g_low.dtype:
        raise TypeError(f"p_low and g_low must have the same dtype, got {p_low.dtype} and "
                        f"{g_low.dtype}")
    arrays = {"p_low": p_low, "g_low": g_low, "master": master, "m": m, "v": v}
    kinds |= {check_float32_array(name, arrays[name], 1) for name in ("master", "m", "v")}
    _run_in_place(launch_mixed, arrays, ("p_low", "master", "m", "v"), kinds, k)


def sgd_step(p: Array, g: Array, buf: Array | None, *, first: bool, lr: float = 1e-3,
             momentum: float = 0.0, dampening: float = 0.0, weight_decay: float = 0.0,
             nesterov: bool = False, maximize: bool = False) -> None:
    """One ``torch.optim.SGD`` step on float32 1-D arrays, in place. ``buf`` is the momentum
    buffer (``None`` when ``momentum`` is 0); with ``first`` it is written, not read."""
    k = sgd_scalars(first, lr, momentum, dampening, weight_decay, nesterov, maximize)
    arrays = {"p": p, "g": g}
    if k.has_momentum:
        if buf is None:
            raise ValueError("a momentum buffer is needed when momentum != 0, got None")
        arrays["buf"] = buf
    kinds = {check_float32_array(name, x, 1) for name, x in arrays.items()}
    launch = launch_sgd if k.has_momentum else (lambda p_, g_, k_: launch_sgd(p_, g_, None, k_))
    _run_in_place(launch, arrays, tuple(name for name in arrays if name != "g"), kinds, k)
