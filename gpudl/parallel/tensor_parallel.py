"""Tensor parallelism (Megatron-LM): each layer's matrices split across ranks, by hand with
the identity/all-reduce operator pair, and with DTensor's ``parallelize_module``.

Book section: *Chapter 6, "Tensor parallelism"*.

A :class:`ColumnParallelLinear` keeps this rank's slice of a linear layer's *output* features
(rows of ``weight``), so it needs the whole input and produces a slice of the output. A
:class:`RowParallelLinear` keeps a slice of the *input* features (columns of ``weight``): it
takes a slice of the input and produces a partial sum of the whole output. Chained, column
then row, they need no communication in between; the partial sums are added by one
all-reduce at the end. Two operators (Shoeybi et al. 2019) mark where ranks communicate:

* ``f`` (:func:`copy_to_parallel`), before the column-parallel layer: identity forward, and
  all-reduce backward (each rank's input gradient is a partial sum over its output slice);
* ``g`` (:func:`reduce_from_parallel`), after the row-parallel layer: all-reduce forward,
  identity backward.

The feed-forward network is column (``fc1``, with the fused bias + GeLU of
:mod:`gpudl.kernels.bias_gelu`) then row (``fc2``); attention is column for ``q``, ``k``,
``v`` (stacked into one product, so one ``f``), whole heads per rank, then row for ``out``.
A block therefore does two all-reduces forward (two ``g``) and two backward (two ``f``):
:func:`count_all_reduces` counts them. :data:`DTENSOR_PLAN` is the same split for
``parallelize_module``; :func:`check_plan` makes a plan key that matches no module an error.

``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.tensor_parallel`` runs both on
two processes and prints how far each is from one process.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.debug import CommDebugMode
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    RowwiseParallel,
    parallelize_module,
)

from gpudl.checks import check_int
from gpudl.interop import tensor_device
from gpudl.kernels.bias_gelu import bias_gelu_tensor
from gpudl.models import (
    EncoderBlock,
    EncoderConfig,
    FeedForward,
    SelfAttention,
    attend,
    encoder_batch,
    make_encoder,
)
from gpudl.parallel.comms import device_and_sync
from gpudl.parallel.launch import rank0_print, run_under_torchrun, spawn
from gpudl.parallel.pipeline_parallel import reference_steps

__all__ = [
    "DTENSOR_PLAN",
    "ENGINES",
    "TensorParallelRun",
    "SMALL",
    "ColumnParallelLinear",
    "ParallelFeedForward",
    "ParallelSelfAttention",
    "RowParallelLinear",
    "check_degree",
    "check_plan",
    "copy_to_parallel",
    "count_all_reduces",
    "full_gradients",
    "main",
    "parallelize_block",
    "reduce_from_parallel",
    "run_tensor_parallel",
    "tensor_parallel_worker",
]


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


def check_degree(what: str, size: int, degree: int) -> None:
    """``ValueError`` unless ``degree`` ranks can share ``size`` equally."""
    if size % degree:
        raise ValueError(f"{what} ({size}) must be divisible by the tensor-parallel degree "
                         f"({degree}), so that every rank holds an equal share")


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
            check_degree("out_features", linear.out_features, degree)
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
        check_degree("in_features", linear.in_features, degree)
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
        check_degree("heads", heads, dist.get_world_size(group))
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


def _gather(t: torch.Tensor, dim: int, group: torch.distributed.ProcessGroup | None
            ) -> torch.Tensor:
    parts = [torch.empty_like(t) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, t.contiguous(), group=group)
    return torch.cat(parts, dim=dim)


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
                    grads[key] = _gather(part, 0, group).cpu()
        elif isinstance(module, RowParallelLinear):
            grads[f"{prefix}weight"] = _gather(module.weight.grad, 1, group).cpu()
            grads[f"{prefix}bias"] = module.bias.grad.cpu()
        elif isinstance(module, torch.nn.LayerNorm):
            for kind in ("weight", "bias"):
                grads[f"{prefix}{kind}"] = getattr(module, kind).grad.cpu()
    return grads


ENGINES = ("hand", "dtensor")

#: Two blocks of the tiny encoder, since each simulated kernel launch costs about 0.1 s on a CPU.
SMALL = EncoderConfig(layers=2)

# [dtensor-plan]
#: The Megatron split of one :class:`gpudl.models.EncoderBlock` for ``parallelize_module``.
DTENSOR_PLAN: dict[str, ParallelStyle] = {
    "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
    "attn.out": RowwiseParallel(),
    "mlp.fc1": ColwiseParallel(), "mlp.fc2": RowwiseParallel(),
}
# [/dtensor-plan]


def check_plan(module: torch.nn.Module, plan: dict[str, ParallelStyle]) -> None:
    """``ValueError`` for a plan key that names no submodule of ``module``.

    ``parallelize_module`` matches each key, dot-separated token by token with ``fnmatch``
    wildcards, against the submodule names, and only *warns* about a key that matches nothing:
    a typo would leave that layer whole on every rank, silently."""
    names = [name.split(".") for name, _ in module.named_modules() if name]
    for key in plan:
        tokens = key.split(".")
        if not any(len(name) == len(tokens) and all(map(fnmatch, name, tokens))
                   for name in names):
            raise ValueError(f"plan key {key!r} matches no submodule of "
                             f"{type(module).__name__}; its submodules are "
                             f"{['.'.join(n) for n in names]}")


def _dtensor_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).cpu()
            for name, p in model.named_parameters()}


@dataclass(frozen=True)
class TensorParallelRun:
    """``steps`` SGD steps of the encoder of ``config`` on a batch of ``batch``, every rank on
    the whole batch, tensor-parallel by ``engine``: ``"hand"`` (:func:`parallelize_block`;
    ``fused``, the default, uses the float32 bias + GeLU kernel, ``fused=False`` torch's GeLU)
    or ``"dtensor"`` (:data:`DTENSOR_PLAN`, torch's GeLU)."""

    engine: str = "hand"
    fused: bool | None = None
    dtype: torch.dtype = torch.float32
    config: EncoderConfig = SMALL
    batch: int = 2
    steps: int = 2
    lr: float = 0.05

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.fused is None:
            object.__setattr__(self, "fused", self.engine == "hand")
        if self.fused and self.engine != "hand":
            raise ValueError("fused=True is the hand-written layer's kernel; DTensor's plan "
                             "keeps torch's GeLU")
        if self.fused and self.dtype != torch.float32:
            raise ValueError(f"the fused bias + GeLU kernel is float32, got dtype {self.dtype} "
                             "(pass fused=False for torch's GeLU)")
        check_int("batch", self.batch, 1)
        check_int("steps", self.steps, 1)

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless heads, hidden and ffn features split evenly."""
        for what in ("heads", "hidden", "ffn"):
            check_degree(what, getattr(self.config, what), world_size)


def _run(run: TensorParallelRun, world_size: int) -> dict:
    device, _ = device_and_sync()
    run.check_world_size(world_size)
    if run.fused and device.type != tensor_device().type:
        raise ValueError(f"the fused kernel runs on {tensor_device().type} tensors, but this "
                         f"process group's are on {device.type} (gloo with a GPU for fewer "
                         "than all ranks): pass fused=False, or run one GPU per rank")
    model = make_encoder(run.config, dtype=run.dtype).to(device)
    if run.engine == "hand":
        model = torch.nn.Sequential(*(parallelize_block(block, None, run.fused)
                                      for block in model))
    else:
        mesh = init_device_mesh(device.type, (world_size,))
        for block in model:
            check_plan(block, DTENSOR_PLAN)
            parallelize_module(block, mesh, DTENSOR_PLAN)
    x, y = (t.to(device) for t in encoder_batch(run.config, run.batch, dtype=run.dtype))
    x.requires_grad_()  # as the output of an embedding would: the first f all-reduces too
    optimizer = torch.optim.SGD(model.parameters(), lr=run.lr)
    losses, grads, all_reduces = [], [], []
    for _ in range(run.steps):
        optimizer.zero_grad()
        with count_all_reduces() as forward:
            loss = torch.nn.functional.mse_loss(model(x), y)
        with count_all_reduces() as backward:
            loss.backward()
        all_reduces.append({"forward": forward["all_reduce"],
                            "backward": backward["all_reduce"],
                            "bytes": forward["bytes"] + backward["bytes"]})
        losses.append(loss.item())
        grads.append(full_gradients(model) if run.engine == "hand" else _dtensor_grads(model))
        optimizer.step()
    return {"losses": losses, "grads": grads, "all_reduces": all_reduces}


def tensor_parallel_worker(rank: int, world_size: int, runs: Sequence[TensorParallelRun]
                           ) -> list[dict]:
    """Each of ``runs`` in turn, tensor-parallel over all ranks. Returned per run:
    ``losses`` (one per step), ``grads`` (gathered whole and named as in the unsplit encoder,
    one dict per step) and ``all_reduces`` (one ``{"forward": n, "backward": n, "bytes": b}``
    per step, by :func:`count_all_reduces`; ``bytes`` counts the hand-written engine's)."""
    return [_run(run, world_size) for run in runs]


def run_tensor_parallel(runs: Sequence[TensorParallelRun], world_size: int = 2,
                        timeout: float = 120.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`tensor_parallel_worker`; one list per run,
    of one dict per rank. The sizes are checked before anything is started."""
    runs = tuple(runs)
    check_int("world_size", world_size, 1)
    for run in runs:
        if not isinstance(run, TensorParallelRun):
            raise TypeError(f"runs must be TensorParallelRun objects, got {type(run).__name__}")
        run.check_world_size(world_size)
    by_rank = spawn(tensor_parallel_worker, world_size, runs, timeout=timeout)
    return [[by_rank[rank][k] for rank in range(world_size)] for k in range(len(runs))]


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun``: both engines on the tiny encoder (float32); rank 0 prints the
    largest gradient difference from one process and the all-reduces of a step."""
    argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=N -m gpudl.parallel.tensor_parallel",
        description=main.__doc__).parse_args(argv)
    runs = (TensorParallelRun("hand"), TensorParallelRun("dtensor"))
    results = run_under_torchrun(tensor_parallel_worker, runs)
    reference = reference_steps(SMALL, 2, 2, 0.05)
    for run, got in zip(runs, results, strict=True):
        error = max((got["grads"][s][k] - g).abs().max().item()
                    for s, step in enumerate(reference["grads"]) for k, g in step.items())
        counts = got["all_reduces"][0]
        rank0_print(f"{run.engine}: largest gradient difference from one process "
                    f"{error:.2e}; all-reduces per step: {counts['forward']} forward, "
                    f"{counts['backward']} backward")


if __name__ == "__main__":
    main()
