"""``torch.optim.Adam`` and ``AdamW`` whose step runs the book's Adam kernels, per tensor or in
one launch per parameter group over flat buffers.

Book section: *Chapter 4, "Multi-tensor: one launch for the whole model"* and *"What a launch
costs"*.

``multi_tensor`` (the default variant) launches one kernel per parameter group: at its first
step it moves the group's parameters, gradients and moments into flat buffers, one per kind,
with every tensor a view into them (a :class:`FlatGroup`); a group of one contiguous parameter
keeps it where it is, as its own flat buffer. Backward passes then accumulate gradients
straight into the flat gradient buffer, and :meth:`Adam.zero_grad` zeroes it in place instead
of setting gradients to ``None``. The other variants launch once per parameter tensor.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import torch

from gpudl.checks import check_bool, check_choice, check_equal, check_tensor
from gpudl.interop import KernelArrays
from gpudl.kernels import optim as kernels
from gpudl.optim.tensors import (
    LOW_PRECISION,
    adam_betas,
    array_cache,
    cached_adam_scalars,
    check_group,
    check_loaded_state,
    check_params_argument,
    checked_gradient,
    hyperparameter,
    kernel_array,
    refuse_torch_options,
    run_closure,
    staged,
)

__all__ = ["Adam", "AdamW", "FlatGroup", "adopt"]

_FP32_STATE = ("exp_avg", "exp_avg_sq", "master")  # float32 whatever the parameter's dtype
_KINDS = ("param", "grad", "exp_avg", "exp_avg_sq", "master")
_GRAD = operator.attrgetter("grad")
_DATA_PTR = operator.methodcaller("data_ptr")


@dataclass
class FlatGroup:
    """One parameter group's tensors of one dtype, back to back in one flat buffer per kind
    (``_KINDS``; ``master`` only for low-precision parameters), and their step counts."""

    params: list[torch.Tensor]
    offsets: list[int]
    buffers: dict[str, torch.Tensor]
    slots: dict[str, list[torch.Tensor]]  # per kind, one view of the buffer per parameter
    arrays: dict[str, object]  # per kind, the whole buffer as a kernel array
    steps: torch.Tensor  # each parameter's step count; state["step"] is a view of one element
    step_views: list[torch.Tensor]
    ids: frozenset[int] = field(default_factory=frozenset)
    param_ptrs: list[int] = field(default_factory=list)
    #: True when every parameter has its state in the buffers, at one step count (the fast
    #: path)
    ready: bool = False

    def in_place(self) -> bool:
        """Is every gradient still its slot, and every parameter's data its slot? (C-level
        passes over the parameters: no Python runs per parameter.)"""
        return (all(map(operator.is_, map(_GRAD, self.params), self.slots["grad"]))
                and list(map(_DATA_PTR, self.params)) == self.param_ptrs)


def adopt(tensor: torch.Tensor, slot: torch.Tensor) -> bool:
    """Make ``slot`` hold ``tensor``'s values; False if ``tensor`` already is ``slot``."""
    check_equal("tensor.shape", check_tensor("tensor", tensor).shape, "slot.shape",
                check_tensor("slot", slot).shape)
    if tensor.data_ptr() == slot.data_ptr() and tensor.dtype == slot.dtype:
        return False
    slot.copy_(tensor)
    return True


class Adam(torch.optim.Optimizer):
    """``torch.optim.Adam`` (and, with ``decoupled_weight_decay``, AdamW) whose step runs
    ``gpudl.kernels.optim.VARIANTS[variant]``. Same arguments and checks as torch's (``lr``
    and each beta a number or a one-element tensor), except that ``amsgrad=True`` and torch's
    implementation switches (``foreach``, ``fused``, ``capturable``, ``differentiable``) are
    refused; ``variant`` is this book's. ``flat_groups`` maps a (group index, dtype) to its
    :class:`FlatGroup` (variant ``multi_tensor``); ``kernel_arrays`` keeps the kernel arrays
    made from the tensors (:class:`gpudl.interop.KernelArrays`)."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False,
                 variant: str = kernels.DEFAULT_VARIANT) -> None:
        refuse_torch_options(type(self).__name__, foreach=foreach, fused=fused,
                              capturable=capturable, differentiable=differentiable)
        check_params_argument(type(self).__name__, params)
        kernels.check_adam_hyper(hyperparameter("lr", lr), adam_betas(betas), eps, weight_decay)
        if amsgrad:
            raise ValueError("amsgrad=True is not implemented by gpudl.optim; use "
                             "torch.optim.Adam(amsgrad=True)")
        check_choice("variant", variant, kernels.VARIANTS)
        check_bool("maximize", maximize)
        check_bool("decoupled_weight_decay", decoupled_weight_decay)
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": False, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay, "variant": variant}
        self.flat_groups: dict[tuple[int, torch.dtype], FlatGroup] = {}
        # ids of flat-buffer parameters whose gradient slot holds a gradient to apply: set by
        # a post-accumulate hook when backward writes into the slot, cleared by zero_grad()
        self._has_grad: set[int] = set()
        self.kernel_arrays = KernelArrays()
        self._dtypes: dict[int, tuple[int, int, tuple[torch.dtype, ...]]] = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, refusing parameters the kernels cannot update."""
        super().add_param_group(param_group)
        index = len(self.param_groups) - 1
        check_group(self, (torch.float32, *LOW_PRECISION), kernels.check_adam_hyper,
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
        for name, empty in (("flat_groups", dict), ("_has_grad", set), ("_dtypes", dict),
                            ("kernel_arrays", KernelArrays)):  # (absent when unpickled)
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
        check_choice("variant", group["variant"], kernels.VARIANTS)
        low = [d for d in dtypes if d in LOW_PRECISION]
        if low and group["variant"] not in ("fused", "multi_tensor"):
            raise ValueError(f"{sorted(map(str, low))} parameters need variant 'fused' or "
                             f"'multi_tensor' (float32 master weights), got "
                             f"{group['variant']!r}")

    def _scalars(self, group: dict, step: int) -> kernels.AdamScalars:
        betas = adam_betas(group["betas"])
        return cached_adam_scalars(step, hyperparameter("lr", group["lr"]), tuple(betas),
                                   group["eps"], group["weight_decay"],
                                   group["decoupled_weight_decay"], group["maximize"])

    def _init_state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
            state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
        if p.dtype in LOW_PRECISION and "master" not in state:
            state["master"] = p.detach().to(torch.float32)
        return state

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step for every parameter that has a gradient; returns the closure's
        loss."""
        loss = run_closure(closure)
        for index, group in enumerate(self.param_groups):
            dtypes = self._group_dtypes(index)
            self._check_group(group, dtypes)
            if group["variant"] == "multi_tensor":
                for dtype in dtypes:
                    self._step_flat(index, group, dtype)
            else:
                self._step_per_tensor(group)
        return loss

    def _step_per_tensor(self, group: dict) -> None:
        launch, arrays = kernels.VARIANTS[group["variant"]], self.kernel_arrays
        for p in group["params"]:
            if p.grad is None:
                continue
            g = checked_gradient(p, type(self).__name__)
            state = self._init_state(p)
            state["step"] += 1
            k = self._scalars(group, int(state["step"].item()))
            tensors = {"param": p, "grad": g, "exp_avg": state["exp_avg"],
                       "exp_avg_sq": state["exp_avg_sq"], "master": state.get("master")}
            with staged(tensors, ("param", "exp_avg", "exp_avg_sq", "master")) as t:
                a = {kind: kernel_array(arrays, x, kind) for kind, x in t.items()
                     if x is not None}
                if p.dtype in LOW_PRECISION:
                    kernels.launch_mixed(a["param"], a["grad"], a["master"], a["exp_avg"],
                                         a["exp_avg_sq"], k)
                else:
                    launch(a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], k)

    def _flatten(self, index: int, group: dict, dtype: torch.dtype) -> FlatGroup:
        """Move the group's ``dtype`` parameters into flat buffers, with room for their
        gradients and state (adopted at their first step)."""
        params = [p for p in group["params"] if p.dtype == dtype]
        offsets = [0]
        for p in params:
            offsets.append(offsets[-1] + p.numel())
        total, device = offsets.pop(), params[0].device
        kinds = _KINDS if dtype in LOW_PRECISION else _KINDS[:-1]
        buffers = {kind: torch.zeros(total, device=device,
                                     dtype=dtype if kind in ("param", "grad") else torch.float32)
                   for kind in kinds if kind != "param"}
        # One contiguous parameter is its own flat buffer: it stays where it is, so that a view
        # of it stays a view (ZeRO's shard is a slice of the flat parameters, gathered in place)
        alone = len(params) == 1 and params[0].is_contiguous()
        buffers["param"] = params[0].detach().view(-1) if alone else torch.zeros(
            total, device=device, dtype=dtype)
        slots = {kind: [buffers[kind][o:o + p.numel()].view_as(p)
                        for o, p in zip(offsets, params, strict=True)] for kind in kinds}
        for i, p in enumerate(params):
            adopt(p.detach(), slots["param"][i])
            p.data = slots["param"][i]
            p.register_post_accumulate_grad_hook(lambda q: self._has_grad.add(id(q)))
            if "master" in slots:
                slots["master"][i].copy_(p.detach())
        arrays = {kind: kernel_array(self.kernel_arrays, buffers[kind], kind) for kind in kinds}
        steps = torch.zeros(len(params))  # on the CPU, as torch keeps "step"
        flat = self.flat_groups[(index, dtype)] = FlatGroup(
            params, offsets, buffers, slots, arrays, steps, list(steps.unbind()),
            frozenset(map(id, params)), [slot.data_ptr() for slot in slots["param"]])
        return flat

    def _launch_flat(self, flat: FlatGroup, a: dict[str, object], k: kernels.AdamScalars) -> None:
        if "master" in a:
            kernels.launch_mixed(a["param"], a["grad"], a["master"], a["exp_avg"], a["exp_avg_sq"],
                            k)
        else:
            kernels.launch_multi_tensor(a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], k)

    def _step_flat(self, index: int, group: dict, dtype: torch.dtype) -> None:
        flat = self.flat_groups.get((index, dtype)) or self._flatten(index, group, dtype)
        if flat.ready and flat.ids <= self._has_grad and flat.in_place():
            flat.steps += 1  # every parameter's state["step"], in one operation
            k = self._scalars(group, int(flat.step_views[0].item()))
            self._launch_flat(flat, flat.arrays, k)
        else:
            self._step_flat_general(group, flat)

    def _step_flat_general(self, group: dict, flat: FlatGroup) -> None:
        """Adopt what is not in the flat buffers yet (new gradient tensors, replaced data,
        state from a checkpoint or created now), then launch once per run of consecutive
        parameters with a gradient and the same step count."""
        slots, updated = flat.slots, []
        for i, p in enumerate(flat.params):
            if p.grad is None:
                continue
            if adopt(checked_gradient(p, type(self).__name__), slots["grad"][i]):
                p.grad = slots["grad"][i]  # a new gradient tensor: copied into the slot
                self._has_grad.add(id(p))
            if id(p) not in self._has_grad:
                continue  # zeroed by zero_grad() and untouched by backward since: skip it
            if adopt(p.detach(), slots["param"][i]):  # p.data was replaced: take it back
                p.data = slots["param"][i]
            state = self._init_state(p)
            for kind in _FP32_STATE:
                if kind in slots and adopt(state[kind], slots[kind][i]):
                    state[kind] = slots[kind][i]
            if state["step"] is not flat.step_views[i]:  # new, or loaded: one counter now
                flat.step_views[i].copy_(state["step"])
                state["step"] = flat.step_views[i]
            updated.append(i)
        if not updated:
            return
        flat.steps[updated] += 1
        steps = flat.steps.tolist()
        runs: list[list[int]] = []  # [first, last + 1, step] of parameters updated together
        for i in updated:
            if runs and runs[-1][1] == i and runs[-1][2] == steps[i]:
                runs[-1][1] = i + 1
            else:
                runs.append([i, i + 1, int(steps[i])])
        total = flat.buffers["param"].numel()
        for first, end, step in runs:
            start, stop = flat.offsets[first], flat.offsets[end - 1] + flat.params[
                end - 1].numel()
            a = flat.arrays if stop - start == total else {
                kind: array[start:stop] for kind, array in flat.arrays.items()}
            self._launch_flat(flat, a, self._scalars(group, step))
        flat.ready = len(updated) == len(flat.params) and len(set(steps)) == 1

    def zero_grad(self, set_to_none: bool = True) -> None:
        """torch's ``zero_grad``, except for gradients held in a flat buffer (variant
        ``multi_tensor``): those are zeroed in place and kept, so that the next backward
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
            self._has_grad.clear()
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
        check_loaded_state(type(self).__name__, self, state_dict, _FP32_STATE)
        super().load_state_dict(state_dict)
        ids = chain.from_iterable(g["params"] for g in state_dict["param_groups"])
        params = chain.from_iterable(g["params"] for g in self.param_groups)
        for saved_id, p in zip(ids, params, strict=True):
            saved = state_dict["state"].get(saved_id, {})
            for key in _FP32_STATE:
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
                 fused: bool | None = None, variant: str = kernels.DEFAULT_VARIANT) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, variant=variant)
