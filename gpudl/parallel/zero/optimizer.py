"""ZeRO stage 1: Adam with its state sharded across the data-parallel ranks.

Book section: *Chapter 6, "One ZeRO-1 step"*.

The parameters (and the gradients) live in one flat buffer, padded with zeros to a multiple of
``N`` elements so that every shard has the same size (:func:`padded_numel`,
:func:`shard_range`); the model's parameters are views of it. A step is two collectives of
:mod:`gpudl.parallel.zero.comms` around an ordinary optimizer step on this rank's shard.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn

from gpudl.checks import check_int
from gpudl.parallel.one_process import optimizer_state_bytes
from gpudl.parallel.zero.comms import (
    all_gather_shards,
    all_reduce_mean_then_slice,
    reduce_scatter_mean,
)

__all__ = ["NaiveZeroAdam", "ZeroAdam", "padded_numel", "shard_range"]


def padded_numel(numel: int, world_size: int) -> int:
    """``numel`` rounded up to a multiple of ``world_size``: the flat buffer's length, so that
    it cuts into ``world_size`` shards of ``ceil(numel / world_size)`` elements."""
    numel = check_int("numel", numel, 1)
    world_size = check_int("world_size", world_size, 1)
    return math.ceil(numel / world_size) * world_size


def shard_range(numel: int, world_size: int, rank: int) -> tuple[int, int]:
    """``(start, stop)`` of ``rank``'s shard in the padded flat buffer of ``numel`` elements.

    Shards have ``ceil(numel / world_size)`` elements; the padding is at the end of the last
    ones. ``ValueError`` if a rank would own padding only (more ranks than the elements can
    feed): such a world size cannot shard this buffer.
    """
    size = padded_numel(numel, world_size) // world_size
    rank = check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    if (world_size - 1) * size >= numel:
        raise ValueError(
            f"cannot shard {numel} elements over {world_size} ranks: with shards of "
            f"ceil({numel}/{world_size}) = {size} elements, rank {world_size - 1} would hold "
            "only padding; use fewer ranks or a larger model"
        )
    return rank * size, (rank + 1) * size


def _check_params(params: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    if isinstance(params, torch.Tensor):
        raise TypeError("params must be an iterable of tensors (model.parameters()), "
                        "got a single tensor")
    params = list(params)
    if not params:
        raise ValueError("params is empty: ZeroAdam needs at least one parameter")
    for i, p in enumerate(params):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"params must be tensors (parameter groups are not supported), "
                            f"got {type(p).__name__} at position {i}")
        if not p.is_floating_point() or p.layout != torch.strided:
            raise TypeError(f"parameter {i} must be a dense floating-point tensor, "
                            f"got dtype {p.dtype} with layout {p.layout}")
        if not (p.is_leaf and p.requires_grad):
            raise ValueError(f"parameter {i} must be a leaf tensor that requires grad "
                             "(ZeroAdam updates every parameter it is given)")
    if len({id(p) for p in params}) < len(params):
        raise ValueError("a parameter appears more than once in params")
    dtypes, devices = {p.dtype for p in params}, {p.device for p in params}
    if len(dtypes) > 1:
        raise TypeError(f"all parameters must have one dtype (they share one flat buffer), "
                        f"got {sorted(map(str, dtypes))}")
    if len(devices) > 1:
        raise ValueError(f"all parameters must be on one device, got {sorted(map(str, devices))}")
    return params


class ZeroAdam:
    """Adam with its state sharded across the ranks of the default process group (ZeRO
    stage 1), for a model replicated on every rank.

    Arguments as ``torch.optim.Adam``'s (checked by it); ``optimizer_class`` is the optimizer
    each rank runs on its shard, any with Adam's constructor (``torch.optim.Adam``,
    ``torch.optim.AdamW``). Use it on the bare model, not one wrapped
    in ``DistributedDataParallel``: it averages the gradients itself. The model's
    parameters become views of one flat buffer (rank 0's values are broadcast, as DDP does),
    and their ``.grad`` views of another, which ``backward`` accumulates into.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        *,
        optimizer_class: type[torch.optim.Optimizer] = torch.optim.Adam,
    ) -> None:
        if not dist.is_initialized():
            raise ValueError("ZeroAdam needs torch.distributed's default process group: "
                               "run it in a worker started by gpudl.parallel.spawn.spawn "
                               "or by torchrun")
        self.params = _check_params(params)
        self.world_size, self.rank = dist.get_world_size(), dist.get_rank()
        self.numel = sum(p.numel() for p in self.params)
        start, stop = shard_range(self.numel, self.world_size, self.rank)
        first = self.params[0]
        self.flat_param = torch.zeros(padded_numel(self.numel, self.world_size),
                                      dtype=first.dtype, device=first.device)
        self.flat_grad = torch.zeros_like(self.flat_param)
        offsets = [0]
        for p in self.params:
            offsets.append(offsets[-1] + p.numel())
            self.flat_param[offsets[-2]:offsets[-1]].copy_(p.detach().flatten())
        # This rank's shard: a leaf view of the flat parameters, with its own gradient buffer.
        self.param_shard = nn.Parameter(self.flat_param[start:stop])
        self.param_shard.grad = torch.zeros_like(self.param_shard)
        self.inner = optimizer_class([self.param_shard], lr=lr, betas=betas, eps=eps,
                                     weight_decay=weight_decay)
        dist.broadcast(self.flat_param, src=0)
        self._grad_views = []
        for p, lo, hi in zip(self.params, offsets[:-1], offsets[1:], strict=True):
            grad = self.flat_grad[lo:hi].view_as(p)
            if p.grad is not None:
                grad.copy_(p.grad)
            p.data = self.flat_param[lo:hi].view_as(p)
            p.grad = grad
            self._grad_views.append(grad)

    def zero_grad(self) -> None:
        """Zero the flat gradient buffer (the parameters' ``.grad`` stay views of it)."""
        self.flat_grad.zero_()

    def _collect_gradients(self) -> None:
        """Make sure every gradient is in the flat buffer: it is already, unless ``.grad`` was
        replaced (``model.zero_grad()`` sets it to None and backward allocates a new one)."""
        for i, (p, view) in enumerate(zip(self.params, self._grad_views, strict=True)):
            if p.grad is None:
                raise ValueError(f"parameter {i} (shape {tuple(p.shape)}) has no gradient: "
                                 "call backward() before step()")
            if p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
                p.grad = view

    def _reduce_gradients(self) -> None:
        reduce_scatter_mean(self.flat_grad, self.param_shard.grad)

    @torch.no_grad()
    def step(self) -> None:
        """One optimizer step: average the gradients into this rank's shard, update the shard,
        gather every rank's shard into the model's parameters."""
        self._collect_gradients()
        self._reduce_gradients()                               # communication
        self.inner.step()                                      # maths, on 1/N of the state
        self.flat_param[self.numel:].zero_()  # padding stays 0 (with eps=0 Adam makes it 0/0)
        all_gather_shards(self.flat_param, self.param_shard)   # communication

    def state_bytes(self) -> tuple[int, int]:
        """``(state, steps)``: bytes of this rank's optimizer state (Adam's moments of the
        shard), and of its step counter, counted from the tensors."""
        return optimizer_state_bytes(self.inner)


class NaiveZeroAdam(ZeroAdam):
    """:class:`ZeroAdam` with DDP's gradient all-reduce instead of a reduce-scatter: every rank
    receives the mean of the whole gradient and uses ``1/N`` of it. Same parameters, same
    state per rank, and 3 (N - 1)/N of the buffer's bytes sent per rank per step instead of
    2 (N - 1)/N."""

    def _reduce_gradients(self) -> None:
        all_reduce_mean_then_slice(self.flat_grad, self.param_shard.grad)
