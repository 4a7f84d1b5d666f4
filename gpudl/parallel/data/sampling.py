"""Who trains on what: the data-parallel setup, its data set, and ``DistributedSampler``'s
share of it for each rank.

Book section: *Chapter 5, "Who trains on what: DistributedSampler"*.

Each epoch's (shuffled) index list is padded by repetition to a multiple of the world size, or
cut to one with ``drop_last`` (:func:`sampler_plan`), and rank ``r`` takes every ``N``-th
index from ``r``. With ``k`` steps of gradient accumulation each rank splits its share into
``k`` micro-batches. :func:`check_plan` refuses a setup the ranks cannot share evenly before
any process starts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch.utils.data import DistributedSampler

from gpudl.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_positive,
    check_real,
    check_widths,
)
from gpudl.parallel.data.buckets import BUCKET_VARIANTS
from gpudl.parallel.degrees import ParallelDegrees

__all__ = ["Setup", "check_plan", "global_order", "make_dataset", "rank_indices", "sampler_plan"]


@dataclass(frozen=True)
class Setup:
    """What to train and how: the same on every rank.

    ``n_samples`` samples of a fixed regression task (:func:`make_dataset`) for ``epochs``
    epochs in global batches of ``global_batch`` (each rank takes ``global_batch / N``), an
    MLP of layer widths ``dims`` (:func:`gpudl.parallel.one_process.make_mlp`, mean-squared
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
        check_positive("lr", self.lr)
        check_real("momentum", self.momentum, 0)
        for name in ("shuffle", "drop_last"):
            check_bool(name, getattr(self, name))
        if self.bucket_cap_mb is not None:
            check_positive("bucket_cap_mb", self.bucket_cap_mb)
        check_choice("variant", self.variant, BUCKET_VARIANTS)
        check_choice("start", self.start, ("broadcast", "verify"))


def make_dataset(setup: Setup) -> tuple[torch.Tensor, torch.Tensor]:
    """``setup.n_samples`` inputs and targets (float32), the same on every rank and in every
    run: a random teacher network's outputs plus a little noise."""
    check_instance("setup", setup, Setup)
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
    check_instance("setup", setup, Setup)
    degrees = ParallelDegrees(data=check_int("world_size", world_size, 1))
    if world_size > setup.n_samples:
        raise ValueError(
            f"world size {world_size} is above the number of samples {setup.n_samples}: some "
            "ranks would get no sample of their own, only repeated ones (or none with "
            "drop_last); use at most as many ranks as samples")
    share = degrees.check_divides("data", "the global batch", setup.global_batch)
    if share % setup.accumulation:
        raise ValueError(
            f"each rank's share of the global batch ({share} samples) must split into "
            f"accumulation = {setup.accumulation} equal micro-batches, so that every rank "
            "computes the same number of samples (and the average of the ranks' mean "
            f"gradients is the mean gradient of the batch); got a remainder of "
            f"{share % setup.accumulation}")


def _sampler(setup: Setup, world_size: int, rank: int, epoch: int) -> DistributedSampler:
    sampler = DistributedSampler(range(setup.n_samples), num_replicas=world_size, rank=rank,
                                 shuffle=setup.shuffle, seed=setup.seed,
                                 drop_last=setup.drop_last)
    sampler.set_epoch(epoch)
    return sampler


def rank_indices(setup: Setup, world_size: int, rank: int, epoch: int) -> list[int]:
    """The samples rank ``rank`` of ``world_size`` trains on in ``epoch``, in order: what
    ``DistributedSampler`` gives it."""
    check_plan(setup, world_size)
    check_int("rank", rank, 0, world_size - 1)
    check_int("epoch", epoch, 0)
    return list(_sampler(setup, world_size, rank, epoch))


def global_order(setup: Setup, world_size: int, epoch: int) -> list[int]:
    """The samples of ``epoch`` in the order the ranks take them together: position
    ``r + N k`` is rank ``r``'s ``k``-th sample. Global batch ``s`` is positions
    ``[s B, (s + 1) B)``: exactly the union of the ranks' ``s``-th batches."""
    check_plan(setup, world_size)
    check_int("epoch", epoch, 0)
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
    check_int("epoch", epoch, 0)
    check_int("world_size", world_size, 1)
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
