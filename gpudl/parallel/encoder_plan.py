"""The Megatron split of one encoder block, as a plan for DTensor's ``parallelize_module``.

Book section: *Chapter 6, "The same with DTensor"*. Tensor parallelism
(:mod:`gpudl.parallel.tensor`) and the two-dimensional mesh (:mod:`gpudl.parallel.mesh`) both
split the encoder by it.
"""

from __future__ import annotations

from fnmatch import fnmatch

import torch
from torch.distributed.tensor.parallel import ColwiseParallel, ParallelStyle, RowwiseParallel

from gpudl.checks import check_instance

__all__ = ["DTENSOR_PLAN", "check_dtensor_plan"]

# [dtensor-plan]
#: The Megatron split of one :class:`gpudl.models.EncoderBlock` for ``parallelize_module``.
DTENSOR_PLAN: dict[str, ParallelStyle] = {
    "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
    "attn.out": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(),
}
# [/dtensor-plan]


def check_dtensor_plan(module: torch.nn.Module, plan: dict[str, ParallelStyle]) -> None:
    """``ValueError`` for a plan key that names no submodule of ``module``.

    ``parallelize_module`` matches each key, dot-separated token by token with ``fnmatch``
    wildcards, against the submodule names, and only *warns* about a key that matches nothing:
    a typo would leave that layer whole on every rank, silently."""
    check_instance("module", module, torch.nn.Module)
    check_instance("plan", plan, dict)
    names = [name.split(".") for name, _ in module.named_modules() if name]
    for key in plan:
        tokens = key.split(".")
        if not any(len(name) == len(tokens) and all(map(fnmatch, name, tokens))
                   for name in names):
            raise ValueError(f"plan key {key!r} matches no submodule of "
                             f"{type(module).__name__}; its submodules are "
                             f"{['.'.join(n) for n in names]}")
