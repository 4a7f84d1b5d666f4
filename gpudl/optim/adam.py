"""``torch.optim.Adam`` and ``AdamW`` whose step runs the book's Adam kernels, per tensor or in
one launch per parameter group over flat buffers.

Book section: *Chapter 4, "Multi-tensor: one launch for the whole model"* and *"What a launch
costs"*.

``v4_multi_tensor`` (the default variant) and ``v5_triton_multi_tensor`` launch one kernel per
parameter group: at its first
step it moves the group's parameters, gradients and moments into flat buffers, one per kind,
with every tensor a view into them (:mod:`gpudl.optim.flat_buffers`); a group of one
contiguous parameter keeps it where it is, as its own flat buffer. Backward passes then
accumulate gradients straight into the flat gradient buffer, and :meth:`Adam.zero_grad` zeroes
it in place instead of setting gradients to ``None`` (:mod:`gpudl.optim.gradient_hooks` keeps
which were written since). The other variants launch once per parameter tensor. The step
paths themselves are :mod:`gpudl.optim.adam_steps`; this module holds the optimizer's
arguments, groups, state and checkpoints.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from itertools import chain
from typing import Any

import torch

import gpudl.optim.adam_steps as adam_steps
from gpudl import registry
from gpudl.checks import check_bool, check_choice
from gpudl.interop import KernelArrays
from gpudl.kernels import optim as optim_kernels
from gpudl.optim.flat_buffers import FP32_STATE, FlatGroup, flatten
from gpudl.optim.gradient_hooks import WrittenGradients
from gpudl.optim.tensors import (
    LOW_PRECISION,
    adam_betas,
    array_cache,
    check_group,
    check_loaded_state,
    check_params_argument,
    hyperparameter,
    refuse_torch_options,
    run_closure,
)

__all__ = ["LOW_PRECISION_VARIANTS", "MULTI_TENSOR_VARIANTS", "Adam", "AdamW"]

_GRAD = operator.attrgetter("grad")
#: The variants that take 16-bit parameters (:data:`~gpudl.optim.tensors.LOW_PRECISION`),
#: keeping float32 master weights in their state.
LOW_PRECISION_VARIANTS = ("v2_fused", "v4_multi_tensor")
#: The variants that update a parameter group in one launch over its flat buffers.
MULTI_TENSOR_VARIANTS = ("v4_multi_tensor", "v5_triton_multi_tensor")


class Adam(torch.optim.Optimizer):
    """``torch.optim.Adam`` (and, with ``decoupled_weight_decay``, AdamW) whose step runs
    ``gpudl.kernels.optim.VARIANTS[variant]``. Same arguments and checks as torch's (``lr``
    and each beta a number or a one-element tensor), except that ``amsgrad=True``, torch's
    choices of implementation (``foreach``, ``fused``) and its behaviour flags
    (``capturable``: a step a CUDA graph can capture; ``differentiable``: autograd through the
    step) are refused; ``variant`` is this book's. ``flat_groups`` maps a (group index, dtype)
    to its :class:`~gpudl.optim.flat_buffers.FlatGroup` (variant ``v4_multi_tensor``),
    ``written_gradients`` which of their gradients backward wrote
    (:class:`~gpudl.optim.gradient_hooks.WrittenGradients`); ``kernel_arrays`` keeps the kernel
    arrays made from the tensors (:class:`gpudl.interop.KernelArrays`)."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False,
                 variant: str = optim_kernels.DEFAULT_VARIANT) -> None:
        refuse_torch_options(type(self).__name__, foreach=foreach, fused=fused,
                              capturable=capturable, differentiable=differentiable)
        check_params_argument(type(self).__name__, params)
        optim_kernels.check_adam_hyper(hyperparameter("lr", lr), adam_betas(betas), eps,
                                       weight_decay)
        if amsgrad:
            raise ValueError("amsgrad=True is not implemented by gpudl.optim; use "
                             "torch.optim.Adam(amsgrad=True)")
        registry.check_variant("adam", variant, optim_kernels.VARIANTS)
        check_bool("maximize", maximize)
        check_bool("decoupled_weight_decay", decoupled_weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": False, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay, "variant": variant}
        self.flat_groups: dict[tuple[int, torch.dtype], FlatGroup] = {}
        # the flat-buffer parameters whose gradient slot holds a gradient to apply
        self.written_gradients = WrittenGradients()
        self.kernel_arrays = KernelArrays()
        self._dtypes: dict[int, tuple[int, int, tuple[torch.dtype, ...]]] = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, refusing parameters the kernels cannot update."""
        super().add_param_group(param_group)
        index = len(self.param_groups) - 1
        check_group(self, (torch.float32, *LOW_PRECISION), optim_kernels.check_adam_hyper,
                    ("lr", "betas", "eps", "weight_decay"),
                    lambda group: self._check_group(group, self._group_dtypes(index)))
        self.kernel_arrays.capacity = array_cache(
            chain.from_iterable(g["params"] for g in self.param_groups)).capacity

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # groups saved by torch.optim.Adam lack these
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", self.defaults["decoupled_weight_decay"])
            group.setdefault("variant", self.defaults["variant"])
        absent_when_unpickled = (("flat_groups", dict), ("written_gradients", WrittenGradients),
                                 ("_dtypes", dict), ("kernel_arrays", KernelArrays))
        for name, empty in absent_when_unpickled:
            self.__dict__.setdefault(name, empty())
        for flat in self.flat_groups.values():  # a new state: adopt it at the next step
            flat.ready = False

    def _group_dtypes(self, index: int) -> tuple[torch.dtype, ...]:
        """The dtypes of a group's parameters, in order of appearance (recomputed only when
        the group's list of parameters changes)."""
        params = self.param_groups[index]["params"]
        cached = self._dtypes.get(index)
        if cached is None or cached[:2] != (id(params), len(params)):
            cached = (id(params), len(params), tuple(dict.fromkeys(p.dtype for p in params)))
            self._dtypes[index] = cached
        return cached[2]

    def _check_group(self, group: dict, dtypes: tuple[torch.dtype, ...]) -> None:
        registry.check_variant("adam", group["variant"], optim_kernels.VARIANTS)
        low = [d for d in dtypes if d in LOW_PRECISION]
        if low:
            check_choice(f"the variant of {sorted(map(str, low))} parameters (updated through "
                         "float32 master weights)", group["variant"], LOW_PRECISION_VARIANTS)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step for every parameter that has a gradient; returns the closure's
        loss."""
        loss = run_closure(closure)
        name = type(self).__name__
        for index, group in enumerate(self.param_groups):
            dtypes = self._group_dtypes(index)
            self._check_group(group, dtypes)
            if group["variant"] in MULTI_TENSOR_VARIANTS:
                for dtype in dtypes:
                    adam_steps.step_flat(self._flat_group(index, dtype), group, self.state,
                                         self.written_gradients, name)
            else:
                adam_steps.step_per_tensor(group, self.state, self.kernel_arrays, name)
        return loss

    def _flat_group(self, index: int, dtype: torch.dtype) -> FlatGroup:
        """Group ``index``'s flat buffers of ``dtype``, made (and watched by the gradient
        hooks) at their first step."""
        flat = self.flat_groups.get((index, dtype))
        if flat is None:
            params = [p for p in self.param_groups[index]["params"] if p.dtype == dtype]
            flat = self.flat_groups[(index, dtype)] = flatten(params, self.kernel_arrays)
            self.written_gradients.watch(params)
        return flat

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad``, except for gradients held in a flat buffer (variant
        ``v4_multi_tensor``): those are zeroed in place and kept, so that the next backward
        pass accumulates into the buffer again. With ``set_to_none=True`` they count as
        absent until backward writes into them, so a parameter that then receives no
        gradient is skipped by :meth:`step`, as torch skips a ``None`` gradient."""
        check_bool("set_to_none", set_to_none)
        flat_ids: set[int] = set()
        for flat in self.flat_groups.values():
            flat.buffers["grad"].zero_()
            flat_ids |= flat.ids
            if not all(map(operator.is_, map(_GRAD, flat.params), flat.slots["grad"])):
                for p, slot in zip(flat.params, flat.slots["grad"], strict=True):
                    if p.grad is not None and p.grad.data_ptr() != slot.data_ptr():
                        self._zero_one(p, set_to_none)  # a gradient outside the buffer
        if set_to_none:
            self.written_gradients.clear()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None and id(p) not in flat_ids:
                    self._zero_one(p, set_to_none)

    @staticmethod
    def _zero_one(p: torch.Tensor, set_to_none: bool) -> None:
        if set_to_none:
            p.grad = None
        else:
            p.grad.detach_()
            p.grad.zero_()

    def load_state_dict(self, state_dict: dict) -> None:
        """torch's ``load_state_dict``, keeping the moments and master weights float32 (torch
        casts floating-point state to the parameter's dtype, which would round them). Every
        moment is checked against its parameter first
        (:func:`gpudl.optim.tensors.check_loaded_state`)."""
        check_loaded_state(type(self).__name__, self, state_dict, FP32_STATE)
        super().load_state_dict(state_dict)
        ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for saved_id, p in zip(ids, params, strict=True):
            saved = state_dict["state"].get(saved_id, {})
            for key in FP32_STATE:
                if key in saved:
                    self.state[p][key] = saved[key].to(device=p.device, dtype=torch.float32,
                                                       copy=True)


class AdamW(Adam):
    """``torch.optim.AdamW``: Adam with decoupled weight decay (default 0.01)."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None,
                 capturable: bool = False, differentiable: bool = False,
                 fused: bool | None = None, variant: str = optim_kernels.DEFAULT_VARIANT) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, variant=variant)
