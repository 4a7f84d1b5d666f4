"""Tensor parallelism's collectives: the operator pair ``f`` and ``g`` that mark where the ranks
communicate, a counter of their all-reduces, and the all-gather that puts a split tensor back
together.

Book section: *Chapter 6, "Tensor parallelism"*.

* ``f`` (:func:`copy_to_parallel`), before a column-parallel layer: identity forward, and
  all-reduce backward (each rank's input gradient is a partial sum over its output slice);
* ``g`` (:func:`reduce_from_parallel`), after a row-parallel layer: all-reduce forward,
  identity backward (Shoeybi et al. 2019).
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor.debug import CommDebugMode

__all__ = ["copy_to_parallel", "count_all_reduces", "gather", "reduce_from_parallel"]


class _CopyToParallel(torch.autograd.Function):
    """``f``: the input goes to every rank unchanged; the gradients come back summed."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: torch.distributed.ProcessGroup | None
                ) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


class _ReduceFromParallel(torch.autograd.Function):
    """``g``: the ranks' partial sums are added; the gradient goes to every rank unchanged."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: torch.distributed.ProcessGroup | None
                ) -> torch.Tensor:
        x = x.contiguous().clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad, None


def copy_to_parallel(x: torch.Tensor, group: torch.distributed.ProcessGroup | None = None
                     ) -> torch.Tensor:
    """``f``: identity forward, all-reduce of the gradient backward."""
    return _CopyToParallel.apply(x, group)


def reduce_from_parallel(x: torch.Tensor, group: torch.distributed.ProcessGroup | None = None
                         ) -> torch.Tensor:
    """``g``: all-reduce forward, identity backward."""
    return _ReduceFromParallel.apply(x, group)


@contextlib.contextmanager
def count_all_reduces() -> Iterator[dict[str, int]]:
    """Count the all-reduces run inside the block: the calls to
    ``torch.distributed.all_reduce`` (which the operators above look up at each call), with
    the ``bytes`` of their tensors, and DTensor's own, seen by its ``CommDebugMode`` (which
    counts operations, not bytes). The count is complete when the block ends."""
    counts: Counter = Counter()
    original = dist.all_reduce

    def counting(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        counts["all_reduce"] += 1
        counts["bytes"] += tensor.numel() * tensor.element_size()
        return original(tensor, *args, **kwargs)

    dist.all_reduce = counting
    try:
        with CommDebugMode() as mode:
            yield counts
    finally:
        dist.all_reduce = original
    counts["all_reduce"] += sum(n for op, n in mode.get_comm_counts().items()
                                if "all_reduce" in str(op))


def gather(t: torch.Tensor, dim: int, group: torch.distributed.ProcessGroup | None
           ) -> torch.Tensor:
    """Every rank's ``t`` of ``group``, concatenated along ``dim`` in rank order."""
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=dim)
