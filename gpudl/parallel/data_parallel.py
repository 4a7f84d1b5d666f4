"""Data parallelism four ways, each proven equal to one process training on the global batch.

Book section: *Chapter 5, "Data parallelism"*.

Every rank holds the whole model and trains on its own share of each global batch; after the
backward pass the ranks average their gradients, so every replica takes the update one process
would take on the whole batch. The strategies (:data:`STRATEGIES`) differ only in how the
gradients are averaged:

* ``"single"``: one process and the global batch, no communication: the reference;
* ``"manual"``: one ``all_reduce`` per parameter after the backward pass, then a division by
  the world size;
* ``"bucketed"``: :class:`GradientBuckets` keeps the gradients in a few flat buckets (each
  ``.grad`` a view of its bucket, as DDP's ``gradient_as_bucket_view``), all-reduces each
  bucket as soon as its gradients are ready (overlapping the rest of the backward pass) and
  averages it; or, the naive version kept to teach it, packs the gradients into the buckets
  with a Numba kernel that also scales by ``1/N`` (:mod:`gpudl.kernels.buckets`) and unpacks
  them after the all-reduce;
* ``"ddp"``: ``DistributedDataParallel``, which does the same in C++.

The data follows ``DistributedSampler``: each epoch's (shuffled) index list is padded by
repetition to a multiple of the world size, or cut to one with ``drop_last``
(:func:`sampler_plan`), and rank ``r`` takes every ``N``-th index from ``r``. With ``k``
steps of gradient accumulation each rank splits its share into ``k`` micro-batches and
synchronises only after the last (``no_sync`` under DDP).

Run a strategy from Python with :func:`run` (spawned ranks, gloo or NCCL), or under torchrun::

    torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.data_parallel --strategy ddp
"""

from __future__ import annotations

import argparse
import math
import operator
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace

from gpudl import backend

# isort: split
import numpy as np
import torch
import torch.distributed as dist
from numba import cuda
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from gpudl.checks import check_bool, check_int, check_positive, check_real, check_widths
from gpudl.interop import as_kernel_array
from gpudl.kernels import buckets as bk
from gpudl.parallel.grad_timeline import expected_buckets
from gpudl.parallel.launch import rank0_print, run_under_torchrun, spawn
from gpudl.parallel.sharding import average_gradients, make_mlp

__all__ = [
    "BUCKET_VARIANTS",
    "STRATEGIES",
    "TOLERANCE",
    "GradientBuckets",
    "Replica",
    "Setup",
    "check_plan",
    "check_replicas",
    "check_strategy",
    "compare",
    "global_order",
    "make_dataset",
    "rank_device",
    "rank_indices",
    "run",
    "run_many",
    "run_worker",
    "sampler_plan",
    "train_worker",
]

#: The strategies, the reference first.
STRATEGIES = ("single", "manual", "bucketed", "ddp")

#: The ways the bucketed strategy fills its buckets, gradients as views of them, or packed
#: and unpacked by a kernel of :mod:`gpudl.kernels.buckets` (the naive version).
BUCKET_VARIANTS = ("views", *bk.VARIANTS)

#: Largest difference allowed between a strategy and ``"single"``, at every step: losses
#: (absolute) and parameters (relative to the largest parameter). The ranks add the same
#: float32 numbers in another order than one process does, so each gradient element differs
#: by a few units of float32's rounding (2**-24, 6e-8, relative), and a few dozen SGD steps
#: carry such differences forward without amplifying them much (the tests see at most 2e-7).
#: Real mistakes differ by far more: the tests check that a sum instead of a mean, or a rank
#: training on its share alone, misses by more than 100 times this tolerance.
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Setup:
    """What to train and how: the same on every rank.

    ``n_samples`` samples of a fixed regression task (:func:`make_dataset`) for ``epochs``
    epochs in global batches of ``global_batch`` (each rank takes ``global_batch / N``), an
    MLP of layer widths ``dims`` (:func:`gpudl.parallel.sharding.make_mlp`, mean-squared
    error) and SGD with ``lr`` and ``momentum``. ``shuffle``, ``seed`` and ``drop_last`` are
    ``DistributedSampler``'s. ``accumulation`` micro-batches per step and rank. Buckets of
    ``bucket_cap_mb`` MiB (DDP's argument, and the bucketed strategy's; ``None`` is DDP's
    default), the gradients their views (``variant="views"``) or packed by the kernel
    ``variant`` (a key of ``gpudl.kernels.buckets.VARIANTS``). ``start``: ``"broadcast"``
    copies rank 0's initial parameters to every rank, ``"verify"`` only checks that they are
    equal (:func:`check_replicas`). ``rank_seed_step``, when not 0, makes rank ``r`` initialise its
    model from ``seed + r * rank_seed_step``: the bug that :func:`check_replicas` catches.
    """

    n_samples: int = 96
    global_batch: int = 16
    epochs: int = 3
    dims: tuple[int, ...] = (8, 32, 32, 4)
    lr: float = 0.2
    momentum: float = 0.9
    seed: int = 0
    shuffle: bool = True
    drop_last: bool = False
    accumulation: int = 1
    bucket_cap_mb: float | None = 2 / 1024
    variant: str = "views"
    start: str = "broadcast"
    rank_seed_step: int = 0

    def __post_init__(self) -> None:
        for name, least in (("n_samples", 1), ("global_batch", 1), ("epochs", 1),
                            ("accumulation", 1), ("seed", 0), ("rank_seed_step", 0)):
            check_int(name, getattr(self, name), least)
        object.__setattr__(self, "dims", check_widths("dims", self.dims))
        for name in ("lr", "momentum"):
            check_real(name, getattr(self, name), 0, finite=True)
        for name in ("shuffle", "drop_last"):
            check_bool(name, getattr(self, name))
        if self.bucket_cap_mb is not None:
            check_positive("bucket_cap_mb", self.bucket_cap_mb)
        if self.variant not in BUCKET_VARIANTS:
            raise ValueError(f"variant must be one of {list(BUCKET_VARIANTS)}, "
                             f"got {self.variant!r}")
        if self.start not in ("broadcast", "verify"):
            raise ValueError(f"start must be 'broadcast' or 'verify', got {self.start!r}")


def make_dataset(setup: Setup) -> tuple[torch.Tensor, torch.Tensor]:
    """``setup.n_samples`` inputs and targets (float32), the same on every rank and in every
    run: a random teacher network's outputs plus a little noise."""
    generator = torch.Generator().manual_seed(setup.seed + 12345)
    d_in, d_out = setup.dims[0], setup.dims[-1]
    x = torch.randn(setup.n_samples, d_in, generator=generator)
    teacher = torch.randn(d_in, d_out, generator=generator) / math.sqrt(d_in)
    noise = 0.1 * torch.randn(setup.n_samples, d_out, generator=generator)
    return x, torch.tanh(x @ teacher) + noise


def check_plan(setup: Setup, world_size: int) -> None:
    """Raise ``ValueError`` unless ``world_size`` ranks can share ``setup``'s data evenly:
    no more ranks than samples, and a global batch that splits into ``world_size`` equal
    shares of ``accumulation`` equal micro-batches."""
    if not isinstance(setup, Setup):
        raise TypeError(f"setup must be a gpudl.parallel.data_parallel.Setup, "
                        f"got {type(setup).__name__}")
    check_int("world_size", world_size, 1)
    if world_size > setup.n_samples:
        raise ValueError(
            f"world size {world_size} is above the number of samples {setup.n_samples}: some "
            "ranks would get no sample of their own, only repeated ones (or none with "
            "drop_last); use at most as many ranks as samples")
    share = world_size * setup.accumulation
    if setup.global_batch % share:
        what = ("the world size" if setup.accumulation == 1 else
                f"world size x accumulation = {world_size} x {setup.accumulation}")
        raise ValueError(
            f"the global batch {setup.global_batch} must be a multiple of {what} = {share}, "
            "so that every rank computes the same number of samples (and the average of the "
            "ranks' mean gradients is the mean gradient of the batch); got a remainder of "
            f"{setup.global_batch % share}")


def _sampler(setup: Setup, world_size: int, rank: int, epoch: int) -> DistributedSampler:
    sampler = DistributedSampler(range(setup.n_samples), num_replicas=world_size, rank=rank,
                                 shuffle=setup.shuffle, seed=setup.seed,
                                 drop_last=setup.drop_last)
    sampler.set_epoch(epoch)
    return sampler


def rank_indices(setup: Setup, world_size: int, rank: int, epoch: int) -> list[int]:
    """The samples rank ``rank`` of ``world_size`` trains on in ``epoch``, in order: what
    ``DistributedSampler`` gives it."""
    return list(_sampler(setup, world_size, rank, epoch))


def global_order(setup: Setup, world_size: int, epoch: int) -> list[int]:
    """The samples of ``epoch`` in the order the ranks take them together: position
    ``r + N k`` is rank ``r``'s ``k``-th sample. Global batch ``s`` is positions
    ``[s B, (s + 1) B)``: exactly the union of the ranks' ``s``-th batches."""
    per_rank = [rank_indices(setup, world_size, r, epoch) for r in range(world_size)]
    return [index for row in zip(*per_rank, strict=True) for index in row]


def sampler_plan(n_samples: int, world_size: int, drop_last: bool = False,
                 shuffle: bool = False, seed: int = 0, epoch: int = 0) -> dict:
    """What ``DistributedSampler`` does with ``n_samples`` samples over ``world_size`` ranks.

    Returns ``per_rank`` (each rank's indices), ``samples_per_rank``, ``padding`` (the
    indices seen twice in the epoch: without ``drop_last`` the list is padded by repeating
    its start up to a multiple of ``world_size``) and ``dropped`` (the indices not seen at
    all: with ``drop_last`` its tail is cut off instead).
    """
    setup = Setup(n_samples=n_samples, global_batch=world_size, drop_last=drop_last,
                  shuffle=shuffle, seed=seed)
    check_plan(setup, world_size)
    order = global_order(setup, world_size, epoch)
    seen = set(order)
    return {
        "n_samples": n_samples, "world_size": world_size, "drop_last": drop_last,
        "samples_per_rank": len(order) // world_size,
        "per_rank": [order[r::world_size] for r in range(world_size)],
        "padding": order[n_samples:] if len(order) > n_samples else [],
        "dropped": sorted(set(range(n_samples)) - seen),
    }


def check_replicas(module: torch.nn.Module) -> None:
    """Raise ``RuntimeError`` on every rank unless all ranks hold the same parameters.

    Each parameter's elementwise maximum and minimum over the ranks are all-reduced; they are
    equal exactly when every rank holds the same values. All ranks reach the same verdict,
    so all of them raise (none is left waiting in a later collective).
    """
    for name, param in module.named_parameters():
        high, low = param.detach().clone(), param.detach().clone()
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        spread = (high - low).abs().max().item()
        if spread > 0:
            raise RuntimeError(
                f"the replicas start from different weights: parameter {name!r} differs "
                f"between ranks by up to {spread:.3g}. Broadcast rank 0's parameters "
                "(DistributedDataParallel does so when it is built) or seed every rank alike")


def _broadcast_parameters(module: nn.Module) -> None:
    for param in module.parameters():
        dist.broadcast(param.detach(), src=0)


def rank_device() -> tuple[torch.device, Callable[[], None]]:
    """This rank's device, where its tensors and the bucket kernel's arrays live: its GPU on
    a GPU (with NCCL, or ranks sharing a GPU under gloo), the CPU on the simulator; and a
    function that waits for the GPU's queued work."""
    if backend.is_simulator():
        return torch.device("cpu"), lambda: None
    return torch.device("cuda", torch.cuda.currentrank_device()), torch.cuda.synchronize


@contextmanager
def _kernel_stream(device: torch.device) -> Iterator[object]:
    """Launch Numba kernels in this device's context, on torch's current stream, so that they
    run in order with torch's own kernels and with the collectives that wait on that stream;
    stream 0 on the simulator."""
    if device.type != "cuda":
        yield 0
        return
    handle = torch.cuda.current_stream(device).cuda_stream  # 0: the legacy default stream
    with cuda.gpus[device.index]:
        yield cuda.external_stream(handle) if handle else 0


class GradientBuckets:
    """The ``"bucketed"`` strategy's gradient averaging: flat buckets, one all-reduce each,
    started during the backward pass.

    The parameters are grouped into buckets of about ``bucket_cap_mb`` MiB in the order their
    gradients become ready, the reverse of ``params`` (as DDP groups them:
    :func:`gpudl.parallel.grad_timeline.expected_buckets`). After :meth:`arm`, a hook on every
    parameter counts the gradients of its bucket as they are accumulated; when the last one
    arrives the bucket's all-reduce starts asynchronously, while the backward pass goes on
    with earlier layers, and :meth:`wait` waits for them. Unarmed (the micro-batches before
    the last, under gradient accumulation), the hooks do nothing and the gradients only
    accumulate.

    With ``variant="views"`` every ``param.grad`` is a view of its place in its bucket
    (:meth:`zero_grad` keeps it so), so backward writes the gradients straight into the
    buckets: nothing is copied. NCCL all-reduces with ``ReduceOp.AVG``; gloo has no average,
    so the bucket is summed, then scaled by ``1/N``. With a kernel of
    :mod:`gpudl.kernels.buckets` as ``variant`` (the naive version), the gradients stay
    where backward put them: the last one packs the bucket, scaled by ``1/N``, before its
    all-reduce (a sum), and :meth:`wait` unpacks the averages into ``param.grad``.
    ``copies`` counts the packs and unpacks (of a whole bucket), and the gradients the
    views version had to copy into a bucket because ``.grad`` had been replaced.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], bucket_cap_mb: float | None,
                 world_size: int, variant: str = "views") -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("params must list at least one parameter")
        for param in self.params:
            if param.dtype != torch.float32 or not param.requires_grad:
                raise TypeError(f"every parameter must be float32 and require a gradient, got "
                                f"{param.dtype} (requires_grad={param.requires_grad})")
        if variant not in BUCKET_VARIANTS:
            raise ValueError(f"variant must be one of {list(BUCKET_VARIANTS)}, got {variant!r}")
        ready = self.params[::-1]  # the backward pass produces the last layer's first
        groups = expected_buckets([p.numel() * p.element_size() for p in ready], bucket_cap_mb)
        self.buckets = [[ready[i] for i in group] for group in groups]
        self.flat = [torch.zeros(sum(p.numel() for p in bucket), device=bucket[0].device)
                     for bucket in self.buckets]
        self.bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.slot_of = {}  # each parameter's place in its bucket
        for flat, bucket in zip(self.flat, self.buckets, strict=True):
            starts = bk.offsets([p.numel() for p in bucket])
            for p, start in zip(bucket, starts, strict=False):
                self.slot_of[id(p)] = flat[start:start + p.numel()].view_as(p)
        self.slots = [self.slot_of[id(p)] for p in self.params]
        self.scale = 1.0 / check_int("world_size", world_size, 1)
        self.variant = variant
        self.views = variant == "views"
        self.copies = 0
        self.armed = False
        self._left: list[int] = []
        self._works: dict[int, tuple[dist.Work, bool]] = {}  # bucket -> (work, summed?)
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._ready)
        if self.views:
            self.zero_grad()

    def zero_grad(self) -> None:
        """Zero the buckets and, for the views version, make every ``.grad`` its view again
        (an optimizer's ``zero_grad(set_to_none=True)`` would unlink them)."""
        for flat in self.flat:
            flat.zero_()
        grads = map(operator.attrgetter("grad"), self.params)
        if self.views and not all(map(operator.is_, grads, self.slots)):
            for param, slot in zip(self.params, self.slots, strict=True):
                param.grad = slot

    def arm(self) -> None:
        """Make the next backward pass start the all-reduces."""
        self._left = [len(bucket) for bucket in self.buckets]
        self._works = {}
        self.armed = True

    def _ready(self, param: nn.Parameter) -> None:
        if not self.armed:
            return
        i = self.bucket_of[id(param)]
        self._left[i] -= 1
        if self._left[i] == 0:
            if self.views:
                self._gather(i)
            else:
                self._pack(i)
            self._works[i] = self._all_reduce(self.flat[i])

    def _gather(self, i: int) -> None:
        """Copy into bucket ``i`` the gradients that are not views of it (``.grad`` replaced
        since :meth:`zero_grad`); normally there are none."""
        for param in self.buckets[i]:
            slot = self.slot_of[id(param)]
            if param.grad is not slot:
                slot.copy_(param.grad)
                param.grad = slot
                self.copies += 1

    def _pack(self, i: int) -> None:
        """The naive version: bucket ``i`` packed from the gradients, scaled by ``1/N``."""
        with _kernel_stream(self.flat[i].device) as stream:
            grads = [as_kernel_array(p.grad.view(-1), "grad") for p in self.buckets[i]]
            bk.pack(grads, as_kernel_array(self.flat[i], "bucket"), self.scale, self.variant,
                    stream)
        self.copies += 1

    def _all_reduce(self, flat: torch.Tensor) -> tuple[dist.Work, bool]:
        """Start the bucket's all-reduce: NCCL averages (``ReduceOp.AVG``), gloo only sums
        (then :meth:`wait` scales), and a packed bucket, already scaled, is summed."""
        if self.views and dist.get_backend() == "nccl":
            return dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True), False
        return dist.all_reduce(flat, async_op=True), self.views

    def wait(self) -> int:
        """Wait for every bucket's all-reduce, leave the averages in ``param.grad`` (scaled,
        or unpacked from a packed bucket) and disarm; return the number of all-reduces.
        ``RuntimeError`` if a bucket never completed (a parameter that received no
        gradient)."""
        self.armed = False
        missing = [i for i in range(len(self.buckets)) if i not in self._works]
        if missing:
            raise RuntimeError(
                f"buckets {missing} never received all their gradients in the backward "
                "pass: some parameters did not take part in the loss")
        for i, (work, summed) in self._works.items():
            work.wait()
            if summed:
                self.flat[i].mul_(self.scale)
            elif not self.views:
                with _kernel_stream(self.flat[i].device) as stream:
                    grads = [as_kernel_array(p.grad.view(-1), "grad") for p in self.buckets[i]]
                    bk.unpack(as_kernel_array(self.flat[i], "bucket"), grads, self.variant,
                              stream)
                self.copies += 1
        return len(self._works)


class Replica:
    """One rank's model, optimizer and gradient averaging for a strategy."""

    def __init__(self, strategy: str, setup: Setup, rank: int, world_size: int,
                 device: torch.device) -> None:
        self.strategy, self.setup, self.world_size = strategy, setup, world_size
        self.model = make_mlp(setup.dims, setup.seed + rank * setup.rank_seed_step).to(device)
        distributed = strategy != "single"
        if distributed and setup.start == "verify":
            check_replicas(self.model)
        elif distributed and strategy != "ddp":  # DDP broadcasts rank 0's state itself
            _broadcast_parameters(self.model)
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
        return torch.cat([p.detach().reshape(-1) for p in self.model.parameters()]).cpu().numpy()


def check_strategy(strategy: object) -> None:
    """Raise ``ValueError`` unless ``strategy`` is one of :data:`STRATEGIES`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


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
    return [train_worker(rank, world_size, strategy, setup) for strategy, setup in jobs]


def run_many(jobs: Sequence[tuple[str, Setup]], world_size: int,
             timeout: float = 180.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks once for distributed ``jobs`` (strategy, setup); for each
    job, the records of all ranks. Plans and strategies are checked before anything starts."""
    jobs = list(jobs)
    if not jobs:
        raise ValueError("jobs must list at least one (strategy, setup) pair")
    for strategy, setup in jobs:
        check_strategy(strategy)
        if strategy == "single":
            raise ValueError("'single' runs in this process: use run('single', ...)")
        check_plan(setup, world_size)
    per_rank = spawn(run_worker, world_size, jobs, timeout=timeout)
    return [[per_rank[r][j] for r in range(world_size)] for j in range(len(jobs))]


def run(strategy: str, world_size: int, setup: Setup = Setup(),
        timeout: float = 180.0) -> list[dict]:
    """Train with ``strategy`` on ``world_size`` ranks; the records of all ranks.
    ``"single"`` trains here, in this process, on the global batches that ``world_size``
    ranks would share (one record)."""
    check_strategy(strategy)
    if strategy == "single":
        check_plan(setup, world_size)
        return [train_worker(0, 1, "single", setup, world_size)]
    return run_many([(strategy, setup)], world_size, timeout)[0]


def compare(records: Sequence[dict], reference: dict) -> dict:
    """How far the records of a run are from the ``"single"`` reference, over every step and
    rank: ``loss`` (largest absolute difference of the losses), ``params`` (largest absolute
    difference of the parameters, relative to the largest reference parameter), ``steps``,
    and ``equal`` (both within :data:`TOLERANCE`)."""
    steps = len(reference["losses"])
    for record in records:
        if len(record["losses"]) != steps:
            raise ValueError(f"rank {record['rank']} took {len(record['losses'])} steps, "
                             f"the reference {steps}")
    loss = max(abs(a - b) for r in records for a, b in zip(r["losses"], reference["losses"],
                                                           strict=True))
    scale = max(float(np.abs(p).max()) for p in reference["params"])
    params = max(float(np.abs(p - q).max()) for r in records
                 for p, q in zip(r["params"], reference["params"], strict=True)) / scale
    return {"steps": steps, "loss": loss, "params": params,
            "equal": loss <= TOLERANCE and params <= TOLERANCE}


def main(argv: list[str] | None = None) -> None:
    """Train with one strategy in this process (under ``torchrun``, on every rank) and have
    rank 0 compare every step with one process on the global batch."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.parallel.data_parallel",
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
