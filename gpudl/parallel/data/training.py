"""Data parallelism four ways, each proven equal to one process training on the global batch.

Book section: *Chapter 5, "One step, four ways"*.

Every rank holds the whole model and trains on its own share of each global batch
(:mod:`gpudl.parallel.data.sampling`); after the backward pass the ranks average their
gradients, so every replica takes the update one process would take on the whole batch. The
strategies (:data:`STRATEGIES`) differ only in how the gradients are averaged:

* ``"single"``: one process and the global batch, no communication: the reference;
* ``"manual"``: one ``all_reduce`` per parameter after the backward pass, then a division by
  the world size (:func:`average_gradients`);
* ``"bucketed"``: :class:`GradientBuckets`, all-reducing each
  bucket as soon as its gradients are ready;
* ``"ddp"``: ``DistributedDataParallel``, which does the same in C++.

With ``k`` steps of gradient accumulation each rank synchronises only after the last
micro-batch (``no_sync`` under DDP). Run a strategy from Python with :func:`run` (spawned
ranks, gloo or NCCL), or under torchrun::

    torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.data --strategy ddp
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import asdict, replace

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from gpudl.checks import (
    check_choice,
    check_instance,
    check_int,
    check_positive,
    largest,
    largest_difference,
    within,
)
from gpudl.parallel.data.buckets import GradientBuckets, rank_device
from gpudl.parallel.data.comms import broadcast_parameters, check_replicas
from gpudl.parallel.data.sampling import (
    Setup,
    check_plan,
    global_order,
    make_dataset,
    rank_indices,
)
from gpudl.parallel.one_process import average_gradients, flat_parameters, make_mlp
from gpudl.parallel.spawn import rank0_print, run_under_torchrun, spawn

__all__ = [
    "STRATEGIES",
    "TOLERANCE",
    "Replica",
    "check_strategy",
    "compare",
    "main",
    "run",
    "run_many",
    "run_worker",
    "train_worker",
]

#: The strategies, the reference first.
STRATEGIES = ("single", "manual", "bucketed", "ddp")


#: Largest difference allowed between a strategy and ``"single"``, at every step: losses
#: (absolute) and parameters (relative to the largest parameter). The ranks add the same
#: float32 numbers in another order than one process does, so each gradient element differs
#: by a few units of float32's rounding (2**-24, 6e-8, relative), and a few dozen SGD steps
#: carry such differences forward without amplifying them much (the tests see at most 2e-7).
#: Real mistakes differ by far more: the tests check that a sum instead of a mean, or a rank
#: training on its share alone, misses by more than 100 times this tolerance.
TOLERANCE = 1e-6


class Replica:
    """One rank's model, optimizer and gradient averaging for a strategy."""

    def __init__(self, strategy: str, setup: Setup, rank: int, world_size: int,
                 device: torch.device) -> None:
        check_strategy(strategy)
        check_instance("setup", setup, Setup)
        check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
        check_instance("device", device, torch.device)
        self.strategy, self.setup, self.world_size = strategy, setup, world_size
        self.model = make_mlp(setup.dims, setup.seed + rank * setup.rank_seed_step).to(device)
        distributed = strategy != "single"
        if distributed and setup.start == "verify":
            check_replicas(self.model)
        elif distributed and strategy != "ddp":  # DDP broadcasts rank 0's state itself
            broadcast_parameters(self.model)
        self.forward: nn.Module = self.model
        self.buckets = None
        if strategy == "ddp":
            ids = [device.index] if dist.get_backend() == "nccl" else None
            self.forward = DistributedDataParallel(self.model, device_ids=ids,
                                                   bucket_cap_mb=setup.bucket_cap_mb)
        elif strategy == "bucketed":
            self.buckets = GradientBuckets(self.model.parameters(), setup.bucket_cap_mb,
                                           world_size, setup.variant)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=setup.lr,
                                         momentum=setup.momentum)

    def _micro_batches(self, n: int) -> list[tuple[int, int]]:
        k = 1 if self.strategy == "single" else self.setup.accumulation
        bounds = [i * n // k for i in range(k + 1)]
        return [(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]

    def _no_sync(self, last: bool) -> object:
        if last or self.strategy != "ddp":
            return nullcontext()
        return self.forward.no_sync()

    def step(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, int | None]:
        """One optimizer step on this rank's share ``x, y`` of a global batch; returns the
        mean loss over the share (before the step) and the number of gradient all-reduces
        this code issued (``None`` for DDP, which issues its own)."""
        if self.buckets is not None and self.buckets.views:
            self.buckets.zero_grad()  # the gradients stay views of the buckets
        else:
            self.optimizer.zero_grad(set_to_none=True)
        micro = self._micro_batches(len(x))
        total = torch.zeros((), device=x.device)
        for j, (a, b) in enumerate(micro):
            last = j == len(micro) - 1
            if last and self.buckets is not None:
                self.buckets.arm()
            with self._no_sync(last):
                # each micro-batch's mean, weighted by its share of the samples: the sum
                # is the mean over the whole share
                loss = nn.functional.mse_loss(self.forward(x[a:b]), y[a:b]) * ((b - a) / len(x))
                loss.backward()
            total += loss.detach()
        calls = None
        if self.strategy == "manual":
            average_gradients(self.model)
            calls = len(list(self.model.parameters()))
        elif self.strategy == "bucketed":
            calls = self.buckets.wait()
        elif self.strategy == "single":
            calls = 0
        self.optimizer.step()
        return total, calls

    def flat_parameters(self) -> np.ndarray:
        """This replica's parameters, flattened, as a NumPy array."""
        return flat_parameters(self.model).numpy()


def check_strategy(strategy: object) -> None:
    """Raise ``ValueError`` unless ``strategy`` is one of :data:`STRATEGIES`."""
    check_choice("strategy", strategy, STRATEGIES)


def train_worker(rank: int, world_size: int, strategy: str, setup: Setup,
                 data_world_size: int | None = None) -> dict:
    """Train with ``strategy`` on this rank and record every step.

    ``"single"`` runs alone (``world_size`` 1, no collectives) on the global batches that
    ``data_world_size`` ranks would share; the other strategies run on every rank of the
    process group, on this rank's share. Returns ``strategy``, ``rank``, ``world_size``,
    ``backend``, and one entry per step in ``losses`` (the mean loss over the global batch,
    before the step), ``params`` (all parameters after the step, flattened, float32),
    ``batches`` (the sample indices this rank used), ``allreduces`` (gradient all-reduces
    issued per step; ``None`` under DDP) and ``grad_copies`` (bucket packs and unpacks, and
    gradients copied into a bucket, per step: ``GradientBuckets.copies``; ``None`` for
    the strategies without buckets).
    """
    check_strategy(strategy)
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    single = strategy == "single"
    if single and world_size != 1:
        raise ValueError(f"strategy 'single' runs in one process, got world size {world_size}")
    if not single and data_world_size not in (None, world_size):
        raise ValueError(f"data_world_size can differ from the world size only for 'single', "
                         f"got {data_world_size} with {world_size} ranks")
    n = world_size if data_world_size is None else data_world_size
    check_plan(setup, n)
    device, _ = rank_device()
    x_all, y_all = (t.to(device) for t in make_dataset(setup))
    replica = Replica(strategy, setup, rank, world_size, device)
    share = setup.global_batch if single else setup.global_batch // n
    record: dict = {"strategy": strategy, "rank": rank, "world_size": world_size,
                    "backend": None if single else dist.get_backend(), "losses": [],
                    "params": [], "batches": [], "allreduces": [], "grad_copies": []}
    for epoch in range(setup.epochs):
        mine = global_order(setup, n, epoch) if single else rank_indices(setup, n, rank, epoch)
        for start in range(0, len(mine), share):
            batch = mine[start:start + share]
            index = torch.tensor(batch, device=device)
            copies = replica.buckets.copies if replica.buckets else None
            loss, calls = replica.step(x_all[index], y_all[index])
            if not single:  # the ranks' shares are equal: the mean of their means
                dist.all_reduce(loss)
                loss /= world_size
            record["losses"].append(loss.item())
            record["params"].append(replica.flat_parameters())
            record["batches"].append(batch)
            record["allreduces"].append(calls)
            record["grad_copies"].append(replica.buckets.copies - copies if replica.buckets
                                         else None)
    return record


def run_worker(rank: int, world_size: int, jobs: Sequence[tuple[str, Setup]]) -> list[dict]:
    """Run several ``(strategy, setup)`` jobs one after another in one group of processes
    (starting processes costs seconds; the jobs do not); one :func:`train_worker` record
    each."""
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    _check_jobs(jobs, world_size, allow_empty=True)
    return [train_worker(rank, world_size, strategy, setup) for strategy, setup in jobs]


def _check_jobs(jobs: object, world_size: int, allow_empty: bool = False) -> None:
    """``jobs``: a list of ``(strategy, setup)`` pairs that ``world_size`` ranks can run."""
    if isinstance(jobs, str) or not isinstance(jobs, Sequence):
        raise TypeError(f"jobs must be a list of (strategy, setup) pairs, got {jobs!r}")
    if not jobs and not allow_empty:
        raise ValueError("jobs must list at least one (strategy, setup) pair")
    for i, job in enumerate(jobs):
        if not isinstance(job, tuple | list) or len(job) != 2:
            raise TypeError(f"jobs[{i}] must be a (strategy, setup) pair, got {job!r}")
        try:
            check_strategy(job[0])
            if job[0] == "single":
                raise ValueError("'single' runs in this process: use run('single', ...)")
            check_plan(job[1], world_size)
        except (TypeError, ValueError) as err:
            raise type(err)(f"jobs[{i}]: {err}") from None


def run_many(jobs: Sequence[tuple[str, Setup]], world_size: int,
             timeout: float = 180.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks once for distributed ``jobs`` (strategy, setup); for each
    job, the records of all ranks. Plans and strategies are checked before anything starts."""
    check_int("world_size", world_size, 1)
    check_positive("timeout", timeout)
    _check_jobs(jobs, world_size)
    jobs = list(jobs)
    per_rank = spawn(run_worker, world_size, jobs, timeout=timeout)
    return [[per_rank[r][j] for r in range(world_size)] for j in range(len(jobs))]


def run(strategy: str, world_size: int, setup: Setup = Setup(),
        timeout: float = 180.0) -> list[dict]:
    """Train with ``strategy`` on ``world_size`` ranks; the records of all ranks.
    ``"single"`` trains here, in this process, on the global batches that ``world_size``
    ranks would share (one record)."""
    check_strategy(strategy)
    check_positive("timeout", timeout)
    if strategy == "single":
        check_plan(setup, world_size)
        return [train_worker(0, 1, "single", setup, world_size)]
    return run_many([(strategy, setup)], world_size, timeout)[0]


def compare(records: Sequence[dict], reference: dict) -> dict:
    """How far the records of a run are from the ``"single"`` reference, over every step and
    rank: ``loss`` (largest absolute difference of the losses), ``params`` (largest absolute
    difference of the parameters, relative to the largest reference parameter), ``steps``,
    and ``equal`` (both within :data:`TOLERANCE`). A NaN anywhere, in a record or in the
    reference, makes the differences NaN and ``equal`` False."""
    check_instance("reference", reference, dict)
    if isinstance(records, dict | str) or not isinstance(records, Sequence):
        raise TypeError(f"records must be a list of train_worker records, got "
                        f"{type(records).__name__}")
    if not records:
        raise ValueError("records must hold at least one record")
    steps = len(reference["losses"])
    for i, record in enumerate(records):
        check_instance(f"records[{i}]", record, dict)
        if len(record["losses"]) != steps:
            raise ValueError(f"records: rank {record['rank']} took {len(record['losses'])} "
                             f"steps, the reference {steps}")
    loss = largest(largest_difference(r["losses"], reference["losses"]) for r in records)
    scale = largest(np.abs(p) for p in reference["params"])
    params = largest(largest_difference(p, q) for r in records
                     for p, q in zip(r["params"], reference["params"], strict=True)) / scale
    return {"steps": steps, "loss": loss, "params": params,
            "equal": within(loss, TOLERANCE) and within(params, TOLERANCE)}


def main(argv: list[str] | None = None) -> None:
    """Train with one strategy in this process (under ``torchrun``, on every rank) and have
    rank 0 compare every step with one process on the global batch."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.parallel.data",
                                     description="Data-parallel training, checked against "
                                                 "one process.")
    parser.add_argument("--strategy", choices=STRATEGIES[1:], default="ddp")
    parser.add_argument("--accumulation", type=int, default=1)
    parser.add_argument("--drop-last", action="store_true")
    parser.add_argument("--epochs", type=int, default=Setup().epochs)
    opts = parser.parse_args(argv)
    setup = replace(Setup(), accumulation=opts.accumulation, drop_last=opts.drop_last,
                    epochs=opts.epochs)
    record = run_under_torchrun(train_worker, opts.strategy, setup)
    if record["rank"] == 0:
        reference = train_worker(0, 1, "single", setup, record["world_size"])
        diff = compare([record], reference)
        rank0_print(f"{opts.strategy} on {record['world_size']} rank(s) ({record['backend']}), "
                    f"{diff['steps']} steps, setup {asdict(setup)}")
        rank0_print(f"largest loss difference from one process: {diff['loss']:.2e}; "
                    f"parameters: {diff['params']:.2e} (relative); within {TOLERANCE:g}: "
                    f"{diff['equal']}")


if __name__ == "__main__":
    main()
