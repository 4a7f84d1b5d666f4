"""What the book's optimizers share: torch's hyperparameters and options, checked, and tensors
handed to the kernels as kernel arrays.

Book section: *Chapter 4, "Kernels on a framework's tensors"*.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import torch

from gpudl.interop import KernelArrays, check_device
from gpudl.kernels import optim as kernels

__all__ = ["LOW_PRECISION", "adam_betas", "array_cache", "cached_adam_scalars", "check_params",
           "checked_gradient", "hyperparameter", "kernel_array", "refuse_torch_options",
           "run_closure"]

#: Parameter dtypes that Adam updates through float32 master weights.
LOW_PRECISION = (torch.float16, torch.bfloat16)


def hyperparameter(name: str, value: Any) -> Any:
    """A hyperparameter as torch accepts it: a number, or a one-element tensor (read at every
    step, so that a scheduler's in-place change is seen), returned as a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.dtype.is_floating_point:
            raise ValueError(f"a tensor {name} must hold one floating-point value, got "
                             f"{value.dtype} of shape {tuple(value.shape)}")
        return float(value.item())
    return value


def adam_betas(betas: Any) -> Any:
    """Adam's betas with one-element tensors read as floats (anything else as given, for
    :func:`gpudl.kernels.optim.check_adam_hyper` to check)."""
    if isinstance(betas, tuple | list) and len(betas) == 2:
        return (hyperparameter("betas[0]", betas[0]), hyperparameter("betas[1]", betas[1]))
    return betas


def refuse_torch_options(name: str, **options: Any) -> None:
    """Refuse torch's implementation switches when they are on: they select torch's own code
    paths (``None`` or ``False`` asks for none of them, and is accepted)."""
    for option, value in options.items():
        if not (value is None or value is False):
            raise ValueError(f"{name} does not support {option}={value!r}: it selects one of "
                             "torch's implementations, and gpudl.optim runs its own kernels"
                             + (" (choose one with variant=...)" if name != "SGD" else ""))


def run_closure(closure: Callable[[], Any] | None) -> Any:
    """The loss ``closure()`` returns, computed with gradients on (``None`` without one)."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def check_params(name: str, group: dict, dtypes: tuple[torch.dtype, ...]) -> None:
    """``TypeError`` unless every parameter of ``group`` has one of ``dtypes`` and lives where
    the kernels run (:func:`gpudl.interop.check_device`)."""
    for p in group["params"]:
        if p.dtype not in dtypes:
            raise TypeError(f"{name} needs parameters of dtype {[str(d) for d in dtypes]}, "
                            f"got {p.dtype}")
        check_device(p, "parameters")


def checked_gradient(p: torch.Tensor, name: str) -> torch.Tensor:
    """``p.grad``, dense and of ``p``'s dtype and shape (else ``TypeError``/``ValueError``)."""
    g = p.grad
    if g.is_sparse:
        raise TypeError(f"{name} does not support sparse gradients")
    if g.dtype != p.dtype or g.shape != p.shape:
        raise ValueError(f"a gradient must match its parameter: parameter {p.dtype} "
                         f"{tuple(p.shape)}, gradient {g.dtype} {tuple(g.shape)}")
    return g


def kernel_array(arrays: KernelArrays, t: torch.Tensor, name: str) -> object:
    """A tensor as a flat kernel array (made once per memory, kept in ``arrays``); bfloat16
    through its int16 bit pattern."""
    flat = t.reshape(-1) if t.is_contiguous() else t
    return arrays.get(flat.view(torch.int16) if t.dtype == torch.bfloat16 else flat, name)


@lru_cache(maxsize=256)
def cached_adam_scalars(step: int, lr: float, betas: tuple, eps: float, weight_decay: float,
                        decoupled: bool, maximize: bool) -> kernels.AdamScalars:
    """:func:`gpudl.kernels.optim.adam_scalars`, computed once per step and hyperparameters."""
    return kernels.adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)


def array_cache(params: Iterable[torch.Tensor]) -> KernelArrays:
    """Room for the arrays of every parameter, gradient and state tensor, twice over."""
    return KernelArrays(capacity=16 * sum(1 for _ in params) + 64)
