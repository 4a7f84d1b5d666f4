"""ZeRO stage 1: Adam with its state sharded across the data-parallel ranks.

Book section: *Chapter 4, "Sharding the optimizer across GPUs"*; *Chapter 2, "Memory across
GPUs"* has the accounting (:func:`gpudl.estimate.model_state_memory`).

In plain data parallelism every rank holds the whole model, its gradients and the whole Adam
state, and every rank performs the same update. ZeRO stage 1 (Rajbhandari et al. 2020) keeps
the replicated model and gradients but gives each of the ``N`` ranks one ``1/N`` shard of the
optimizer: each rank keeps the moments of its shard only and updates only its shard.

The parameters (and the gradients) live in one flat buffer, padded with zeros to a multiple of
``N`` elements so that every shard has the same size (collectives move equal chunks); the
model's parameters are views of it. A step is then two collectives around an ordinary
optimizer step, kept apart:

* communication: the gradients are **reduce-scattered** (each rank receives the mean of its
  shard only) and, after the update, the parameter shards are **all-gathered** into every
  rank's flat buffer, in place, so the model sees the new parameters;
* maths: ``torch.optim.Adam`` (or any optimizer with its constructor, such as
  ``torch.optim.AdamW``) updates this rank's shard, a single flat tensor.

:class:`NaiveZeroAdam` shards the same state but all-reduces the whole gradient first, as DDP
does, and then uses only its shard: it moves half as many bytes again.
:func:`train_worker` trains a small MLP with both and with PyTorch's
``torch.distributed.optim.ZeroRedundancyOptimizer``, for comparison with one process's Adam.
Three ways to run it:

* from Python (a notebook): ``zero_training(world_size=2)``;
* ``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.zero``;
* ``python -m gpudl.parallel.zero`` (one process: nothing is sharded).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from gpudl.checks import check_int, check_positive, check_widths
from gpudl.parallel.comms import device_and_sync
from gpudl.parallel.launch import run_under_torchrun, spawn
from gpudl.parallel.sharding import local_bytes, make_mlp

__all__ = [
    "ATOL",
    "DIMS",
    "LR",
    "OPTIMIZERS",
    "RTOL",
    "STEPS",
    "NaiveZeroAdam",
    "ZeroAdam",
    "all_gather_shards",
    "all_reduce_mean_then_slice",
    "format_table",
    "make_batch",
    "matches_reference",
    "max_difference",
    "padded_numel",
    "reduce_scatter_mean",
    "reference_run",
    "shard_range",
    "state_bytes",
    "train_worker",
    "zero_training",
]

# 30 inputs, two hidden layers of 64, 11 outputs: 6,859 parameters, an odd number, so that the
# flat buffer needs padding at every world size the book uses (2, 3 and 4).
DIMS = (30, 64, 64, 11)
STEPS = 5
LR = 1e-2
BATCH_PER_RANK = 8
OPTIMIZERS = ("ZeroAdam", "NaiveZeroAdam", "ZeroRedundancyOptimizer")
# torch.testing.assert_close's tolerances for float32: "equal up to float32 rounding".
RTOL, ATOL = 1.3e-6, 1e-5


# --- layout: one flat buffer, padded to equal shards ------------------------------------------


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


# --- communication ----------------------------------------------------------------------------

# torch 2.13 named the collectives on flat tensors reduce_scatter_single and all_gather_single;
# earlier releases (a GPU machine may have one) call them reduce_scatter_tensor and
# all_gather_into_tensor. Both take (output, input).
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_mean(flat: torch.Tensor, shard: torch.Tensor) -> None:
    """Write into ``shard`` this rank's slice of the mean over the ranks of ``flat``.

    A ring reduce-scatter: each rank sends ``N - 1`` chunks of ``flat.numel() / N`` elements.
    ``shard`` is a separate buffer (in-place reduce-scatter is not documented for gloo).
    """
    _reduce_scatter(shard, flat)
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
    _all_gather(flat, shard)


# --- the optimizer ----------------------------------------------------------------------------


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
                               "run it in a worker started by gpudl.parallel.launch.spawn "
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
        return state_bytes(self.inner)


class NaiveZeroAdam(ZeroAdam):
    """:class:`ZeroAdam` with DDP's gradient all-reduce instead of a reduce-scatter: every rank
    receives the mean of the whole gradient and uses ``1/N`` of it. Same parameters, same
    state per rank, and 3 (N - 1)/N of the buffer's bytes sent per rank per step instead of
    2 (N - 1)/N."""

    def _reduce_gradients(self) -> None:
        all_reduce_mean_then_slice(self.flat_grad, self.param_shard.grad)


def state_bytes(optimizer: torch.optim.Optimizer) -> tuple[int, int]:
    """``(state, steps)``: bytes of the tensors ``optimizer`` holds in its state on this rank,
    without and with only the ``"step"`` counters (which ZeRO's accounting leaves out)."""
    states = list(optimizer.state.values())
    return (local_bytes([t for s in states for k, t in s.items()
                          if k != "step" and isinstance(t, torch.Tensor)]),
            local_bytes([s["step"] for s in states if isinstance(s.get("step"), torch.Tensor)]))


# --- a small training run, sharded and not -----------------------------------------------------


def make_batch(step: int, world_size: int,
               dims: Sequence[int] = DIMS) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of step ``step``'s whole batch, 8 samples per rank (rank ``r`` takes
    rows ``[8 r, 8 r + 8)``), the same in every run."""
    generator = torch.Generator().manual_seed(step)
    n = BATCH_PER_RANK * world_size
    return (torch.randn(n, dims[0], generator=generator),
            torch.randn(n, dims[-1], generator=generator))


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()


def reference_run(world_size: int, steps: int = STEPS, lr: float = LR,
                  dims: Sequence[int] = DIMS) -> dict:
    """One process, ``torch.optim.Adam``, each step on the whole batch of ``world_size``
    ranks: what every sharded run must reproduce. ``params``: the flat parameters after each
    step; ``losses``: the batch's loss before each step; ``state_bytes``: Adam's moments."""
    model = make_mlp(dims)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    params, losses = [], []
    for step in range(steps):
        x, y = make_batch(step, world_size, dims)
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        params.append(_flat(model))
        losses.append(loss.item())
    return {"params": params, "losses": losses, "state_bytes": state_bytes(optimizer)[0]}


def _train(name: str, rank: int, world_size: int, steps: int, lr: float,
           dims: Sequence[int], device: torch.device) -> dict:
    model = make_mlp(dims).to(device)
    if name == "ZeroRedundancyOptimizer":  # PyTorch's: DDP all-reduces, whole tensors sharded
        net: nn.Module = DistributedDataParallel(model)
        optimizer = ZeroRedundancyOptimizer(model.parameters(),
                                            optimizer_class=torch.optim.Adam, lr=lr)
        local = optimizer.optim  # the Adam that updates this rank's tensors
    else:
        net = model
        optimizer = {"ZeroAdam": ZeroAdam, "NaiveZeroAdam": NaiveZeroAdam}[name](
            model.parameters(), lr=lr)
        local = optimizer.inner
    params, losses = [], []
    mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
    for step in range(steps):
        x, y = (t[mine].to(device) for t in make_batch(step, world_size, dims))
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        params.append(_flat(model))
        total = loss.detach().clone()
        dist.all_reduce(total)  # equal slices: the mean of the ranks' losses is the batch's
        losses.append(total.item() / world_size)
    state, step_bytes = state_bytes(local)
    per_rank = torch.zeros(world_size, dtype=torch.int64, device=device)
    _all_gather(per_rank, torch.tensor([state], device=device))
    return {"params": params, "losses": losses, "state_bytes": per_rank.tolist(),
            "step_bytes": step_bytes}


def train_worker(rank: int, world_size: int, steps: int = STEPS, lr: float = LR,
                 dims: Sequence[int] = DIMS) -> dict:
    """Train :func:`gpudl.parallel.sharding.make_mlp` ``(dims)`` for ``steps`` steps with each
    optimizer of ``OPTIMIZERS``, from the same initial parameters, on this rank's slice of
    :func:`make_batch` (mean-squared error).

    Returns ``rank``, ``world_size``, ``backend``, ``n_params``, ``padded_numel`` and
    ``runs``: for each optimizer, ``params`` (this rank's flat parameters after each step, on
    the CPU), ``losses`` (the whole batch's loss before each step), ``state_bytes`` (the
    optimizer state on each rank, a list in rank order, counted from the tensors) and
    ``step_bytes`` (this rank's step counters).
    """
    device, _ = device_and_sync()
    n_params = sum(p.numel() for p in make_mlp(dims).parameters())
    runs = {name: _train(name, rank, world_size, steps, lr, dims, device)
            for name in OPTIMIZERS}
    return {"rank": rank, "world_size": world_size, "backend": dist.get_backend(),
            "n_params": n_params, "padded_numel": padded_numel(n_params, world_size),
            "runs": runs}


def _check_run(steps: object, lr: object, dims: Sequence[int]) -> None:
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_widths("dims", dims)


def zero_training(world_size: int = 2, steps: int = STEPS, lr: float = LR,
                  dims: Sequence[int] = DIMS, timeout: float = 120.0) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`train_worker`; one dict per rank."""
    _check_run(steps, lr, dims)
    return spawn(train_worker, world_size, steps, lr, tuple(dims), timeout=timeout)


def max_difference(run: dict, reference: dict) -> float:
    """The largest ``|parameter - reference|`` over every step of ``run`` (one entry of a
    worker's ``runs``) and :func:`reference_run`."""
    if len(run["params"]) != len(reference["params"]):
        raise ValueError(f"the runs have {len(run['params'])} and {len(reference['params'])} "
                         "steps")
    return max((p - r).abs().max().item()
               for p, r in zip(run["params"], reference["params"], strict=True))


def matches_reference(run: dict, reference: dict) -> bool:
    """Whether ``run``'s parameters equal the reference's after every step, up to float32
    rounding (``RTOL``, ``ATOL``, as ``torch.testing.assert_close``)."""
    max_difference(run, reference)  # checks the step counts
    return all(torch.allclose(p, r, rtol=RTOL, atol=ATOL)
               for p, r in zip(run["params"], reference["params"], strict=True))


def format_table(result: dict, reference: dict) -> str:
    """One rank's :func:`train_worker` result beside :func:`reference_run`, as text."""
    total = reference["state_bytes"]
    lines = [f"{result['n_params']:,} parameters, {result['world_size']} rank(s) "
             f"({result['backend']}), {len(reference['params'])} Adam steps; one process's "
             f"Adam state: {total:,} bytes",
             f"{'optimizer':>23} {'state bytes per rank':>28} {'x N / total':>11} "
             f"{'same as Adam':>12}"]
    for name, run in result["runs"].items():
        per_rank = " ".join(f"{b:,}" for b in run["state_bytes"])
        ratio = max(run["state_bytes"]) * result["world_size"] / total
        lines.append(f"{name:>23} {per_rank:>28} {ratio:>11.3f} "
                     f"{str(matches_reference(run, reference)):>12}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Train in this process (under ``torchrun``, on every rank); rank 0 prints the table."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.parallel.zero",
                                     description="ZeRO stage 1 Adam against one process's Adam.")
    parser.add_argument("--steps", type=int, default=STEPS, help="optimizer steps")
    parser.add_argument("--lr", type=float, default=LR, help="Adam's learning rate")
    opts = parser.parse_args(argv)
    _check_run(opts.steps, opts.lr, DIMS)
    result = run_under_torchrun(train_worker, opts.steps, opts.lr, DIMS)
    if result["rank"] == 0:  # the reference is computed on rank 0 only
        print(format_table(result, reference_run(result["world_size"], opts.steps, opts.lr)),
              flush=True)


if __name__ == "__main__":
    main()
