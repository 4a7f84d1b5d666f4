"""Tensor-parallel layers (Megatron-LM): each linear layer's matrices split across the ranks.

Book section: *Chapter 6, "Tensor parallelism"*.

A :class:`ColumnParallelLinear` keeps this rank's slice of a linear layer's *output* features
(rows of ``weight``), so it needs the whole input and produces a slice of the output. A
:class:`RowParallelLinear` keeps a slice of the *input* features (columns of ``weight``): it
takes a slice of the input and produces a partial sum of the whole output. Chained, column
then row, they need no communication in between; the partial sums are added by one
all-reduce at the end (the operators of :mod:`gpudl.parallel.tensor.comms`).

The feed-forward network is column (``fc1``, with the fused bias + GeLU of
:mod:`gpudl.kernels.bias_gelu`) then row (``fc2``); attention is column for ``q``, ``k``,
``v`` (stacked into one product, so one ``f``), whole heads per rank, then row for ``out``.
A block therefore does two all-reduces forward (two ``g``) and two backward (two ``f``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.distributed as dist

from gpudl.kernels.bias_gelu import bias_gelu_tensor
from gpudl.models.encoder import EncoderBlock, FeedForward, SelfAttention, attend
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.tensor.comms import copy_to_parallel, gather, reduce_from_parallel

__all__ = [
    "ColumnParallelLinear",
    "ParallelFeedForward",
    "ParallelSelfAttention",
    "RowParallelLinear",
    "full_gradients",
    "parallelize_block",
]


class ColumnParallelLinear(torch.nn.Module):
    """This rank's slice of the output features of one or more linear layers that read the
    same input: ``y_r = f(x) W_r^T + b_r`` (``gelu(...)`` with ``gelu=True``, by the fused
    kernel). Several layers (``q``, ``k``, ``v``) are split each by its output features and
    their slices stacked, so they cost one product and one ``f``."""

    def __init__(self, linears: torch.nn.Linear | Sequence[torch.nn.Linear],
                 group: torch.distributed.ProcessGroup | None = None,
                 gelu: bool = False) -> None:
        super().__init__()
        linears = [linears] if isinstance(linears, torch.nn.Linear) else list(linears)
        self.group, self.gelu = group, gelu
        degree, rank = dist.get_world_size(group), dist.get_rank(group)
        for linear in linears:
            ParallelDegrees(tensor=degree).check_divides("tensor", "out_features",
                                                         linear.out_features)
        self.splits = [linear.out_features // degree for linear in linears]
        self.weight = torch.nn.Parameter(torch.cat(
            [linear.weight.detach().chunk(degree, dim=0)[rank] for linear in linears]))
        self.bias = torch.nn.Parameter(torch.cat(
            [linear.bias.detach().chunk(degree)[rank] for linear in linears]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """This rank's slice of the output features, from the whole input."""
        x = copy_to_parallel(x, self.group)
        if self.gelu:
            return bias_gelu_tensor(x @ self.weight.T, self.bias)
        return torch.nn.functional.linear(x, self.weight, self.bias)


class RowParallelLinear(torch.nn.Module):
    """This rank's slice of a linear layer's input features: ``y = g(x_r W_r^T) + b``, with
    ``x_r`` this rank's slice of the input (a column-parallel layer's output). The bias is
    added once, after the sum."""

    def __init__(self, linear: torch.nn.Linear,
                 group: torch.distributed.ProcessGroup | None = None) -> None:
        super().__init__()
        self.group = group
        degree, rank = dist.get_world_size(group), dist.get_rank(group)
        ParallelDegrees(tensor=degree).check_divides("tensor", "in_features", linear.in_features)
        self.weight = torch.nn.Parameter(linear.weight.detach().chunk(degree, dim=1)[rank])
        self.bias = torch.nn.Parameter(linear.bias.detach().clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The whole output, from this rank's slice of the input features."""
        return reduce_from_parallel(x @ self.weight.T, self.group) + self.bias


class ParallelFeedForward(torch.nn.Module):
    """:class:`gpudl.models.FeedForward` split Megatron's way: ``fc1`` column-parallel with the
    fused bias + GeLU (``fused=False``: torch's GeLU, in any dtype), ``fc2`` row-parallel."""

    def __init__(self, mlp: FeedForward, group: torch.distributed.ProcessGroup | None = None,
                 fused: bool = True) -> None:
        super().__init__()
        self.fused = fused
        self.fc1 = ColumnParallelLinear(mlp.fc1, group, gelu=fused)
        self.fc2 = RowParallelLinear(mlp.fc2, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., hidden) to the same shape, whole on every rank."""
        h = self.fc1(x)
        return self.fc2(h if self.fused else torch.nn.functional.gelu(h))


class ParallelSelfAttention(torch.nn.Module):
    """:class:`gpudl.models.SelfAttention` split by heads: each rank projects, attends and
    outputs with ``heads / degree`` whole heads; ``out`` is row-parallel."""

    def __init__(self, attn: SelfAttention,
                 group: torch.distributed.ProcessGroup | None = None) -> None:
        super().__init__()
        heads = attn.q.out_features // attn.head_dim
        degrees = ParallelDegrees(tensor=dist.get_world_size(group))
        degrees.check_divides("tensor", "heads", heads)
        self.head_dim = attn.head_dim
        self.qkv = ColumnParallelLinear([attn.q, attn.k, attn.v], group)
        self.out = RowParallelLinear(attn.out, group)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq, hidden) to the same shape, whole on every rank."""
        q, k, v = self.qkv(x).split(self.qkv.splits, dim=-1)
        return self.out(attend(q, k, v, self.head_dim))


def parallelize_block(block: EncoderBlock, group: torch.distributed.ProcessGroup | None = None,
                      fused: bool = True) -> EncoderBlock:
    """A copy of ``block`` with its attention and feed-forward network tensor-parallel over
    ``group`` (the LayerNorms stay whole on every rank)."""
    block = copy.deepcopy(block)
    block.attn = ParallelSelfAttention(block.attn, group)
    block.mlp = ParallelFeedForward(block.mlp, group, fused)
    return block


def full_gradients(model: torch.nn.Module, group: torch.distributed.ProcessGroup | None = None
                   ) -> dict[str, torch.Tensor]:
    """Every gradient of a model of :func:`parallelize_block` blocks, gathered from the ranks
    and named as in the unsplit model (``"0.attn.q.weight"``, ...), on the CPU."""
    grads = {}
    for name, module in model.named_modules():
        prefix = f"{name}." if name else ""
        if isinstance(module, ColumnParallelLinear):
            stacked = name.endswith(".qkv")  # q, k and v of ParallelSelfAttention
            for kind in ("weight", "bias"):
                parts = getattr(module, kind).grad.split(module.splits)
                keys = ([f"{name[:-3]}{t}.{kind}" for t in "qkv"] if stacked
                        else [f"{prefix}{kind}"])
                for key, part in zip(keys, parts, strict=True):
                    grads[key] = gather(part, 0, group).cpu()
        elif isinstance(module, RowParallelLinear):
            grads[f"{prefix}weight"] = gather(module.weight.grad, 1, group).cpu()
            grads[f"{prefix}bias"] = module.bias.grad.cpu()
        elif isinstance(module, torch.nn.LayerNorm):
            for kind in ("weight", "bias"):
                grads[f"{prefix}{kind}"] = getattr(module, kind).grad.cpu()
    return grads
