"""Flat buffers: one parameter group's tensors of one dtype back to back, one buffer per kind
(parameters, gradients, the two moments, master weights), every tensor a view of its slot.

Book section: *Chapter 4, "Multi-tensor: one launch for the whole model"*.

:func:`flatten` moves a group's parameters into new buffers (a :class:`FlatGroup`) and makes
each parameter's ``data`` a view of its slot; a group of one contiguous parameter keeps it
where it is, as its own flat buffer. :func:`adopt` copies a tensor that is not its slot (a new
gradient, replaced data, a loaded moment) into it. :meth:`FlatGroup.arrays_for` gives the
kernel arrays of a run of consecutive parameters, so that one launch updates them all.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from gpudl.checks import check_equal, check_instance, check_int, check_tensor
from gpudl.interop import KernelArrays
from gpudl.optim.tensors import LOW_PRECISION, kernel_array

__all__ = ["FP32_STATE", "KINDS", "FlatGroup", "adopt", "flatten"]

#: The kinds of state kept float32 whatever the parameter's dtype.
FP32_STATE = ("exp_avg", "exp_avg_sq", "master")
#: The kinds of flat buffer, in order (``master`` only for low-precision parameters).
KINDS = ("param", "grad", "exp_avg", "exp_avg_sq", "master")
_GRAD = operator.attrgetter("grad")
_DATA_PTR = operator.methodcaller("data_ptr")


@dataclass
class FlatGroup:
    """One parameter group's tensors of one dtype, back to back in one flat buffer per kind
    (:data:`KINDS`; ``master`` only for low-precision parameters), and their step counts."""

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

    def arrays_for(self, first: int, end: int) -> dict[str, object]:
        """The kernel arrays of parameters ``first`` to ``end - 1``, one per kind: the whole
        buffers when that is every parameter, slices of them otherwise."""
        check_int("first", first, minimum=0, maximum=len(self.params) - 1)
        check_int("end", end, minimum=first + 1, maximum=len(self.params))
        start = self.offsets[first]
        stop = self.offsets[end - 1] + self.params[end - 1].numel()
        if stop - start == self.buffers["param"].numel():
            return self.arrays
        return {kind: array[start:stop] for kind, array in self.arrays.items()}


def adopt(tensor: torch.Tensor, slot: torch.Tensor) -> bool:
    """Make ``slot`` hold ``tensor``'s values; False if ``tensor`` already is ``slot``."""
    check_equal("tensor.shape", check_tensor("tensor", tensor).shape, "slot.shape",
                check_tensor("slot", slot).shape)
    if tensor.data_ptr() == slot.data_ptr() and tensor.dtype == slot.dtype:
        return False
    slot.copy_(tensor)
    return True


def flatten(params: Sequence[torch.Tensor], kernel_arrays: KernelArrays) -> FlatGroup:
    """Move ``params`` (one dtype) into flat buffers, each parameter's ``data`` a view of its
    slot, with zeroed room for their gradients and moments (adopted at their first step) and
    float32 master weights for low-precision parameters; the buffers' kernel arrays come from
    ``kernel_arrays``."""
    check_instance("params", params, Sequence)
    check_instance("kernel_arrays", kernel_arrays, KernelArrays)
    params = list(params)
    if not params:
        raise ValueError("params must hold at least one parameter, got none")
    for i, p in enumerate(params):
        check_tensor(f"params[{i}]", p)
    dtype = params[0].dtype
    other = sorted({str(p.dtype) for p in params if p.dtype != dtype})
    if other:
        raise ValueError(f"params must share one dtype, got {dtype} and {other}")
    offsets = [0]
    for p in params:
        offsets.append(offsets[-1] + p.numel())
    total, device = offsets.pop(), params[0].device
    kinds = KINDS if dtype in LOW_PRECISION else KINDS[:-1]
    buffers = {kind: torch.zeros(total, device=device,
                                 dtype=dtype if kind in ("param", "grad") else torch.float32)
               for kind in kinds if kind != "param"}
    # One contiguous parameter is its own flat buffer: it stays where it is, so that a view of
    # it stays a view (ZeRO's shard is a slice of the flat parameters, gathered in place)
    alone = len(params) == 1 and params[0].is_contiguous()
    buffers["param"] = params[0].detach().view(-1) if alone else torch.zeros(
        total, device=device, dtype=dtype)
    slots = {kind: [buffers[kind][o:o + p.numel()].view_as(p)
                    for o, p in zip(offsets, params, strict=True)] for kind in kinds}
    for i, p in enumerate(params):
        adopt(p.detach(), slots["param"][i])
        p.data = slots["param"][i]
        if "master" in slots:
            slots["master"][i].copy_(p.detach())
    arrays = {kind: kernel_array(kernel_arrays, buffers[kind], kind) for kind in kinds}
    steps = torch.zeros(len(params))  # on the CPU, as torch keeps "step"
    return FlatGroup(params, offsets, buffers, slots, arrays, steps, list(steps.unbind()),
                     frozenset(map(id, params)), [slot.data_ptr() for slot in slots["param"]])
