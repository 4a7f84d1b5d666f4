"""Expert parallelism in training, composed with data parallelism, against one process: the
output, the load-balancing loss and every gradient, step by step.

Book section: *Chapter 11, Expert parallelism inside data parallelism*.

The ranks are ``data`` data-parallel ranks, each with its own slice of the batch; the experts
are spread over groups of ``expert`` of them (:class:`~gpudl.parallel.degrees.ParallelDegrees`:
``expert`` divides ``data``), so each expert is held by ``data / expert`` ranks, its
expert-data-parallel group. After the backward pass the router's gradient is averaged over all
``data`` ranks, as data parallelism does, and each expert's over its expert-data-parallel
group, divided by ``data`` (:func:`~gpudl.parallel.experts.comms.reduce_gradients`). One
process computes the same layer on the whole batch, routed in ``data`` groups
(:func:`moe_sgd_run`); the two must agree at every step.

``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.experts`` runs both dispatchers
(and, with ``--expert 2``, expert parallelism inside data parallelism) and prints how far each
is from one process.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from gpudl.checks import (
    check_choice,
    check_instance,
    check_int,
    check_positive,
    largest,
    largest_difference,
)
from gpudl.models.encoder import DTYPES
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.parallel.experts.comms import gather_tokens, reduce_gradients
from gpudl.parallel.experts.layer import MOE_CONFIG, MoEConfig, MoELayer, MoEOutput, moe_batch
from gpudl.parallel.experts.parallel import (
    EXPERT_WEIGHTS,
    ExpertParallelMoE,
    NaiveExpertParallelMoE,
    full_gradients,
)
from gpudl.parallel.spawn import device_and_sync, rank0_print, run_under_torchrun, spawn

__all__ = ["DISPATCHERS", "ExpertParallelRun", "differences", "expert_parallel_worker", "main",
           "moe_sgd_run", "run_expert_parallel"]

#: The ways tokens reach their experts, by two all-to-alls (:class:`ExpertParallelMoE`) or by
#: the naive all-gather and reduce-scatter (:class:`NaiveExpertParallelMoE`).
DISPATCHERS = {"all_to_all": ExpertParallelMoE, "all_gather": NaiveExpertParallelMoE}


@dataclass(frozen=True)
class ExpertParallelRun:
    """``steps`` SGD steps of the layer of ``config`` on ``tokens_per_rank`` tokens per
    data-parallel rank, the experts spread by ``degrees`` (data x expert: tensor, pipeline and
    context 1, nothing sharded), tokens carried by ``dispatcher``."""

    degrees: ParallelDegrees = ParallelDegrees(data=2, expert=2)
    dispatcher: str = "all_to_all"
    config: MoEConfig = MOE_CONFIG
    tokens_per_rank: int = 16
    steps: int = 2
    lr: float = 0.1
    dtype: torch.dtype = torch.float64

    def __post_init__(self) -> None:
        degrees = check_instance("degrees", self.degrees, ParallelDegrees)
        if (degrees.tensor, degrees.pipeline, degrees.context, degrees.sharding) != (1,) * 4:
            raise ValueError(f"degrees must be data x expert (tensor, pipeline, context and "
                             f"sharding 1): expert parallelism here runs inside data "
                             f"parallelism alone, got {degrees}")
        degrees.check_divides("expert", "experts", check_instance(
            "config", self.config, MoEConfig).experts)
        check_choice("dispatcher", self.dispatcher, DISPATCHERS)
        check_int("tokens_per_rank", self.tokens_per_rank, 1)
        check_int("steps", self.steps, 1)
        check_positive("lr", self.lr)
        check_choice("dtype", self.dtype, DTYPES)

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless the degrees multiply to ``world_size``."""
        self.degrees.check_world_size(world_size)


def _loss(out: MoEOutput, target: torch.Tensor, aux_weight: float) -> torch.Tensor:
    """The training loss: the mean squared error plus ``aux_weight`` times the
    load-balancing loss."""
    return nn.functional.mse_loss(out.output, target) + aux_weight * out.aux


def _record(history: dict, output: torch.Tensor, loss: float, aux: float, grads: dict,
            counts: list, dropped: list) -> None:
    for key, value in (("outputs", output), ("losses", loss), ("aux", aux), ("grads", grads),
                       ("counts", counts), ("dropped", dropped)):
        history[key].append(value)


def _history() -> dict:
    return {key: [] for key in ("outputs", "aux", "losses", "grads", "counts", "dropped")}


def moe_sgd_run(config: MoEConfig = MOE_CONFIG, groups: int = 2, tokens_per_group: int = 16,
                steps: int = 2, lr: float = 0.1, dtype: torch.dtype = torch.float64) -> dict:
    """``steps`` SGD steps of :class:`MoELayer` in one process on :func:`moe_batch` of
    ``groups x tokens_per_group`` tokens, routed in ``groups`` groups (one per data-parallel
    rank). Per step: ``outputs`` (tokens, hidden), ``aux`` (the load-balancing loss, mean over
    the groups), ``losses`` (mean squared error plus ``aux_weight x aux``), ``grads``
    (``router``, ``w1``, ``b1``, ``w2``, ``b2`` and ``input``, the gradient of the layer's
    input), ``counts`` (each group's choices per expert) and ``dropped`` (each group's
    dropped choices): what :func:`run_expert_parallel` must give."""
    check_instance("config", config, MoEConfig)
    check_int("groups", groups, 1)
    check_int("steps", steps, 1)
    check_positive("lr", lr)
    layer = MoELayer(config, dtype)
    x, y = moe_batch(config, groups * check_int("tokens_per_group", tokens_per_group, 1),
                     dtype=dtype)
    x.requires_grad_()  # as the output of the layer below would
    optimizer = torch.optim.SGD(layer.parameters(), lr=lr)
    history = _history()
    for _ in range(steps):
        optimizer.zero_grad()
        x.grad = None
        out = layer(x, groups)
        loss = _loss(out, y, config.aux_weight)
        loss.backward()
        grads = {name: p.grad.detach().clone() for name, p in layer.named_parameters()}
        _record(history, out.output.detach(), loss.item(), out.aux.item(),
                grads | {"input": x.grad.detach().clone()},
                [r.counts.tolist() for r in out.routings], [r.dropped for r in out.routings])
        optimizer.step()
    return history


def _run(run: ExpertParallelRun, rank: int, world_size: int) -> dict:
    run.check_world_size(world_size)
    device, _ = device_and_sync()
    degrees, config = run.degrees, run.config
    data = degrees.device_mesh(device.type, ("data",)).get_group()
    mesh = degrees.device_mesh(device.type, ("expert_data", "expert"))
    module = DISPATCHERS[run.dispatcher](MoELayer(config, run.dtype), mesh["expert"].get_group()
                                         ).to(device)
    x, y = (t[rank * run.tokens_per_rank:(rank + 1) * run.tokens_per_rank].to(device)
            for t in moe_batch(config, degrees.data * run.tokens_per_rank, dtype=run.dtype))
    x.requires_grad_()
    optimizer = torch.optim.SGD(module.parameters(), lr=run.lr)
    experts = [getattr(module, name) for name in EXPERT_WEIGHTS]
    history = _history()
    for _ in range(run.steps):
        optimizer.zero_grad()
        x.grad = None
        out = module(x)
        loss = _loss(out, y, config.aux_weight)
        loss.backward()
        reduce_gradients([module.router], data, degrees.data)
        reduce_gradients(experts, mesh["expert_data"].get_group(), degrees.data)
        scalars = torch.stack([loss.detach(), out.aux.detach()]) / degrees.data
        dist.all_reduce(scalars, group=data)
        routing = out.routings[0]
        stats = gather_tokens(torch.cat([routing.counts, routing.counts.new_tensor(
            [routing.dropped])])[None], data).cpu()
        grads = full_gradients(module) | {
            "input": gather_tokens(x.grad.detach(), data).cpu() / degrees.data}
        _record(history, gather_tokens(out.output.detach(), data).cpu(), scalars[0].item(),
                scalars[1].item(), grads, stats[:, :-1].tolist(), stats[:, -1].tolist())
        optimizer.step()
    return history | {"rank": rank, "coords": (mesh["expert_data"].get_local_rank(),
                                               mesh["expert"].get_local_rank())}


def expert_parallel_worker(rank: int, world_size: int, runs: Sequence[ExpertParallelRun]
                           ) -> list[dict]:
    """Each of ``runs`` in turn on this rank. Returned per run: :func:`moe_sgd_run`'s keys,
    every value whole (the outputs and input gradients of all ranks, in rank order; the
    experts' gradients gathered from their ranks), and ``rank`` and ``coords`` (this rank's
    ``(expert_data, expert)`` place)."""
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    _check_runs(runs, world_size, allow_empty=True)
    return [_run(run, rank, world_size) for run in runs]


def _check_runs(runs: object, world_size: int, allow_empty: bool = False) -> None:
    if isinstance(runs, str) or not isinstance(runs, Sequence):
        raise TypeError(f"runs must be a list of ExpertParallelRun, got {type(runs).__name__}")
    if not runs and not allow_empty:
        raise ValueError("runs must list at least one ExpertParallelRun")
    for i, run in enumerate(runs):
        check_instance(f"runs[{i}]", run, ExpertParallelRun).check_world_size(world_size)


def run_expert_parallel(runs: Sequence[ExpertParallelRun], world_size: int,
                        timeout: float = 120.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`expert_parallel_worker` (gloo on the CPU,
    NCCL with a GPU per rank); one list per run, of one dict per rank. Every run and its
    degrees are checked against ``world_size`` before anything is started."""
    check_int("world_size", world_size, 1)
    check_positive("timeout", timeout)
    _check_runs(runs, world_size)
    by_rank = spawn(expert_parallel_worker, world_size, tuple(runs), timeout=timeout)
    return [[by_rank[rank][k] for rank in range(world_size)] for k in range(len(runs))]


def differences(result: dict, reference: dict) -> dict[str, float | bool]:
    """The largest absolute differences between a run and :func:`moe_sgd_run` over every
    step: ``outputs``, ``aux``, ``losses`` and ``grads`` (every gradient; each NaN if any
    differs by NaN), and ``routing_equal``: the same choices per expert and the same dropped
    choices in every group."""
    for name, value in (("result", result), ("reference", reference)):
        check_instance(name, value, dict)
    steps = range(len(reference["losses"]))
    return {
        "outputs": largest(largest_difference(result["outputs"][s], reference["outputs"][s])
                           for s in steps),
        "aux": largest_difference(result["aux"], reference["aux"]),
        "losses": largest_difference(result["losses"], reference["losses"]),
        "grads": largest(largest_difference(result["grads"][s][k], g)
                         for s in steps for k, g in reference["grads"][s].items()),
        "routing_equal": (result["counts"] == reference["counts"]
                          and result["dropped"] == reference["dropped"]),
    }


def main(argv: list[str] | None = None) -> None:
    """Under ``torchrun`` on N ranks: expert parallelism over all N (both dispatchers), or
    with ``--expert E`` inside N-way data parallelism; rank 0 prints the largest differences
    from one process (float64)."""
    parser = argparse.ArgumentParser(prog="torchrun --nproc_per_node=N -m gpudl.parallel.experts",
                                     description=main.__doc__)
    parser.add_argument("--expert", type=int, default=None,
                        help="the expert-parallel degree (default: every rank)")
    opts = parser.parse_args(argv)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's (1: a plain process)
    try:
        degrees = ParallelDegrees(data=world_size, expert=opts.expert or world_size)
        runs = [ExpertParallelRun(degrees, dispatcher) for dispatcher in DISPATCHERS]
    except (TypeError, ValueError) as err:
        parser.error(str(err))
    results = run_under_torchrun(expert_parallel_worker, runs)
    reference = moe_sgd_run(groups=world_size)
    for run, got in zip(runs, results, strict=True):
        diff = differences(got, reference)
        rank0_print(f"{run.dispatcher}, data {degrees.data} x expert {degrees.expert}: largest "
                    f"difference from one process: output {diff['outputs']:.1e}, aux "
                    f"{diff['aux']:.1e}, gradients {diff['grads']:.1e}; the same routing: "
                    f"{diff['routing_equal']}")
