"""ZeRO's collectives on flat buffers: the reduce-scatter that gives each rank the mean of its
shard, the naive all-reduce then slice, and the all-gather of the updated shards.

Book section: *Chapter 6, "The same bytes as DDP"*.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["all_gather_flat", "all_gather_shards", "all_reduce_mean_then_slice",
           "reduce_scatter_flat", "reduce_scatter_mean"]

# torch 2.13 named the collectives on flat tensors reduce_scatter_single and all_gather_single;
# earlier releases (a GPU machine may have one) call them reduce_scatter_tensor and
# all_gather_into_tensor. Both take (output, input).
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_ALL_GATHER = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_flat(output: torch.Tensor, flat: torch.Tensor) -> None:
    """Write into ``output`` this rank's slice of the sum over the ranks of ``flat``
    (torch's reduce-scatter of one flat tensor, under either of its names)."""
    _REDUCE_SCATTER(output, flat)


def all_gather_flat(output: torch.Tensor, shard: torch.Tensor) -> None:
    """Fill ``output`` with every rank's ``shard``, in rank order (torch's all-gather into one
    flat tensor, under either of its names)."""
    _ALL_GATHER(output, shard)


def reduce_scatter_mean(flat: torch.Tensor, shard: torch.Tensor) -> None:
    """Write into ``shard`` this rank's slice of the mean over the ranks of ``flat``.

    A ring reduce-scatter: each rank sends ``N - 1`` chunks of ``flat.numel() / N`` elements.
    ``shard`` is a separate buffer (in-place reduce-scatter is not documented for gloo).
    """
    reduce_scatter_flat(shard, flat)
    shard.div_(dist.get_world_size())


def all_reduce_mean_then_slice(flat: torch.Tensor, shard: torch.Tensor) -> None:
    """The naive way to the same ``shard``: all-reduce the whole of ``flat`` (every rank gets
    the mean of every element, as in DDP), then copy this rank's slice."""
    dist.all_reduce(flat)
    flat.div_(dist.get_world_size())
    start = dist.get_rank() * shard.numel()
    shard.copy_(flat[start:start + shard.numel()])


def all_gather_shards(flat: torch.Tensor, shard: torch.Tensor) -> None:
    """Fill ``flat`` with every rank's ``shard``, rank order; ``shard`` is ``flat``'s own slice
    at ``rank * shard.numel()``, so this rank's part is not copied (NCCL documents this
    in-place form). A ring all-gather: ``N - 1`` chunks sent per rank."""
    all_gather_flat(flat, shard)
