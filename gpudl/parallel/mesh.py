"""Sharding and combining: FSDP2 on the encoder, and data and tensor parallelism at once on a
two-dimensional device mesh.

Book section: *Chapter 6, "Sharding the encoder"* and *"Two dimensions"*.

:func:`fsdp_worker` shards every block of :func:`gpudl.models.make_encoder` with FSDP2
(``fully_shard``, as :mod:`gpudl.parallel.zero.fsdp` does for an MLP): each rank
keeps ``1/N`` of every parameter, gathers a block's parameters just before using it, and
reduce-scatters its gradients, while every rank runs its own slice of the batch (data
parallelism with sharded state, ZeRO stage 3).

:func:`mesh_2d_worker` arranges the ranks in a grid of ``data x tensor`` (a
:class:`ParallelDegrees` whose sharding degree is its data degree):
the ranks of a row share a batch slice and split every block with
:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`; the ranks of a column own the same
tensor-parallel slice and average their gradients, by FSDP2 over the mesh's ``"data"``
dimension, which also splits that slice's state between them.

``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.mesh`` runs both (FSDP2 on 4
ranks, then 2 x 2) and prints each one's distance from one process.
"""

from __future__ import annotations

import argparse
import logging

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

from gpudl.checks import (
    check_choice,
    check_instance,
    check_int,
    check_positive,
    largest,
    largest_difference,
)
from gpudl.models.encoder import DTYPES, EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.encoder_plan import DTENSOR_PLAN, check_dtensor_plan
from gpudl.parallel.launch import device_and_sync, rank0_print, run_under_torchrun, spawn
from gpudl.parallel.reference import encoder_sgd_run, local_bytes, sgd_steps, whole

__all__ = [
    "MESH_2X2",
    "MESH_CONFIG",
    "fsdp_worker",
    "main",
    "mesh_2d_worker",
    "run_fsdp",
    "run_mesh_2d",
]

#: The encoder of the equivalence runs, four blocks, small enough for four ranks on two cores.
MESH_CONFIG = EncoderConfig(layers=4)


def _check_run(config: object, batch: object, steps: object, lr: object,
               dtype: object) -> None:
    """The arguments every run of this module takes: an encoder, a batch of at least one
    sample, at least one step of a learning rate > 0, and a floating-point dtype."""
    check_instance("config", config, EncoderConfig)
    check_int("batch", batch, 1)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    check_choice("dtype", dtype, DTYPES)


def _check_mesh(degrees: ParallelDegrees, config: EncoderConfig, batch: int) -> None:
    """``ValueError`` unless ``degrees`` describe a data x tensor mesh this module runs
    (FSDP2 shards the state over the data dimension: sharding = data) and split the encoder's
    heads and widths and the batch evenly."""
    check_instance("degrees", degrees, ParallelDegrees)
    if degrees.pipeline != 1 or degrees.sharding != degrees.data:
        raise ValueError(f"degrees must describe the 2-D mesh, data x tensor with the state "
                         f"sharded over the data dimension (pipeline 1, sharding = data), got "
                         f"{degrees}")
    for what in ("heads", "hidden", "ffn"):
        degrees.check_divides("tensor", what, getattr(config, what))
    degrees.check_divides("data", "the batch", check_int("batch", batch, 1))


def _sgd_on_slice(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int,
                  lr: float, data_group: torch.distributed.ProcessGroup | None,
                  data_ways: int) -> dict:
    """SGD steps on this rank's slice (:func:`sgd_steps`); the loss
    reported is the whole batch's (the mean over the equal data-parallel slices), the
    gradients whole."""

    def whole_batch_loss(loss: torch.Tensor) -> float:
        total = loss.detach().clone()
        dist.all_reduce(total, group=data_group)
        return total.item() / data_ways

    return sgd_steps(model, x, y, steps, lr, whole_batch_loss, whole)


def fsdp_worker(rank: int, world_size: int, config: EncoderConfig, batch: int, steps: int,
                lr: float, dtype: torch.dtype) -> dict:
    """``steps`` SGD steps of the encoder with FSDP2 on every block and the root, rank
    ``r`` on samples ``[r b/N, (r + 1) b/N)``. Returns ``losses`` and ``grads`` (as
    :func:`encoder_sgd_run`), ``param_bytes`` (this rank's
    shards) and ``full_param_bytes`` (the whole model)."""
    _check_run(config, batch, steps, lr, dtype)
    degrees = ParallelDegrees(data=world_size, sharding=world_size)
    share = degrees.check_divides("data", "the batch", batch)
    device, _ = device_and_sync()
    model = make_encoder(config, dtype=dtype).to(device)
    full_bytes = local_bytes(list(model.parameters()))
    mesh = degrees.device_mesh(device.type)
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    x, y = (t[rank * share:(rank + 1) * share].to(device)
            for t in encoder_batch(config, batch, dtype=dtype))
    param_bytes = local_bytes(list(model.parameters()))
    return {"rank": rank, "param_bytes": param_bytes, "full_param_bytes": full_bytes,
            **_sgd_on_slice(model, x, y, steps, lr, None, world_size)}


def mesh_2d_worker(rank: int, world_size: int, degrees: ParallelDegrees,
                   config: EncoderConfig, batch: int, steps: int, lr: float,
                   dtype: torch.dtype) -> dict:
    """``steps`` SGD steps on a ``degrees.data x degrees.tensor`` mesh: tensor parallelism
    (:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`) along ``"tensor"``, FSDP2 along
    ``"data"``, each data-parallel row on its slice of the batch. Returns ``losses``,
    ``grads`` (whole, as one process names them) and ``coords``, this rank's
    ``(data, tensor)`` place in the grid."""
    _check_run(config, batch, steps, lr, dtype)
    degrees.check_world_size(world_size)
    _check_mesh(degrees, config, batch)
    # Gathering a (data, tensor)-sharded gradient whole takes two all-gathers, and DTensor
    # warns that this is slow; the check does it once per step, on purpose.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    device, _ = device_and_sync()
    mesh = degrees.device_mesh(device.type, ("data", "tensor"))
    model = make_encoder(config, dtype=dtype).to(device)
    for block in model:
        check_dtensor_plan(block, DTENSOR_PLAN)
        parallelize_module(block, mesh["tensor"], DTENSOR_PLAN)
        fully_shard(block, mesh=mesh["data"])
    fully_shard(model, mesh=mesh["data"])
    row, share = mesh["data"].get_local_rank(), batch // degrees.data
    x, y = (t[row * share:(row + 1) * share].to(device)
            for t in encoder_batch(config, batch, dtype=dtype))
    return {"rank": rank, "coords": (row, mesh["tensor"].get_local_rank()),
            **_sgd_on_slice(model, x, y, steps, lr, mesh["data"].get_group(), degrees.data)}


def run_fsdp(world_size: int = 2, config: EncoderConfig = MESH_CONFIG, batch: int = 8,
             steps: int = 2, lr: float = 0.05, dtype: torch.dtype = torch.float32,
             timeout: float = 120.0) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`fsdp_worker`; one dict per rank. Every
    argument is checked before anything is started."""
    world_size = check_int("world_size", world_size, 1)
    _check_run(config, batch, steps, lr, dtype)
    check_positive("timeout", timeout)
    ParallelDegrees(data=world_size, sharding=world_size).check_divides("data", "the batch",
                                                                        batch)
    return spawn(fsdp_worker, world_size, config, batch, steps, lr, dtype, timeout=timeout)


#: The 2 x 2 mesh of the book, two data-parallel rows (each sharding the state, FSDP2) of two
#: tensor shards.
MESH_2X2 = ParallelDegrees(data=2, tensor=2, sharding=2)


def run_mesh_2d(degrees: ParallelDegrees = MESH_2X2, config: EncoderConfig = MESH_CONFIG,
                batch: int = 8, steps: int = 2, lr: float = 0.05,
                dtype: torch.dtype = torch.float32, timeout: float = 120.0) -> list[dict]:
    """Spawn ``degrees.world_size`` ranks running :func:`mesh_2d_worker`; one dict per rank.
    The degrees and sizes are checked before anything is started."""
    _check_run(config, batch, steps, lr, dtype)
    check_positive("timeout", timeout)
    _check_mesh(degrees, config, batch)
    return spawn(mesh_2d_worker, degrees.world_size, degrees, config, batch, steps, lr, dtype,
                 timeout=timeout)


def _both_worker(rank: int, world_size: int) -> dict[str, float]:
    reference = encoder_sgd_run(MESH_CONFIG, 8, 2, 0.05)
    runs = {"fsdp2": fsdp_worker(rank, world_size, MESH_CONFIG, 8, 2, 0.05, torch.float32)}
    if world_size == 4:
        runs["2x2"] = mesh_2d_worker(rank, world_size, MESH_2X2, MESH_CONFIG, 8, 2, 0.05,
                                     torch.float32)
    return {name: largest(largest_difference(got["grads"][s][k], g)
                          for s, step in enumerate(reference["grads"]) for k, g in step.items())
            for name, got in runs.items()}


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun``: FSDP2 on all ranks, and the 2 x 2 mesh when there are four; rank 0
    prints the largest gradient difference from one process (float32)."""
    argparse.ArgumentParser(prog="torchrun --nproc_per_node=N -m gpudl.parallel.mesh",
                            description=main.__doc__).parse_args(argv)
    errors = run_under_torchrun(_both_worker)
    rank0_print("largest gradient difference from one process: "
                + ", ".join(f"{name} {error:.2e}" for name, error in errors.items()))


if __name__ == "__main__":
    main()
