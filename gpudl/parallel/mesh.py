"""Combining: data and tensor parallelism at once on a two-dimensional device mesh.

Book section: *Chapter 6, "Two dimensions"*.

:func:`mesh_2d_worker` arranges the ranks in a grid of ``data x tensor`` (a
:class:`ParallelDegrees` whose sharding degree is its data degree):
the ranks of a row share a batch slice and split every block with
:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`; the ranks of a column own the same
tensor-parallel slice and average their gradients, by FSDP2 over the mesh's ``"data"``
dimension, which also splits that slice's state between them. FSDP2 alone on the encoder is
:mod:`gpudl.parallel.zero.fsdp`'s.

``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.mesh`` runs the 2 x 2 mesh and
prints its distance from one process.
"""

from __future__ import annotations

import logging

import torch
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import parallelize_module

from gpudl.checks import check_instance, check_int, check_positive
from gpudl.models.encoder import EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.encoder_plan import DTENSOR_PLAN, check_dtensor_plan
from gpudl.parallel.one_process import (
    MESH_CONFIG,
    check_encoder_run,
    compare_under_torchrun,
    sgd_on_slice,
)
from gpudl.parallel.spawn import device_and_sync, spawn

__all__ = ["MESH_2X2", "main", "mesh_2d_worker", "run_mesh_2d"]


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


def mesh_2d_worker(rank: int, world_size: int, degrees: ParallelDegrees,
                   config: EncoderConfig, batch: int, steps: int, lr: float,
                   dtype: torch.dtype) -> dict:
    """``steps`` SGD steps on a ``degrees.data x degrees.tensor`` mesh: tensor parallelism
    (:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`) along ``"tensor"``, FSDP2 along
    ``"data"``, each data-parallel row on its slice of the batch. Returns ``losses``,
    ``grads`` (whole, as one process names them) and ``coords``, this rank's
    ``(data, tensor)`` place in the grid."""
    check_encoder_run(config, batch, steps, lr, dtype)
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
            **sgd_on_slice(model, x, y, steps, lr, mesh["data"].get_group(), degrees.data)}


#: The 2 x 2 mesh of the book, two data-parallel rows (each sharding the state, FSDP2) of two
#: tensor shards.
MESH_2X2 = ParallelDegrees(data=2, tensor=2, sharding=2)


def run_mesh_2d(degrees: ParallelDegrees = MESH_2X2, config: EncoderConfig = MESH_CONFIG,
                batch: int = 8, steps: int = 2, lr: float = 0.05,
                dtype: torch.dtype = torch.float32, timeout: float = 120.0) -> list[dict]:
    """Spawn ``degrees.world_size`` ranks running :func:`mesh_2d_worker`; one dict per rank.
    The degrees and sizes are checked before anything is started."""
    check_encoder_run(config, batch, steps, lr, dtype)
    check_positive("timeout", timeout)
    _check_mesh(degrees, config, batch)
    return spawn(mesh_2d_worker, degrees.world_size, degrees, config, batch, steps, lr, dtype,
                 timeout=timeout)


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun`` on four ranks: the 2 x 2 mesh; rank 0 prints the largest gradient
    difference from one process (float32)."""
    compare_under_torchrun(argv, "torchrun --nproc_per_node=4 -m gpudl.parallel.mesh",
                           main.__doc__, "2 x 2 mesh", mesh_2d_worker, MESH_2X2)


if __name__ == "__main__":
    main()
