"""Tensor parallelism in training: the encoder split by hand (:mod:`gpudl.parallel.tensor.layers`)
or by DTensor's ``parallelize_module`` (:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`),
every rank on the whole batch, against one process.

Book section: *Chapter 6, "The same with DTensor"*.

``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.tensor`` runs both on two
processes and prints how far each is from one process.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch.distributed.tensor.parallel import parallelize_module

from gpudl.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_positive,
)
from gpudl.interop import tensor_device
from gpudl.models.encoder import DTYPES, EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.encoder_plan import DTENSOR_PLAN, check_dtensor_plan
from gpudl.parallel.one_process import encoder_sgd_run, gradient_difference, whole
from gpudl.parallel.spawn import device_and_sync, rank0_print, run_under_torchrun, spawn
from gpudl.parallel.tensor.comms import count_all_reduces
from gpudl.parallel.tensor.layers import full_gradients, parallelize_block

__all__ = [
    "ENGINES",
    "TENSOR_CONFIG",
    "TensorParallelRun",
    "main",
    "run_tensor_parallel",
    "tensor_parallel_worker",
]

ENGINES = ("hand", "dtensor")


#: Two blocks of the tiny encoder, since each simulated kernel launch costs about 0.1 s on a CPU.
TENSOR_CONFIG = EncoderConfig(layers=2)


@dataclass(frozen=True)
class TensorParallelRun:
    """``steps`` SGD steps of the encoder of ``config`` on a batch of ``batch``, every rank on
    the whole batch, tensor-parallel by ``engine``: ``"hand"`` (:func:`parallelize_block`;
    ``fused``, the default, uses the float32 bias + GeLU kernel, ``fused=False`` torch's GeLU)
    or ``"dtensor"`` (:data:`~gpudl.parallel.encoder_plan.DTENSOR_PLAN`, torch's GeLU)."""

    engine: str = "hand"
    fused: bool | None = None
    dtype: torch.dtype = torch.float32
    config: EncoderConfig = TENSOR_CONFIG
    batch: int = 2
    steps: int = 2
    lr: float = 0.05

    def __post_init__(self) -> None:
        check_choice("engine", self.engine, ENGINES)
        check_choice("dtype", self.dtype, DTYPES)
        check_instance("config", self.config, EncoderConfig)
        check_positive("lr", self.lr)
        if self.fused is not None:
            check_bool("fused", self.fused)
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
        degrees = ParallelDegrees(tensor=check_int("world_size", world_size, 1))
        for what in ("heads", "hidden", "ffn"):
            degrees.check_divides("tensor", what, getattr(self.config, what))


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
        mesh = ParallelDegrees(tensor=world_size).device_mesh(device.type, ("tensor",))
        for block in model:
            check_dtensor_plan(block, DTENSOR_PLAN)
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
        grads.append(full_gradients(model) if run.engine == "hand" else
                     {name: whole(p.grad) for name, p in model.named_parameters()})
        optimizer.step()
    return {"losses": losses, "grads": grads, "all_reduces": all_reduces}


def tensor_parallel_worker(rank: int, world_size: int, runs: Sequence[TensorParallelRun]
                           ) -> list[dict]:
    """Each of ``runs`` in turn, tensor-parallel over all ranks. Returned per run:
    ``losses`` (one per step), ``grads`` (gathered whole and named as in the unsplit encoder,
    one dict per step) and ``all_reduces`` (one ``{"forward": n, "backward": n, "bytes": b}``
    per step, by :func:`count_all_reduces`; ``bytes`` counts the hand-written engine's)."""
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    if isinstance(runs, str) or not isinstance(runs, Sequence):
        raise TypeError(f"runs must be a list of TensorParallelRun, got {type(runs).__name__}")
    for i, run in enumerate(runs):
        check_instance(f"runs[{i}]", run, TensorParallelRun)
    return [_run(run, world_size) for run in runs]


def run_tensor_parallel(runs: Sequence[TensorParallelRun], world_size: int = 2,
                        timeout: float = 120.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`tensor_parallel_worker`; one list per run,
    of one dict per rank. The sizes are checked before anything is started."""
    if isinstance(runs, str) or not isinstance(runs, Sequence):
        raise TypeError(f"runs must be a list of TensorParallelRun, got {type(runs).__name__}")
    runs = tuple(runs)
    if not runs:
        raise ValueError("runs must list at least one TensorParallelRun")
    check_int("world_size", world_size, 1)
    check_positive("timeout", timeout)
    for i, run in enumerate(runs):
        check_instance(f"runs[{i}]", run, TensorParallelRun)
        run.check_world_size(world_size)
    by_rank = spawn(tensor_parallel_worker, world_size, runs, timeout=timeout)
    return [[by_rank[rank][k] for rank in range(world_size)] for k in range(len(runs))]


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun``: both engines on the tiny encoder (float32); rank 0 prints the
    largest gradient difference from one process and the all-reduces of a step."""
    argparse.ArgumentParser(
        prog="torchrun --nproc_per_node=N -m gpudl.parallel.tensor",
        description=main.__doc__).parse_args(argv)
    runs = (TensorParallelRun("hand"), TensorParallelRun("dtensor"))
    results = run_under_torchrun(tensor_parallel_worker, runs)
    reference = encoder_sgd_run(TENSOR_CONFIG, 2, 2, 0.05)
    for run, got in zip(runs, results, strict=True):
        error = gradient_difference(got, reference)
        counts = got["all_reduces"][0]
        rank0_print(f"{run.engine}: largest gradient difference from one process "
                    f"{error:.2e}; all-reduces per step: {counts['forward']} forward, "
                    f"{counts['backward']} backward")


if __name__ == "__main__":
    main()
