"""The paths of one Adam step: per tensor, and over a group's flat buffers, fast or general.

Book section: *Chapter 4, "Multi-tensor: one launch for the whole model"* and *"What a launch
costs"*.

:func:`step_per_tensor` launches ``VARIANTS[variant]`` once per parameter with a gradient
(variants ``v1_unfused``, ``v2_fused``, ``v3_shared``). :func:`step_flat` (variants
``v4_multi_tensor`` and ``v5_triton_multi_tensor``) launches once for a whole
:class:`~gpudl.optim.flat_buffers.FlatGroup` when nothing has changed since the last step;
otherwise :func:`step_flat_general` adopts what is new into the buffers
(:func:`adopt_parameter`) and launches once per run of consecutive parameters with a gradient
and one step count (:func:`step_runs`). ``states`` is the optimizer's ``state``, ``name`` its
class's name, for error messages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from itertools import pairwise

import torch

from gpudl.checks import check_int, check_ints, check_reals
from gpudl.interop import KernelArrays
from gpudl.kernels import optim as optim_kernels
from gpudl.optim.flat_buffers import FP32_STATE, FlatGroup, adopt
from gpudl.optim.gradient_hooks import WrittenGradients
from gpudl.optim.tensors import (
    LOW_PRECISION,
    adam_betas,
    cached_adam_scalars,
    checked_gradient,
    hyperparameter,
    kernel_array,
    staged,
)

__all__ = ["adam_state", "adopt_parameter", "group_scalars", "launch_flat", "step_flat",
           "step_flat_general", "step_per_tensor", "step_runs"]

States = defaultdict[torch.Tensor, dict]


def group_scalars(group: dict, step: int) -> optim_kernels.AdamScalars:
    """The kernel scalars of step ``step`` with ``group``'s hyperparameters."""
    betas = adam_betas(group["betas"])
    return cached_adam_scalars(step, hyperparameter("lr", group["lr"]), tuple(betas),
                               group["eps"], group["weight_decay"],
                               group["decoupled_weight_decay"], group["maximize"])


def adam_state(states: States, p: torch.Tensor) -> dict:
    """``p``'s state, created at its first step as torch creates it (``step`` a CPU tensor,
    float32 moments), with float32 master weights for a low-precision ``p``."""
    state = states[p]
    if not state:
        state["step"] = torch.tensor(0.0)
        state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
        state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
    if p.dtype in LOW_PRECISION and "master" not in state:
        state["master"] = p.detach().to(torch.float32)
    return state


def step_per_tensor(group: dict, states: States, arrays: KernelArrays, name: str) -> None:
    """One launch of ``group``'s variant per parameter with a gradient."""
    launch = optim_kernels.VARIANTS[group["variant"]]
    for p in group["params"]:
        if p.grad is None:
            continue
        g = checked_gradient(p, name)
        state = adam_state(states, p)
        state["step"] += 1
        k = group_scalars(group, int(state["step"].item()))
        tensors = {"param": p, "grad": g, "exp_avg": state["exp_avg"],
                   "exp_avg_sq": state["exp_avg_sq"], "master": state.get("master")}
        with staged(tensors, ("param", "exp_avg", "exp_avg_sq", "master")) as t:
            a = {kind: kernel_array(arrays, x, kind) for kind, x in t.items() if x is not None}
            if p.dtype in LOW_PRECISION:
                optim_kernels.launch_mixed(a["param"], a["grad"], a["master"], a["exp_avg"],
                                           a["exp_avg_sq"], k)
            else:
                launch(a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], k)


def launch_flat(a: dict[str, object], k: optim_kernels.AdamScalars,
                variant: str = "v4_multi_tensor") -> None:
    """One multi-tensor launch of ``variant`` on flat arrays (mixed precision when they hold
    ``master``)."""
    if "master" in a:
        optim_kernels.launch_mixed(a["param"], a["grad"], a["master"], a["exp_avg"],
                                   a["exp_avg_sq"], k)
    else:
        optim_kernels.VARIANTS[variant](a["param"], a["grad"], a["exp_avg"], a["exp_avg_sq"], k)


def _variant(group: dict) -> str:
    """The group's multi-tensor variant (the default where a group names none)."""
    return group.get("variant", optim_kernels.DEFAULT_VARIANT)


def step_flat(flat: FlatGroup, group: dict, states: States, written: WrittenGradients,
              name: str) -> None:
    """One launch for the whole group when every parameter's gradient was written and every
    tensor is still its slot; the general path otherwise."""
    if flat.ready and written.all_of(flat.ids) and flat.in_place():
        flat.steps += 1  # every parameter's state["step"], in one operation
        k = group_scalars(group, int(flat.step_views[0].item()))
        launch_flat(flat.arrays, k, _variant(group))
    else:
        step_flat_general(flat, group, states, written, name)


def adopt_parameter(flat: FlatGroup, i: int, states: States, written: WrittenGradients,
                    name: str) -> bool:
    """Bring parameter ``i`` of ``flat`` back into its slots: a new gradient tensor, replaced
    data, state created now or loaded from a checkpoint. False when it has no gradient to
    apply (none, or zeroed by ``zero_grad`` and untouched by backward since)."""
    check_int("i", i, minimum=0, maximum=len(flat.params) - 1)
    p, slots = flat.params[i], flat.slots
    if p.grad is None:
        return False
    if adopt(checked_gradient(p, name), slots["grad"][i]):
        p.grad = slots["grad"][i]  # a new gradient tensor: copied into the slot
        written.mark(p)
    if p not in written:
        return False
    if adopt(p.detach(), slots["param"][i]):  # p.data was replaced: take it back
        p.data = slots["param"][i]
    state = adam_state(states, p)
    for kind in FP32_STATE:
        if kind in slots and adopt(state[kind], slots[kind][i]):
            state[kind] = slots[kind][i]
    if state["step"] is not flat.step_views[i]:  # new, or loaded: one counter now
        flat.step_views[i].copy_(state["step"])
        state["step"] = flat.step_views[i]
    return True


def step_runs(updated: Sequence[int], steps: Sequence[float]) -> list[tuple[int, int, int]]:
    """``(first, end, step)`` for each run of consecutive indices of ``updated`` (increasing)
    whose ``steps`` are equal: parameters ``first`` to ``end - 1`` are updated by one launch
    at step ``step``."""
    updated = check_ints("updated", updated, minimum=0, minimum_count=0)
    steps = check_reals("steps", steps, minimum=0, minimum_count=0)
    if any(b <= a for a, b in pairwise(updated)):
        raise ValueError(f"updated must be increasing, got {list(updated)}")
    if updated and updated[-1] >= len(steps):
        raise ValueError(f"updated must index steps (of length {len(steps)}), got "
                         f"{updated[-1]}")
    runs: list[list[int]] = []
    for i in updated:
        if runs and runs[-1][1] == i and runs[-1][2] == steps[i]:
            runs[-1][1] = i + 1
        else:
            runs.append([i, i + 1, int(steps[i])])
    return [(first, end, step) for first, end, step in runs]


def step_flat_general(flat: FlatGroup, group: dict, states: States, written: WrittenGradients,
                      name: str) -> None:
    """Adopt what is not in the flat buffers yet, then launch once per run of consecutive
    parameters with a gradient and the same step count."""
    updated = [i for i in range(len(flat.params))
               if adopt_parameter(flat, i, states, written, name)]
    if not updated:
        return
    flat.steps[updated] += 1
    steps = flat.steps.tolist()
    for first, end, step in step_runs(updated, steps):
        launch_flat(flat.arrays_for(first, end), group_scalars(group, step), _variant(group))
    flat.ready = len(updated) == len(flat.params) and len(set(steps)) == 1
