"""What the book's optimizers share: torch's hyperparameters and options, checked, and tensors
handed to the kernels as kernel arrays.

Book section: *Chapter 4, "Kernels on a framework's tensors"*.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from itertools import chain
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import torch

from gpudl.checks import check_callable, check_tensor
from gpudl.interop import KernelArrays, check_device
from gpudl.kernels import optim as optim_kernels

__all__ = ["LOW_PRECISION", "adam_betas", "array_cache", "cached_adam_scalars", "check_group",
           "check_loaded_state", "check_params", "check_params_argument", "checked_gradient",
           "hyperparameter", "kernel_array", "refuse_torch_options", "run_closure", "staged"]

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


#: What each of torch's optimizer options asks for when on: ``foreach`` and ``fused`` choose
#: one of torch's own implementations of the step, ``capturable`` and ``differentiable`` a
#: behaviour of the step. gpudl.optim offers none of them.
_TORCH_OPTIONS = {
    "foreach": "it chooses torch's foreach implementation of the step",
    "fused": "it chooses torch's fused implementation of the step",
    "capturable": "it asks for a step that a CUDA graph can capture (its step count kept on "
                  "the device)",
    "differentiable": "it asks for a step that autograd differentiates through",
}


def refuse_torch_options(name: str, **options: Any) -> None:
    """Refuse torch's optimizer options when they are on: ``foreach`` and ``fused`` choose one
    of torch's implementations of the step; ``capturable`` (a step a CUDA graph can capture,
    its step count kept on the device) and ``differentiable`` (autograd through the step) ask
    for a behaviour the book's kernels do not have. ``None`` or ``False`` asks for none of
    them, and is accepted."""
    for option, value in options.items():
        if not (value is None or value is False):
            implementation = option in ("foreach", "fused")
            raise ValueError(f"{name} does not support {option}={value!r}: "
                             f"{_TORCH_OPTIONS[option]}, and gpudl.optim runs its own kernels"
                             + (" (choose one with variant=...)"
                                if implementation and name != "SGD" else ""))


def run_closure(closure: Callable[[], Any] | None) -> Any:
    """The loss ``closure()`` returns, computed with gradients on (``None`` without one)."""
    if closure is None:
        return None
    check_callable("closure", closure)
    with torch.enable_grad():
        return closure()


def check_params(name: str, group: dict, dtypes: tuple[torch.dtype, ...]) -> None:
    """``TypeError`` unless every parameter of ``group`` has one of ``dtypes`` and lives where
    the kernels run (:func:`gpudl.interop.check_device`)."""
    for p in group["params"]:
        if p.dtype not in dtypes:
            raise TypeError(f"{name} needs parameters (params) of dtype "
                            f"{[str(d) for d in dtypes]}, got {p.dtype}")
        check_device(p, "params")


def check_group(optimizer: torch.optim.Optimizer, dtypes: tuple[torch.dtype, ...],
                check: Callable[..., Any], keys: tuple[str, ...],
                more: Callable[[dict], None] | None = None) -> None:
    """Check the parameter group just added to ``optimizer`` (by ``add_param_group``, which
    the constructor calls too): its parameters (:func:`check_params`), its own
    hyperparameters ``keys`` by ``check`` (the constructor's check), and ``more``. A failure
    removes the group again and raises a ``TypeError`` or ``ValueError`` naming
    ``param_group``, before any step."""
    name, group = type(optimizer).__name__, optimizer.param_groups[-1]
    try:
        check_params(name, group, dtypes)
        check(*(hyperparameter(key, group[key]) if key in ("lr", "weight_decay")
                else adam_betas(group[key]) if key == "betas" else group[key] for key in keys))
        if more is not None:
            more(group)
    except (TypeError, ValueError) as err:
        optimizer.param_groups.pop()
        raise type(err)(f"{name}: param_group: {err}") from None


def check_params_argument(name: str, params: object) -> None:
    """``TypeError`` unless ``params`` is an iterable of tensors or of parameter groups (a
    lone tensor, ``None`` or a number is not)."""
    if isinstance(params, torch.Tensor | str) or not isinstance(params, Iterable):
        raise TypeError(f"{name}: params must be an iterable of tensors or of parameter groups "
                        f"(dicts), got {type(params).__name__}")


def checked_gradient(p: torch.Tensor, name: str) -> torch.Tensor:
    """``p.grad``, dense and of ``p``'s dtype and shape (else ``TypeError``/``ValueError``)."""
    g = check_tensor("p", p).grad
    check_tensor("p.grad", g)
    if g.is_sparse:
        raise TypeError(f"{name} does not support sparse gradients")
    if g.dtype != p.dtype or g.shape != p.shape:
        raise ValueError(f"a gradient must match its parameter: parameter {p.dtype} "
                         f"{tuple(p.shape)}, gradient {g.dtype} {tuple(g.shape)}")
    return g


@contextmanager
def staged(tensors: dict[str, torch.Tensor | None],
           written: tuple[str, ...]) -> Iterator[dict[str, torch.Tensor | None]]:
    """The ``tensors`` as the kernels need them: contiguous. A non-contiguous one (a
    transposed parameter, its gradient and state) is replaced by a contiguous copy for the
    ``with`` block, and those named in ``written`` are copied back into it afterwards, so a
    parameter of any layout is updated as torch updates it (the same values, element by
    element). Contiguous tensors pass as they are, with no copy."""
    copies = {name: t if t is None or t.is_contiguous() else t.contiguous()
              for name, t in tensors.items()}
    yield copies
    for name in written:
        if copies[name] is not tensors[name]:
            tensors[name].copy_(copies[name])


def check_loaded_state(name: str, optimizer: torch.optim.Optimizer, state_dict: object,
                       tensors: tuple[str, ...]) -> None:
    """Check a ``state_dict`` before ``optimizer`` loads it: its groups hold as many
    parameters as the optimizer's, and each state tensor named in ``tensors`` (``exp_avg``,
    ``momentum_buffer``...) is a floating-point tensor of its parameter's shape, and
    ``step`` a whole number >= 0. ``TypeError`` or ``ValueError`` naming the parameter and
    the entry; torch would find a wrong shape only at the next step (or broadcast it)."""
    if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
        raise TypeError(f"{name}.load_state_dict needs a dict with 'state' and 'param_groups' "
                        f"(from state_dict()), got {type(state_dict).__name__}")
    saved_ids = list(chain.from_iterable(g["params"] for g in state_dict["param_groups"]))
    params = list(chain.from_iterable(g["params"] for g in optimizer.param_groups))
    if len(saved_ids) != len(params):
        raise ValueError(f"the state_dict has {len(saved_ids)} parameters, {name} has "
                         f"{len(params)}")
    for index, (saved_id, p) in enumerate(zip(saved_ids, params, strict=True)):
        saved = state_dict["state"].get(saved_id, {})
        for key in tensors:
            if key not in saved:
                continue
            where = f"state_dict['state'][{saved_id!r}][{key!r}]"
            t = check_tensor(where, saved[key])
            if not t.dtype.is_floating_point:
                raise TypeError(f"{where} must be a floating-point tensor, got {t.dtype}")
            if t.shape != p.shape:
                raise ValueError(f"{where} has shape {tuple(t.shape)}, but parameter {index} "
                                 f"has shape {tuple(p.shape)}")
        if "step" in saved:
            step = saved["step"]
            value = float(step.item()) if isinstance(step, torch.Tensor) and step.numel() == 1 \
                else step
            if isinstance(value, bool) or not isinstance(value, int | float) or not (
                    math.isfinite(value) and value >= 0 and value == int(value)):
                raise ValueError(f"state_dict['state'][{saved_id!r}]['step'] must be a whole "
                                 f"number >= 0, got {step!r}")


def kernel_array(arrays: KernelArrays, t: torch.Tensor, name: str) -> object:
    """A tensor as a flat kernel array (made once per memory, kept in ``arrays``); bfloat16
    through its int16 bit pattern."""
    flat = t.reshape(-1) if t.is_contiguous() else t
    return arrays.get(flat.view(torch.int16) if t.dtype == torch.bfloat16 else flat, name)


@lru_cache(maxsize=256)
def cached_adam_scalars(step: int, lr: float, betas: tuple, eps: float, weight_decay: float,
                        decoupled: bool, maximize: bool) -> optim_kernels.AdamScalars:
    """:func:`gpudl.kernels.optim.adam_scalars`, computed once per step and hyperparameters."""
    return optim_kernels.adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)


def array_cache(params: Iterable[torch.Tensor]) -> KernelArrays:
    """Room for the arrays of every parameter, gradient and state tensor, twice over."""
    check_params_argument("array_cache", params)
    return KernelArrays(capacity=16 * sum(1 for _ in params) + 64)
