"""``torch.optim`` optimizers whose ``step()`` runs the book's kernels: SGD, Adam and AdamW.

Book section: Chapter 4, "Kernels on a framework's tensors", "One launch for the whole model"
and "What a launch costs".

:class:`SGD`, :class:`Adam` and :class:`AdamW` are :class:`torch.optim.Optimizer` subclasses with
torch's constructor signatures and checks, used exactly as torch's are (parameter groups,
``zero_grad``, a ``closure``, learning-rate schedulers, ``state_dict`` and ``load_state_dict``,
whose layout is torch's). Their ``step()`` launches :mod:`gpudl.kernels.optim`'s kernels on the
tensors' own memory (``gpudl.interop.as_kernel_array``): nothing is copied.

Adam and AdamW take a ``variant``, one of :data:`gpudl.kernels.optim.VARIANTS`. ``unfused``,
``fused`` and ``shared`` launch their kernels once per parameter tensor. ``multi_tensor`` (the
default) launches one kernel per parameter group: at its first step it moves the group's
parameters, gradients and moments into flat buffers, one per kind, with every tensor a view
into them (PyTorch FSDP's flat parameters, DeepSpeed's and Megatron's contiguous buffers do
the same); a group of one contiguous parameter keeps it where it is, as its own flat buffer.
Backward passes then accumulate gradients straight into the flat gradient buffer, and
:meth:`Adam.zero_grad` zeroes it in place instead of setting gradients to ``None``.

The host's work per step is kept out of the way of the GPU's. Kernel arrays are made once per
tensor memory and kept (:class:`gpudl.interop.KernelArrays`), the kernel scalars once per step
and hyperparameters. A flat group keeps one step counter for its parameters: each parameter's
``state["step"]`` (torch's layout, in ``state_dict`` too) is a view of one element of it, and
one tensor operation advances them all. Once every parameter of a group has its state in the
flat buffers, at one step count, ``step()`` checks in C-level passes over the parameters that
each gradient and parameter is still its view of the buffers, and launches once: no Python
runs per parameter. Anything else (a new gradient tensor, a parameter without a gradient, a
state loaded from a checkpoint) takes the general path, which adopts it into the buffers.

Parameters may be float32, or float16 or bfloat16 with the ``fused`` or ``multi_tensor``
variant: then the optimizer keeps float32 master weights (state ``"master"``) and moments,
and writes the parameters rounded to nearest even (mixed precision). The kernels run on the
default CUDA stream, where PyTorch also runs its work unless it is told to use another one.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import chain
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import torch

from gpudl.interop import KernelArrays, check_device
from gpudl.kernels import optim as ko

__all__ = ["SGD", "Adam", "AdamW", "LOW_PRECISION", "traffic_table"]

#: Parameter dtypes that Adam updates through float32 master weights.
LOW_PRECISION = (torch.float16, torch.bfloat16)
_FP32_STATE = ("exp_avg", "exp_avg_sq", "master")  # float32 whatever the parameter's dtype


def _number(name: str, value: Any) -> Any:
    """A hyperparameter as torch accepts it: a number, or a one-element tensor (read at every
    step, so that a scheduler's in-place change is seen), returned as a float."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.dtype.is_floating_point:
            raise ValueError(f"a tensor {name} must hold one floating-point value, got "
                             f"{value.dtype} of shape {tuple(value.shape)}")
        return float(value.item())
    return value


def _betas(betas: Any) -> Any:
    """Adam's betas with one-element tensors read as floats (anything else as given, for
    :func:`gpudl.kernels.optim.check_adam_hyper` to check)."""
    if isinstance(betas, tuple | list) and len(betas) == 2:
        return (_number("betas[0]", betas[0]), _number("betas[1]", betas[1]))
    return betas


def _refuse_torch_options(name: str, **options: Any) -> None:
    """Refuse torch's implementation switches when they are on: they select torch's own code
    paths (``None`` or ``False`` asks for none of them, and is accepted)."""
    for option, value in options.items():
        if not (value is None or value is False):
            raise ValueError(f"{name} does not support {option}={value!r}: it selects one of "
                             "torch's implementations, and gpudl.optim runs its own kernels"
                             + (" (choose one with variant=...)" if name != "SGD" else ""))


def _run_closure(closure: Callable[[], Any] | None) -> Any:
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def _check_params(name: str, group: dict, dtypes: tuple[torch.dtype, ...]) -> None:
    for p in group["params"]:
        if p.dtype not in dtypes:
            raise TypeError(f"{name} needs parameters of dtype {[str(d) for d in dtypes]}, "
                            f"got {p.dtype}")
        check_device(p, "parameters")


def _grad(p: torch.Tensor, name: str) -> torch.Tensor:
    g = p.grad
    if g.is_sparse:
        raise TypeError(f"{name} does not support sparse gradients")
    if g.dtype != p.dtype or g.shape != p.shape:
        raise ValueError(f"a gradient must match its parameter: parameter {p.dtype} "
                         f"{tuple(p.shape)}, gradient {g.dtype} {tuple(g.shape)}")
    return g


def _kernel(arrays: KernelArrays, t: torch.Tensor, name: str) -> object:
    """A tensor as a flat kernel array (made once per memory, kept in ``arrays``); bfloat16
    through its int16 bit pattern."""
    flat = t.reshape(-1) if t.is_contiguous() else t
    return arrays.get(flat.view(torch.int16) if t.dtype == torch.bfloat16 else flat, name)


@lru_cache(maxsize=256)
def _adam_scalars(step: int, lr: float, betas: tuple, eps: float, weight_decay: float,
                  decoupled: bool, maximize: bool) -> ko.AdamScalars:
    """:func:`gpudl.kernels.optim.adam_scalars`, computed once per step and hyperparameters."""
    return ko.adam_scalars(step, lr, betas, eps, weight_decay, decoupled, maximize)


def _array_cache(params: Iterable[torch.Tensor]) -> KernelArrays:
    """Room for the arrays of every parameter, gradient and state tensor, twice over."""
    return KernelArrays(capacity=16 * sum(1 for _ in params) + 64)


class SGD(torch.optim.Optimizer):
    """``torch.optim.SGD`` (momentum, dampening, weight decay, Nesterov, maximize; ``lr`` and
    ``weight_decay`` a number or a one-element tensor) whose step is
    ``gpudl.kernels.optim.sgd_kernel`` (``sgd_momentum_kernel`` with momentum), one launch per
    float32 parameter. torch's ``foreach``, ``fused`` and ``differentiable`` are refused."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3, momentum: float = 0,
                 dampening: float = 0, weight_decay: float | torch.Tensor = 0,
                 nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None, differentiable: bool = False,
                 fused: bool | None = None) -> None:
        _refuse_torch_options("SGD", foreach=foreach, fused=fused,
                              differentiable=differentiable)
        ko.check_sgd_hyper(_number("lr", lr), momentum, dampening,
                           _number("weight_decay", weight_decay), nesterov)
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize}
        self._arrays = KernelArrays()
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, refusing parameters the kernel cannot update."""
        super().add_param_group(param_group)
        _check_params("SGD", self.param_groups[-1], (torch.float32,))
        self._arrays.capacity = _array_cache(self._all_params()).capacity

    def _all_params(self) -> Iterable[torch.Tensor]:
        return chain.from_iterable(g["params"] for g in self.param_groups)

    @torch.no_grad()
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One SGD step for every parameter that has a gradient; returns the closure's loss."""
        loss = _run_closure(closure)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = _grad(p, "SGD")
                state = self.state[p]
                buf = state.get("momentum_buffer")
                first = buf is None
                k = ko.sgd_scalars(first, _number("lr", group["lr"]), group["momentum"],
                                   group["dampening"],
                                   _number("weight_decay", group["weight_decay"]),
                                   group["nesterov"], group["maximize"])
                if k.has_momentum and first:  # poisoned: the kernel must write every element
                    buf = state["momentum_buffer"] = torch.full_like(p, float("nan"))
                arrays = self._arrays
                ko.launch_sgd(_kernel(arrays, p, "param"), _kernel(arrays, g, "grad"),
                              _kernel(arrays, buf, "momentum_buffer") if k.has_momentum
                              else None, k)
        return loss


_KINDS = ("param", "grad", "exp_avg", "exp_avg_sq", "master")
_GRAD = operator.attrgetter("grad")
_DATA_PTR = operator.methodcaller("data_ptr")


@dataclass
class _Flat:
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
    #: every parameter has its state in the buffers, at one step count: the fast path
    ready: bool = False

    def in_place(self) -> bool:
        """Is every gradient still its slot, and every parameter's data its slot? (C-level
        passes over the parameters: no Python runs per parameter.)"""
        return (all(map(operator.is_, map(_GRAD, self.params), self.slots["grad"]))
                and list(map(_DATA_PTR, self.params)) == self.param_ptrs)


def _adopt(tensor: torch.Tensor, slot: torch.Tensor) -> bool:
    """Make ``slot`` hold ``tensor``'s values; False if ``tensor`` already is ``slot``."""
    if tensor.data_ptr() == slot.data_ptr() and tensor.dtype == slot.dtype:
        return False
    slot.copy_(tensor)
    return True


class Adam(torch.optim.Optimizer):
    """``torch.optim.Adam`` (and, with ``decoupled_weight_decay``, AdamW) whose step runs
    ``gpudl.kernels.optim.VARIANTS[variant]``. Same arguments and checks as torch's (``lr``
    and each beta a number or a one-element tensor), except that ``amsgrad=True`` and torch's
    implementation switches (``foreach``, ``fused``, ``capturable``, ``differentiable``) are
    refused; ``variant`` is this book's."""

    def __init__(self, params: Iterable, lr: float | torch.Tensor = 1e-3,
                 betas: tuple[float | torch.Tensor, float | torch.Tensor] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0, amsgrad: bool = False, *,
                 foreach: bool | None = None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused: bool | None = None,
                 decoupled_weight_decay: bool = False,
                 variant: str = ko.DEFAULT_VARIANT) -> None:
        _refuse_torch_options(type(self).__name__, foreach=foreach, fused=fused,
                              capturable=capturable, differentiable=differentiable)
        ko.check_adam_hyper(_number("lr", lr), _betas(betas), eps, weight_decay)
        if amsgrad:
            raise ValueError("amsgrad=True is not implemented by gpudl.optim; use "
                             "torch.optim.Adam(amsgrad=True)")
        if variant not in ko.VARIANTS:
            raise ValueError(f"variant must be one of {list(ko.VARIANTS)}, got {variant!r}")
        defaults = {"lr": lr, "betas": tuple(betas), "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": False, "maximize": maximize,
                    "decoupled_weight_decay": decoupled_weight_decay, "variant": variant}
        self._flats: dict[tuple[int, torch.dtype], _Flat] = {}
        # ids of flat-buffer parameters whose gradient slot holds a gradient to apply: set by
        # a post-accumulate hook when backward writes into the slot, cleared by zero_grad()
        self._has_grad: set[int] = set()
        self._arrays = KernelArrays()
        self._dtypes: dict[int, tuple[int, int, tuple[torch.dtype, ...]]] = {}
        super().__init__(params, defaults)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group``, refusing parameters the kernels cannot update."""
        super().add_param_group(param_group)
        _check_params(type(self).__name__, self.param_groups[-1], (torch.float32, *LOW_PRECISION))
        self._check_group(self.param_groups[-1], self._group_dtypes(len(self.param_groups) - 1))
        self._arrays.capacity = _array_cache(
            chain.from_iterable(g["params"] for g in self.param_groups)).capacity

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        for group in self.param_groups:  # groups saved by torch.optim.Adam lack these
            group.setdefault("maximize", False)
            group.setdefault("decoupled_weight_decay", self.defaults["decoupled_weight_decay"])
            group.setdefault("variant", self.defaults["variant"])
        for name, empty in (("_flats", dict), ("_has_grad", set), ("_dtypes", dict),
                            ("_arrays", KernelArrays)):  # (absent when unpickled)
            self.__dict__.setdefault(name, empty())
        for flat in self._flats.values():  # a new state: adopt it at the next step
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
        if group["variant"] not in ko.VARIANTS:
            raise ValueError(f"variant must be one of {list(ko.VARIANTS)}, got "
                             f"{group['variant']!r}")
        low = [d for d in dtypes if d in LOW_PRECISION]
        if low and group["variant"] not in ("fused", "multi_tensor"):
            raise ValueError(f"{sorted(map(str, low))} parameters need variant 'fused' or "
                             f"'multi_tensor' (float32 master weights), got "
                             f"{group['variant']!r}")

    def _scalars(self, group: dict, step: int) -> ko.AdamScalars:
        betas = _betas(group["betas"])
        return _adam_scalars(step, _number("lr", group["lr"]), tuple(betas), group["eps"],
                             group["weight_decay"], group["decoupled_weight_decay"],
                             group["maximize"])

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
        loss = _run_closure(closure)
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
        launch, arrays = ko.VARIANTS[group["variant"]], self._arrays
        for p in group["params"]:
            if p.grad is None:
                continue
            g = _grad(p, type(self).__name__)
            state = self._init_state(p)
            state["step"] += 1
            k = self._scalars(group, int(state["step"].item()))
            m = _kernel(arrays, state["exp_avg"], "exp_avg")
            v = _kernel(arrays, state["exp_avg_sq"], "exp_avg_sq")
            if p.dtype in LOW_PRECISION:
                ko.launch_mixed(_kernel(arrays, p, "param"), _kernel(arrays, g, "grad"),
                                _kernel(arrays, state["master"], "master"), m, v, k)
            else:
                launch(_kernel(arrays, p, "param"), _kernel(arrays, g, "grad"), m, v, k)

    def _flatten(self, index: int, group: dict, dtype: torch.dtype) -> _Flat:
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
            _adopt(p.detach(), slots["param"][i])
            p.data = slots["param"][i]
            p.register_post_accumulate_grad_hook(lambda q: self._has_grad.add(id(q)))
            if "master" in slots:
                slots["master"][i].copy_(p.detach())
        arrays = {kind: _kernel(self._arrays, buffers[kind], kind) for kind in kinds}
        steps = torch.zeros(len(params))  # on the CPU, as torch keeps "step"
        flat = self._flats[(index, dtype)] = _Flat(
            params, offsets, buffers, slots, arrays, steps, list(steps.unbind()),
            frozenset(map(id, params)), [slot.data_ptr() for slot in slots["param"]])
        return flat

    def _launch_flat(self, flat: _Flat, a: dict[str, object], k: ko.AdamScalars) -> None:
        if "master" in a:
            ko.launch_mixed(a["param"], a["grad"], a["master"], a["exp_avg"], a["exp_avg_sq"],
                            k)
        else:
            ko.launch_multi_tensor(a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], k)

    def _step_flat(self, index: int, group: dict, dtype: torch.dtype) -> None:
        flat = self._flats.get((index, dtype)) or self._flatten(index, group, dtype)
        if flat.ready and flat.ids <= self._has_grad and flat.in_place():
            flat.steps += 1  # every parameter's state["step"], in one operation
            k = self._scalars(group, int(flat.step_views[0].item()))
            self._launch_flat(flat, flat.arrays, k)
        else:
            self._step_flat_general(group, flat)

    def _step_flat_general(self, group: dict, flat: _Flat) -> None:
        """Adopt what is not in the flat buffers yet (new gradient tensors, replaced data,
        state from a checkpoint or created now), then launch once per run of consecutive
        parameters with a gradient and the same step count."""
        slots, updated = flat.slots, []
        for i, p in enumerate(flat.params):
            if p.grad is None:
                continue
            if _adopt(_grad(p, type(self).__name__), slots["grad"][i]):
                p.grad = slots["grad"][i]  # a new gradient tensor: copied into the slot
                self._has_grad.add(id(p))
            if id(p) not in self._has_grad:
                continue  # zeroed by zero_grad() and untouched by backward since: skip it
            if _adopt(p.detach(), slots["param"][i]):  # p.data was replaced: take it back
                p.data = slots["param"][i]
            state = self._init_state(p)
            for kind in _FP32_STATE:
                if kind in slots and _adopt(state[kind], slots[kind][i]):
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
        flat_ids: set[int] = set()
        for flat in self._flats.values():
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
        casts floating-point state to the parameter's dtype, which would round them)."""
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
                 fused: bool | None = None, variant: str = ko.DEFAULT_VARIANT) -> None:
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach,
                         maximize=maximize, capturable=capturable,
                         differentiable=differentiable, fused=fused,
                         decoupled_weight_decay=True, variant=variant)


# ------------------------------------------------------------------------------------------
# What each variant costs per step, counted on the simulator
# ------------------------------------------------------------------------------------------


def traffic_table(sizes: tuple[int, ...] = (200, 13, 64, 5),
                  variants: tuple[str, ...] = tuple(ko.VARIANTS)) -> list[dict]:
    """For one Adam step of a model whose parameter tensors have ``sizes`` elements: the
    kernel launches and the bytes of device ("global") and shared memory each variant's
    kernels access, counted access by access on the simulator
    (:func:`gpudl.kernels.optim.traffic`); run it through :func:`gpudl.trace.on_simulator`
    on a GPU. One row per variant: ``variant``, ``launches``, ``global_bytes``,
    ``shared_bytes``, ``params`` and the bytes per parameter."""
    n = sum(sizes)
    rows = []
    for variant in variants:
        gen = torch.Generator().manual_seed(0)
        params = [torch.randn(s, generator=gen).requires_grad_() for s in sizes]
        opt = Adam(params, lr=1e-3, variant=variant)
        for p in params:
            p.grad = torch.randn(p.shape, generator=gen)
        opt.step()  # the first step (flattens the multi_tensor buffers): not counted
        with ko.traffic() as t:
            opt.step()
        rows.append({"variant": variant, "launches": t.launches, "params": n,
                     "global_bytes": t.total("global"), "shared_bytes": t.total("shared"),
                     "global_bytes_per_param": t.total("global") / n,
                     "shared_bytes_per_param": t.total("shared") / n})
    return rows
