"""ZeRO stage 1 in training: a small MLP trained with each sharded optimizer, and with
PyTorch's ``ZeroRedundancyOptimizer``, against one process's Adam.

Book section: *Chapter 6, "Running it"*. Three ways to run it:

* from Python (a notebook): ``zero_training(world_size=2)``;
* ``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.zero``;
* ``python -m gpudl.parallel.zero`` (one process: nothing is sharded).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel

from gpudl.checks import (
    check_instance,
    check_int,
    check_positive,
    check_widths,
    largest,
    largest_difference,
)
from gpudl.parallel.one_process import (
    BATCH_PER_RANK,
    ZERO_DIMS,
    adam_run,
    flat_parameters,
    make_batch,
    make_mlp,
    optimizer_state_bytes,
)
from gpudl.parallel.spawn import device_and_sync, run_under_torchrun, spawn
from gpudl.parallel.zero.comms import all_gather_flat
from gpudl.parallel.zero.optimizer import NaiveZeroAdam, ZeroAdam, padded_numel, shard_range

__all__ = [
    "ATOL",
    "LR",
    "OPTIMIZERS",
    "RTOL",
    "STEPS",
    "format_table",
    "main",
    "matches_reference",
    "max_difference",
    "train_worker",
    "zero_training",
]

STEPS = 5


LR = 1e-2


OPTIMIZERS = ("ZeroAdam", "NaiveZeroAdam", "ZeroRedundancyOptimizer")


# torch.testing.assert_close's tolerances for float32: "equal up to float32 rounding".
RTOL, ATOL = 1.3e-6, 1e-5


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
        x, y = (t[mine].to(device) for t in make_batch(world_size, dims, seed=step))
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(net(x), y)
        loss.backward()
        optimizer.step()
        params.append(flat_parameters(model))
        total = loss.detach().clone()
        dist.all_reduce(total)  # equal slices: the mean of the ranks' losses is the batch's
        losses.append(total.item() / world_size)
    state, step_bytes = optimizer_state_bytes(local)
    per_rank = torch.zeros(world_size, dtype=torch.int64, device=device)
    all_gather_flat(per_rank, torch.tensor([state], device=device))
    return {"params": params, "losses": losses, "state_bytes": per_rank.tolist(),
            "step_bytes": step_bytes}


def train_worker(rank: int, world_size: int, steps: int = STEPS, lr: float = LR,
                 dims: Sequence[int] = ZERO_DIMS) -> dict:
    """Train :func:`make_mlp` ``(dims)`` for ``steps`` steps with each
    optimizer of ``OPTIMIZERS``, from the same initial parameters, on this rank's slice of
    :func:`make_batch` (mean-squared error).

    Returns ``rank``, ``world_size``, ``backend``, ``n_params``, ``padded_numel`` and
    ``runs``: for each optimizer, ``params`` (this rank's flat parameters after each step, on
    the CPU), ``losses`` (the whole batch's loss before each step), ``state_bytes`` (the
    optimizer state on each rank, a list in rank order, counted from the tensors) and
    ``step_bytes`` (this rank's step counters).
    """
    _check_run(steps, lr, dims, world_size)
    device, _ = device_and_sync()
    n_params = sum(p.numel() for p in make_mlp(dims).parameters())
    runs = {name: _train(name, rank, world_size, steps, lr, dims, device)
            for name in OPTIMIZERS}
    return {"rank": rank, "world_size": world_size, "backend": dist.get_backend(),
            "n_params": n_params, "padded_numel": padded_numel(n_params, world_size),
            "runs": runs}


def _check_run(steps: object, lr: object, dims: Sequence[int], world_size: object) -> None:
    """Sizes a run can use: at least one step, a learning rate > 0, layer widths whose
    parameters every rank of ``world_size`` can hold a shard of."""
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    dims = check_widths("dims", dims)
    n_params = sum(a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))
    try:
        shard_range(n_params, check_int("world_size", world_size, 1), 0)
    except ValueError as err:
        raise ValueError(f"dims {dims} give {n_params} parameters: {err}") from None


def zero_training(world_size: int = 2, steps: int = STEPS, lr: float = LR,
                  dims: Sequence[int] = ZERO_DIMS, timeout: float = 120.0) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`train_worker`; one dict per rank. Every
    argument is checked before anything is started."""
    _check_run(steps, lr, dims, world_size)
    check_positive("timeout", timeout)
    return spawn(train_worker, world_size, steps, lr, tuple(dims), timeout=timeout)


def max_difference(run: dict, reference: dict) -> float:
    """The largest ``|parameter - reference|`` over every step of ``run`` (one entry of a
    worker's ``runs``) and :func:`adam_run`; NaN if either holds a NaN."""
    check_instance("run", run, dict)
    check_instance("reference", reference, dict)
    if len(run["params"]) != len(reference["params"]):
        raise ValueError(f"the runs have {len(run['params'])} and {len(reference['params'])} "
                         "steps")
    return largest(largest_difference(p, r)
                   for p, r in zip(run["params"], reference["params"], strict=True))


def matches_reference(run: dict, reference: dict) -> bool:
    """Whether ``run``'s parameters equal the reference's after every step, up to float32
    rounding (``RTOL``, ``ATOL``, as ``torch.testing.assert_close``)."""
    max_difference(run, reference)  # checks the step counts
    return all(torch.allclose(p, r, rtol=RTOL, atol=ATOL)
               for p, r in zip(run["params"], reference["params"], strict=True))


def format_table(result: dict, reference: dict) -> str:
    """One rank's :func:`train_worker` result beside :func:`adam_run`, as text."""
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
    _check_run(opts.steps, opts.lr, ZERO_DIMS, int(os.environ.get("WORLD_SIZE", 1)))
    result = run_under_torchrun(train_worker, opts.steps, opts.lr, ZERO_DIMS)
    if result["rank"] == 0:  # the reference is computed on rank 0 only
        print(format_table(result, adam_run(result["world_size"], opts.steps, opts.lr)),
              flush=True)


if __name__ == "__main__":
    main()
