"""Adam's and SGD's steps in float64, and how far a float32 step may be from them.

Book section: *Chapter 4, "Checking a step"*.

:func:`reference_adam` and :func:`reference_sgd` are torch's formulas in float64;
:func:`adam_error_bound` and :func:`sgd_error_bound` bound how far a float32 step may be from
them, elementwise, by adding the rounding errors along each result's path (derivation in their
docstrings), barring underflow and overflow.
"""

from __future__ import annotations

import numpy as np

from gpudl.checks import check_array, check_bool, check_equal, check_int
from gpudl.kernels.arrays import EPS32, Array
from gpudl.kernels.optim.hyper import check_adam_hyper, check_sgd_hyper

__all__ = ["adam_error_bound", "reference_adam", "reference_sgd", "sgd_error_bound"]


def _lerp64(a: np.ndarray, b: np.ndarray, w: float) -> np.ndarray:
    """torch's ``lerp``: exact at both ends, NaN where ``b - a`` is ``inf - inf``."""
    with np.errstate(invalid="ignore", over="ignore"):
        return a + w * (b - a) if abs(w) < 0.5 else b - (b - a) * (1.0 - w)


def _f64(**arrays: Array) -> list[np.ndarray]:
    """The arrays, checked (real NumPy arrays of one shape; ``buf`` may be None), as float64
    copies."""
    shape = None
    for name, a in arrays.items():
        if a is None and name == "buf":
            continue
        check_array(name, a)
        if shape is None:
            shape = (name, a.shape)
        check_equal(f"{name}.shape", a.shape, f"{shape[0]}.shape", shape[1])
    return [None if a is None else np.array(a, dtype=np.float64) for a in arrays.values()]


def reference_adam(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, step: int,
                   lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                   eps: float = 1e-8, weight_decay: float = 0.0, decoupled: bool = False,
                   maximize: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """New ``(p, m, v)`` after Adam's step ``step`` (AdamW's if ``decoupled``), in float64,
    by ``torch.optim.Adam``'s single-tensor formulas. The inputs are not modified."""
    step = check_int("step", step, 1)
    lr, (b1, b2), eps, wd = check_adam_hyper(lr, betas, eps, weight_decay)
    p, g, m, v = _f64(p=p, g=g, m=m, v=v)
    check_bool("decoupled", decoupled)
    check_bool("maximize", maximize)
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
    p, g, m, v = (np.abs(a) for a in _f64(p=p, g=g, m=m, v=v))
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
    p, g, buf = _f64(p=p, g=g, buf=buf)
    check_bool("maximize", maximize)
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
    p, g, buf = _f64(p=p, g=g, buf=buf)
    p, g = np.abs(p), np.abs(g)
    big_g = g + wd * p
    big_b = big_g if buf is None else momentum * np.abs(np.asarray(buf, np.float64)) + abs(
        1.0 - dampening) * big_g
    if momentum == 0:
        big_d = big_g
    else:
        big_d = big_g + momentum * big_b if nesterov else big_b
    return 8 * EPS32 * (p + lr * big_d), 6 * EPS32 * big_b
