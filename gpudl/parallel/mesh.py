"""Sharding and combining: FSDP2 on the encoder, and data and tensor parallelism at once on a
two-dimensional device mesh.

Book section: *Chapter 6, "Sharding the encoder"* and *"Two dimensions"*.

:func:`fsdp_worker` shards every block of :func:`gpudl.models.make_encoder` with FSDP2
(``fully_shard``, as Chapter 2's :mod:`gpudl.parallel.sharding` does for an MLP): each rank
keeps ``1/N`` of every parameter, gathers a block's parameters just before using it, and
reduce-scatters its gradients, while every rank runs its own slice of the batch (data
parallelism with sharded state, ZeRO stage 3).

:func:`mesh_2d_worker` arranges the ranks in a grid of ``data x tensor`` (a
:class:`ParallelDegrees`): the ranks of a row share a batch slice and split every block
with :data:`gpudl.parallel.tensor_parallel.DTENSOR_PLAN`; the ranks of a column hold the
same shards and average their gradients, by FSDP2 over the mesh's ``"data"`` dimension.

``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.mesh`` runs both (FSDP2 on 4
ranks, then 2 x 2) and prints each one's distance from one process.
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import DTensor
from torch.distributed.tensor.parallel import parallelize_module

from gpudl.checks import check_int
from gpudl.models import EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.comms import device_and_sync
from gpudl.parallel.launch import rank0_print, run_under_torchrun, spawn
from gpudl.parallel.pipeline_parallel import reference_steps
from gpudl.parallel.sharding import local_bytes
from gpudl.parallel.tensor_parallel import DTENSOR_PLAN, check_plan

__all__ = [
    "SMALL",
    "ParallelDegrees",
    "fsdp_worker",
    "main",
    "mesh_2d_worker",
    "run_fsdp",
    "run_mesh_2d",
]

#: The encoder of the equivalence runs, four blocks, small enough for four ranks on two cores.
SMALL = EncoderConfig(layers=4)


@dataclass(frozen=True)
class ParallelDegrees:
    """How many ways each strategy splits the work: ``data`` (batch slices) times ``tensor``
    (shards of every layer) ranks in all."""

    data: int = 1
    tensor: int = 1

    def __post_init__(self) -> None:
        check_int("data", self.data, 1)
        check_int("tensor", self.tensor, 1)

    @property
    def world_size(self) -> int:
        return self.data * self.tensor

    def check(self, world_size: int) -> None:
        """``ValueError`` unless the degrees multiply to ``world_size``: every rank must have
        exactly one place in the grid."""
        if self.world_size != world_size:
            raise ValueError(f"the parallel degrees must multiply to the world size: data "
                             f"{self.data} x tensor {self.tensor} = {self.world_size}, but the "
                             f"world size is {world_size}")


def _check_batch(batch: int, ways: int) -> None:
    check_int("batch", batch, 1)
    if batch % ways:
        raise ValueError(f"the batch ({batch}) must split evenly into {ways} data-parallel "
                         "slices")


def _full(t: torch.Tensor) -> torch.Tensor:
    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().cpu()


def _train(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float,
           data_group: torch.distributed.ProcessGroup | None, data_ways: int) -> dict:
    """SGD steps on this rank's slice; the loss reported is the whole batch's (the mean over
    the equal data-parallel slices), the gradients whole."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, grads = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        total = loss.detach().clone()
        dist.all_reduce(total, group=data_group)
        losses.append(total.item() / data_ways)
        grads.append({name: _full(p.grad) for name, p in model.named_parameters()})
        optimizer.step()
    return {"losses": losses, "grads": grads}


def fsdp_worker(rank: int, world_size: int, config: EncoderConfig, batch: int, steps: int,
                lr: float, dtype: torch.dtype) -> dict:
    """``steps`` SGD steps of the encoder with FSDP2 on every block and the root, rank
    ``r`` on samples ``[r b/N, (r + 1) b/N)``. Returns ``losses`` and ``grads`` (as
    :func:`gpudl.parallel.pipeline_parallel.reference_steps`), ``param_bytes`` (this rank's
    shards) and ``full_param_bytes`` (the whole model)."""
    _check_batch(batch, world_size)
    device, _ = device_and_sync()
    model = make_encoder(config, dtype=dtype).to(device)
    full_bytes = local_bytes(list(model.parameters()))
    mesh = init_device_mesh(device.type, (world_size,))
    for block in model:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    mine = slice(rank * batch // world_size, (rank + 1) * batch // world_size)
    x, y = (t[mine].to(device) for t in encoder_batch(config, batch, dtype=dtype))
    param_bytes = local_bytes(list(model.parameters()))
    return {"rank": rank, "param_bytes": param_bytes, "full_param_bytes": full_bytes,
            **_train(model, x, y, steps, lr, None, world_size)}


def mesh_2d_worker(rank: int, world_size: int, degrees: ParallelDegrees,
                   config: EncoderConfig, batch: int, steps: int, lr: float,
                   dtype: torch.dtype) -> dict:
    """``steps`` SGD steps on a ``degrees.data x degrees.tensor`` mesh: tensor parallelism
    (:data:`~gpudl.parallel.tensor_parallel.DTENSOR_PLAN`) along ``"tensor"``, FSDP2 along
    ``"data"``, each data-parallel row on its slice of the batch. Returns ``losses``,
    ``grads`` (whole, as one process names them) and ``coords``, this rank's
    ``(data, tensor)`` place in the grid."""
    degrees.check(world_size)
    _check_batch(batch, degrees.data)
    # Gathering a (data, tensor)-sharded gradient whole takes two all-gathers, and DTensor
    # warns that this is slow; the check does it once per step, on purpose.
    logging.getLogger("torch.distributed.tensor._redistribute").setLevel(logging.ERROR)
    device, _ = device_and_sync()
    mesh = init_device_mesh(device.type, (degrees.data, degrees.tensor),
                            mesh_dim_names=("data", "tensor"))
    model = make_encoder(config, dtype=dtype).to(device)
    for block in model:
        check_plan(block, DTENSOR_PLAN)
        parallelize_module(block, mesh["tensor"], DTENSOR_PLAN)
        fully_shard(block, mesh=mesh["data"])
    fully_shard(model, mesh=mesh["data"])
    row = mesh["data"].get_local_rank()
    mine = slice(row * batch // degrees.data, (row + 1) * batch // degrees.data)
    x, y = (t[mine].to(device) for t in encoder_batch(config, batch, dtype=dtype))
    return {"rank": rank, "coords": (row, mesh["tensor"].get_local_rank()),
            **_train(model, x, y, steps, lr, mesh["data"].get_group(), degrees.data)}


def run_fsdp(world_size: int = 2, config: EncoderConfig = SMALL, batch: int = 8,
             steps: int = 2, lr: float = 0.05, dtype: torch.dtype = torch.float32,
             timeout: float = 120.0) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`fsdp_worker`; one dict per rank."""
    _check_batch(batch, check_int("world_size", world_size, 1))
    return spawn(fsdp_worker, world_size, config, batch, steps, lr, dtype, timeout=timeout)


def run_mesh_2d(degrees: ParallelDegrees = ParallelDegrees(2, 2), config: EncoderConfig = SMALL,
                batch: int = 8, steps: int = 2, lr: float = 0.05,
                dtype: torch.dtype = torch.float32, timeout: float = 120.0) -> list[dict]:
    """Spawn ``degrees.world_size`` ranks running :func:`mesh_2d_worker`; one dict per rank."""
    if not isinstance(degrees, ParallelDegrees):
        raise TypeError(f"degrees must be a ParallelDegrees, got {type(degrees).__name__}")
    for what in ("heads", "hidden", "ffn"):
        if getattr(config, what) % degrees.tensor:
            raise ValueError(f"{what} ({getattr(config, what)}) must be divisible by the "
                             f"tensor-parallel degree ({degrees.tensor})")
    _check_batch(batch, degrees.data)
    return spawn(mesh_2d_worker, degrees.world_size, degrees, config, batch, steps, lr, dtype,
                 timeout=timeout)


def _both_worker(rank: int, world_size: int) -> dict[str, float]:
    reference = reference_steps(SMALL, 8, 2, 0.05)
    runs = {"fsdp2": fsdp_worker(rank, world_size, SMALL, 8, 2, 0.05, torch.float32)}
    if world_size == 4:
        runs["2x2"] = mesh_2d_worker(rank, world_size, ParallelDegrees(2, 2), SMALL, 8, 2,
                                     0.05, torch.float32)
    return {name: max((got["grads"][s][k] - g).abs().max().item()
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
