"""FSDP2 (ZeRO stage 3): what sharding saves, the bytes of parameters, gradients and Adam state
each rank holds after a training step with the model replicated or sharded, and the encoder
sharded block by block, trained as one process trains it.

Book section: *Chapter 6, "FSDP2: the parameters too"* (the bytes) and *"Sharding the
encoder"* (:func:`fsdp_worker`, :func:`run_fsdp`). The formula is
:func:`gpudl.estimate.model_state_memory` (ZeRO's accounting); this module counts the bytes in
the tensors a step leaves on each rank, to hold the formula to, on the MLP of
:data:`~gpudl.parallel.one_process.SHARDING_DIMS`.

FSDP2 (``torch.distributed.fsdp.fully_shard``) shards every parameter along dim 0: with
``N`` ranks and ``d0`` rows, each rank owns a chunk of ``c = ceil(d0 / N)`` rows, so rank ``r``
holds rows ``[r c, min((r + 1) c, d0))`` (:func:`shard_numel`), and the last ranks may hold
fewer rows, or none. The parameter's storage is padded to ``c`` rows on every rank, so that the
all-gather moves equal chunks; the local tensor (``DTensor.to_local()``), its gradient and its
Adam state have the unpadded size. The gradients are reduce-scattered and Adam updates only the
local shard, so parameters, gradients and optimizer state are all divided: ZeRO stage 3.

:func:`fsdp_worker` shards every block of :func:`gpudl.models.make_encoder` and then the root:
each rank keeps ``1/N`` of every parameter, gathers a block's parameters just before using it,
and reduce-scatters its gradients, while every rank runs its own slice of the batch.
``torchrun --standalone --nproc_per_node=N -m gpudl.parallel.zero.fsdp`` runs it and prints
its distance from one process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from gpudl.checks import check_choice, check_int, check_ints, check_positive, check_widths
from gpudl.models.encoder import EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.one_process import (
    BATCH_PER_RANK,
    MESH_CONFIG,
    SHARDING_DIMS,
    average_gradients,
    check_encoder_run,
    compare_under_torchrun,
    local_bytes,
    make_batch,
    make_mlp,
    sgd_on_slice,
)
from gpudl.parallel.spawn import device_and_sync, spawn

__all__ = ["LR", "STRATEGIES", "format_table", "shard_numel", "state_bytes", "state_bytes_worker",
           "fsdp_worker", "run_fsdp", "main"]

STRATEGIES = ("replicated", "fsdp2")
#: Adam's learning rate in the measured step, as in
#: :func:`gpudl.parallel.one_process.adam_step_loss`.
LR = 1e-2


def shard_numel(shape: Sequence[int], world_size: int, rank: int) -> int:
    """Elements of a parameter of ``shape`` that FSDP2 leaves on ``rank`` (see the module)."""
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    shape = check_ints("shape", shape, 0)
    d0, rest = shape[0], math.prod(shape[1:])
    chunk = math.ceil(d0 / world_size)
    return max(0, min((rank + 1) * chunk, d0) - rank * chunk) * rest


def _check_strategy(strategy: str) -> None:
    check_choice("strategy", strategy, STRATEGIES)


def _shard(model: nn.Module, device_type: str) -> None:
    """FSDP2: shard each Linear (a unit of all-gather), then the root."""
    n = dist.get_world_size()
    mesh = ParallelDegrees(data=n, sharding=n).device_mesh(device_type)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def state_bytes_worker(
    rank: int, world_size: int, strategy: str, dims: Sequence[int] = SHARDING_DIMS
) -> dict:
    """One Adam step of :func:`make_mlp` (fp32), then the bytes of model state on this rank.

    Every rank builds the same model (same seed) and takes its own slice of
    :func:`make_batch` (mean-squared error). ``"replicated"``: each rank keeps the
    whole model and the gradients are all-reduced; ``"fsdp2"``: ``fully_shard`` on every
    Linear and the root. Returned, counted from the local tensors: ``param_bytes``,
    ``grad_bytes``, ``adam_bytes`` (``exp_avg`` and ``exp_avg_sq``) and their sum
    ``total_bytes``, ZeRO's model state; ``step_bytes`` apart, Adam's step counters (one fp32
    scalar per parameter tensor, whole on every rank, not in ZeRO's accounting). Also
    ``n_params`` and ``loss``, the batch's loss after the step: the same on every rank, and as
    :func:`gpudl.parallel.one_process.adam_step_loss` to rounding.
    """
    _check_strategy(strategy)
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    check_widths("dims", dims)
    device, _ = device_and_sync()
    model = make_mlp(dims).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    if strategy == "fsdp2":
        _shard(model, device.type)
    mine = slice(rank * BATCH_PER_RANK, (rank + 1) * BATCH_PER_RANK)
    x, y = (t[mine].to(device) for t in make_batch(world_size, dims))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)

    nn.functional.mse_loss(model(x), y).backward()
    if strategy == "replicated":
        average_gradients(model)
    optimizer.step()

    params = list(model.parameters())  # counted before the next forward can unshard them
    states = [optimizer.state[p] for p in params]
    counts = {
        "param_bytes": local_bytes(params),
        "grad_bytes": local_bytes([p.grad for p in params]),
        "adam_bytes": local_bytes([s[k] for s in states for k in ("exp_avg", "exp_avg_sq")]),
        "step_bytes": local_bytes([s["step"] for s in states]),
    }
    with torch.no_grad():
        loss = nn.functional.mse_loss(model(x), y).detach()
    dist.all_reduce(loss)
    return {
        "rank": rank, "world_size": world_size, "strategy": strategy, "n_params": n_params,
        **counts,
        "total_bytes": counts["param_bytes"] + counts["grad_bytes"] + counts["adam_bytes"],
        "loss": loss.item() / world_size,
    }


def state_bytes(
    world_size: int, strategy: str, dims: Sequence[int] = SHARDING_DIMS, timeout: float = 120.0
) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`state_bytes_worker`; one dict per rank."""
    _check_strategy(strategy)
    check_widths("dims", dims)
    check_int("world_size", world_size, 1)
    check_positive("timeout", timeout)
    return spawn(state_bytes_worker, world_size, strategy, tuple(dims), timeout=timeout)


def format_table(rows: list[dict]) -> str:
    """The rows of :func:`state_bytes` as a text table, every column in bytes (the step
    counters are Adam's, one per parameter tensor)."""
    lines = [f"{'strategy':>10} {'ranks':>5} {'rank':>4} {'params':>8} {'grads':>8} "
             f"{'Adam m,v':>8} {'total':>8} {'step counters':>13}"]
    for row in rows:
        lines.append(
            f"{row['strategy']:>10} {row['world_size']:>5} {row['rank']:>4} "
            f"{row['param_bytes']:>8} {row['grad_bytes']:>8} {row['adam_bytes']:>8} "
            f"{row['total_bytes']:>8} {row['step_bytes']:>13}"
        )
    return "\n".join(lines)


# --- the encoder, sharded -------------------------------------------------------------------


def fsdp_worker(rank: int, world_size: int, config: EncoderConfig, batch: int, steps: int,
                lr: float, dtype: torch.dtype) -> dict:
    """``steps`` SGD steps of the encoder with FSDP2 on every block and the root, rank
    ``r`` on samples ``[r b/N, (r + 1) b/N)``. Returns ``losses`` and ``grads`` (as
    :func:`gpudl.parallel.one_process.encoder_sgd_run`), ``param_bytes`` (this rank's
    shards) and ``full_param_bytes`` (the whole model)."""
    check_encoder_run(config, batch, steps, lr, dtype)
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
            **sgd_on_slice(model, x, y, steps, lr, None, world_size)}


def run_fsdp(world_size: int = 2, config: EncoderConfig = MESH_CONFIG, batch: int = 8,
             steps: int = 2, lr: float = 0.05, dtype: torch.dtype = torch.float32,
             timeout: float = 120.0) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`fsdp_worker`; one dict per rank. Every
    argument is checked before anything is started."""
    world_size = check_int("world_size", world_size, 1)
    check_encoder_run(config, batch, steps, lr, dtype)
    check_positive("timeout", timeout)
    ParallelDegrees(data=world_size, sharding=world_size).check_divides("data", "the batch",
                                                                        batch)
    return spawn(fsdp_worker, world_size, config, batch, steps, lr, dtype, timeout=timeout)


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun``: FSDP2 on the encoder over all ranks; rank 0 prints the largest
    gradient difference from one process (float32)."""
    compare_under_torchrun(argv, "torchrun --nproc_per_node=N -m gpudl.parallel.zero.fsdp",
                           main.__doc__, "FSDP2", fsdp_worker)


if __name__ == "__main__":
    main()
