"""The optimizers' hyperparameters, checked as torch checks them, and the float32 scalars the
kernels receive.

Book section: *Chapter 4, "The update rules"*.
"""

from __future__ import annotations

from numbers import Real
from typing import NamedTuple

import numpy as np

from gpudl.checks import check_bool, check_int, check_real

__all__ = ["AdamScalars", "SgdScalars", "adam_scalars", "check_adam_hyper", "check_sgd_hyper",
           "sgd_scalars"]


#: torch's words for a hyperparameter in its error messages.
_WORDS = {"lr": "learning rate", "eps": "epsilon value", "weight_decay": "weight_decay value",
          "momentum": "momentum value"}


def _at_least_zero(name: str, value: object) -> float:
    """A hyperparameter >= 0 as a float: torch's message for a negative value or NaN, the
    package's for the wrong type or an infinity (:func:`gpudl.checks.check_real`)."""
    if isinstance(value, Real) and not isinstance(value, bool) and not float(value) >= 0:
        raise ValueError(f"Invalid {_WORDS[name]}: {value} ({name} must be >= 0)")
    return check_real(name, value)


def check_adam_hyper(lr: float, betas: tuple[float, float], eps: float,
                     weight_decay: float) -> tuple[float, tuple[float, float], float, float]:
    """``(lr, betas, eps, weight_decay)`` as floats, checked as ``torch.optim.Adam`` checks
    them (same messages, with the rule added): ``lr``, ``eps`` and ``weight_decay`` >= 0,
    each beta in [0, 1). ``TypeError`` for what is not a real number or a pair."""
    lr, eps, weight_decay = (_at_least_zero(n, x) for n, x in (
        ("lr", lr), ("eps", eps), ("weight_decay", weight_decay)))
    if isinstance(betas, str) or not hasattr(betas, "__len__") or len(betas) != 2:
        raise TypeError(f"betas must be a pair (beta1, beta2), got {betas!r}")
    for index, beta in enumerate(betas):
        if isinstance(beta, Real) and not isinstance(beta, bool) and not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {index}: {beta} "
                             "(betas must lie in [0, 1))")
    b1, b2 = check_real("betas[0]", betas[0]), check_real("betas[1]", betas[1])
    return lr, (b1, b2), eps, weight_decay


def check_sgd_hyper(lr: float, momentum: float, dampening: float, weight_decay: float,
                    nesterov: bool) -> tuple[float, float, float, float, bool]:
    """``(lr, momentum, dampening, weight_decay, nesterov)`` checked as ``torch.optim.SGD``
    checks them: ``lr``, ``momentum`` and ``weight_decay`` >= 0, and Nesterov momentum needs
    a momentum > 0 and no dampening."""
    lr, momentum, weight_decay = (_at_least_zero(n, x) for n, x in (
        ("lr", lr), ("momentum", momentum), ("weight_decay", weight_decay)))
    dampening = check_real("dampening", dampening)
    nesterov = check_bool("nesterov", nesterov)
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
