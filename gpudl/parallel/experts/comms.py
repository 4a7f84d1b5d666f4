"""Expert parallelism's collectives: the all-to-all that carries tokens to their experts' ranks
and back, the all-gather and reduce-scatter of the naive dispatch, and the reductions of the
gradients.

Book section: *Chapter 11, Two all-to-alls*.

* :func:`all_to_all`: each rank sends a different number of rows to each other rank (the
  rows of the experts that rank holds) and receives theirs: ``dist.all_to_all_single`` with
  uneven split sizes. Its gradient travels the same way back, with the splits swapped, so one
  autograd function serves the dispatch and the combine, forward and backward.
* :func:`exchange_counts`: before the rows, how many rows each rank will send each expert,
  so that every rank can size what it receives.
* :func:`gather_tokens` and :func:`scatter_tokens`: the naive dispatch, every rank's whole
  padded buffer all-gathered to every rank, the experts' outputs reduce-scattered back (each
  the other's gradient, as tensor parallelism's ``f`` and ``g`` are).
* :func:`reduce_gradients`: the sum over a group of ranks, divided by the number of ranks
  whose losses were summed, which for an expert is not the size of the group that holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from gpudl.checks import check_int, check_tensor

__all__ = ["all_to_all", "exchange_counts", "gather_tokens", "reduce_gradients",
           "scatter_tokens"]

# torch 2.13 named the collectives on flat tensors all_gather_single and reduce_scatter_single;
# earlier releases (a GPU machine may have one) call them all_gather_into_tensor and
# reduce_scatter_tensor. Both take (output, input).
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _exchange(x: torch.Tensor, out_splits: list[int], in_splits: list[int],
              group: dist.ProcessGroup | None) -> torch.Tensor:
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
    return out


class _AllToAll(torch.autograd.Function):
    """Rows out by ``in_splits``, rows in by ``out_splits``; backward, the reverse."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: list[int], in_splits: list[int],
                group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.splits, ctx.group = (out_splits, in_splits), group
        return _exchange(x, out_splits, in_splits, group)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        out_splits, in_splits = ctx.splits
        return _exchange(grad, in_splits, out_splits, ctx.group), None, None, None


def all_to_all(x: torch.Tensor, out_splits: Sequence[int], in_splits: Sequence[int],
               group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Send rows ``[sum(in_splits[:r]), sum(in_splits[:r + 1]))`` of ``x`` to rank ``r`` of
    ``group`` and receive ``out_splits[r]`` rows from it, stacked in rank order; the gradient
    goes back the same way. Called on every rank of the group, with splits that agree (what
    rank ``a`` sends rank ``b`` is what ``b`` receives from ``a``: :func:`exchange_counts`)."""
    check_tensor("x", x)
    size = dist.get_world_size(group)
    for name, splits in (("out_splits", out_splits), ("in_splits", in_splits)):
        if len(splits) != size:
            raise ValueError(f"{name} must give one size per rank of the group ({size}), got "
                             f"{list(splits)}")
    if sum(in_splits) != len(x):
        raise ValueError(f"in_splits must add up to the {len(x)} rows of x, got "
                         f"{list(in_splits)}")
    return _AllToAll.apply(x, list(out_splits), list(in_splits), group)


def exchange_counts(counts: torch.Tensor, group: dist.ProcessGroup | None = None
                    ) -> torch.Tensor:
    """``counts`` (experts,): how many rows this rank sends each expert, the experts spread
    in order over the ranks of ``group``, an equal number each. Returns (ranks, local experts):
    how many rows each rank sends each expert of this rank."""
    check_tensor("counts", counts, ndim=1)
    size = dist.get_world_size(group)
    if len(counts) % size:
        raise ValueError(f"counts must hold an equal number of experts per rank of the group "
                         f"({size}), got {len(counts)}")
    received = torch.empty_like(counts)
    dist.all_to_all_single(received, counts.contiguous(), group=group)
    return received.view(size, -1)


class _GatherTokens(torch.autograd.Function):
    """Every rank's ``x`` stacked along dim 0; backward, the sum over the ranks of each
    rank's part (a reduce-scatter)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        out = x.new_empty((dist.get_world_size(group) * len(x), *x.shape[1:]))
        _ALL_GATHER(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _ScatterTokens.forward(ctx, grad, ctx.group), None


class _ScatterTokens(torch.autograd.Function):
    """This rank's part of the sum over the ranks of ``x``; backward, every rank's
    gradient stacked (an all-gather)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
        ctx.group = group
        out = x.new_empty((len(x) // dist.get_world_size(group), *x.shape[1:]))
        _REDUCE_SCATTER(out, x.contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return _GatherTokens.forward(ctx, grad, ctx.group), None


def gather_tokens(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Every rank's ``x`` of ``group``, stacked along dim 0 in rank order (all-gather); the
    gradient is reduce-scattered back."""
    return _GatherTokens.apply(check_tensor("x", x), group)


def scatter_tokens(x: torch.Tensor, group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """This rank's part (its rank's slice along dim 0) of the sum over ``group`` of ``x``
    (reduce-scatter); the gradient is all-gathered back."""
    check_tensor("x", x)
    if len(x) % dist.get_world_size(group):
        raise ValueError(f"x must have a multiple of the group's {dist.get_world_size(group)} "
                         f"ranks rows, got {len(x)}")
    return _ScatterTokens.apply(x, group)


def reduce_gradients(params: Iterable[torch.nn.Parameter], group: dist.ProcessGroup | None,
                     ways: int) -> None:
    """Sum each parameter's gradient over ``group`` and divide it by ``ways``, the number of
    ranks whose losses (each the mean over its own tokens) make up the batch's.

    For the router and every weight that all ``ways`` data-parallel ranks hold, ``group`` is
    those ranks: the mean, as data parallelism takes it. An expert is held by only the
    ``ways / expert`` ranks of its expert-data-parallel group, but its gradient there already
    sums the tokens of all ``expert`` ranks it served (the combine all-to-all brought them
    back): the sum over its group, divided by all ``ways``, is the batch's mean. Divided by
    the group's size instead, it would be ``expert`` times too large."""
    check_int("ways", ways, 1)
    for param in params:
        dist.all_reduce(param.grad, group=group)
        param.grad /= ways
