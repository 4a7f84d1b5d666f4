"""Pipeline parallelism in training: the encoder's blocks cut into stages, one per rank, run by
hand with ``send``/``recv`` under a schedule, and by ``torch.distributed.pipelining``.

Book section: *Chapter 6, "Pipeline parallelism"* (the articles' 12-layer / 4-GPU split,
claim C10).

The loss is the mean-squared error of the whole batch: each micro-batch's mean is divided by
``m`` and the gradients add up over the micro-batches, so a step gives the gradient of one
process on the whole batch. Every action is timed (:func:`pipeline_worker`).

Run the hand-written GPipe schedule on four processes with
``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.pipeline gpipe 8``
(add ``--pace 0.01`` on a CPU, see :class:`PipelinePlan`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from torch.profiler import record_function

from gpudl.checks import check_choice, check_instance, check_int, check_positive
from gpudl.estimate import bubble_fraction
from gpudl.models.encoder import DTYPES, EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.pipeline.comms import exchange
from gpudl.parallel.pipeline.schedule import (
    SCHEDULES,
    check_schedule,
    idle_fraction,
    schedule,
    stage_layers,
)
from gpudl.parallel.spawn import Clock, device_and_sync, rank0_print, run_under_torchrun, spawn

__all__ = [
    "ACTION_NAMES",
    "CPU_CONFIG",
    "CPU_PACE_S",
    "ENGINES",
    "GPU_CONFIG",
    "PipelinePlan",
    "main",
    "pipeline_worker",
    "run_pipelines",
]

ENGINES = ("hand", "torch")  # written here with send/recv, or torch.distributed.pipelining

#: The name of each action's range in a profiler's timeline, followed by its micro-batch
#: (``"forward 3"``): what :mod:`gpudl.profiles` reads back.
ACTION_NAMES = {"F": "forward", "B": "backward"}


_TORCH_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


@dataclass(frozen=True)
class PipelinePlan:
    """One pipelined run: ``steps`` SGD steps of ``schedule`` over ``microbatches`` on a batch
    of ``batch`` samples, hand-written (``engine="hand"``) or by torch's pipelining.

    ``pace_s``, hand-written only and on CPU tensors only: each forward is stretched to take
    at least ``pace_s`` seconds per sample of its micro-batch, each backward twice that, so
    that every stage costs the same however many processes share the CPU's cores (the
    assumption of :func:`bubble_fraction`); ``None`` times the bare compute.
    """

    schedule: str = "gpipe"
    microbatches: int = 4
    engine: str = "hand"
    steps: int = 2
    batch: int = 16
    lr: float = 0.05
    config: EncoderConfig = field(default_factory=EncoderConfig)
    dtype: torch.dtype = torch.float32
    pace_s: float | None = None

    def __post_init__(self) -> None:
        check_choice("schedule", self.schedule, SCHEDULES)
        check_schedule(self.schedule, self.microbatches)
        check_choice("engine", self.engine, ENGINES)
        if self.engine == "torch":
            check_choice("schedule (with engine 'torch', torch.distributed.pipelining)",
                         self.schedule, _TORCH_SCHEDULES)
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        check_positive("lr", self.lr)
        check_instance("config", self.config, EncoderConfig)
        check_choice("dtype", self.dtype, DTYPES)
        if self.pace_s is not None:
            check_positive("pace_s", self.pace_s)
        if self.batch % self.microbatches:
            raise ValueError(f"microbatches ({self.microbatches}) must divide the batch "
                             f"({self.batch}) into equal micro-batches")
        if self.pace_s is not None and (self.engine != "hand" or not self.pace_s > 0):
            raise ValueError(f"pace_s must be None or a positive number of seconds for the "
                             f"hand-written engine, got {self.pace_s!r} ({self.engine})")

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless ``world_size`` stages split the encoder's blocks evenly."""
        stage_layers(self.config.layers, check_int("world_size", world_size, 1), 0)


def _hand_step(stage: torch.nn.Module, plan: PipelinePlan, rank: int, stages: int,
               x: torch.Tensor, y: torch.Tensor, clock: Clock) -> dict:
    """One forward and backward pass of ``plan.schedule``; returns the loss (last stage), the
    timed actions and the most micro-batches whose activations were held at once."""
    m = plan.microbatches
    xs, ys = x.chunk(m), y.chunk(m)
    shape, last = xs[0].shape, rank == stages - 1
    inputs: dict[int, torch.Tensor] = {}
    outputs: dict[int, torch.Tensor] = {}  # stage outputs, or the scaled losses on the last
    pending: list[tuple[torch.Tensor, int]] = []
    in_flight: list[tuple[dist.Work, torch.Tensor]] = []  # posted sends and their tensors
    events, losses, peak = [], [], 0
    dist.barrier()
    began = clock.mark()
    for kind, i in schedule(plan.schedule, rank, stages, m):
        peer = rank - 1 if kind == "F" else rank + 1
        buffer = (torch.empty(shape, dtype=x.dtype, device=x.device)
                  if 0 <= peer < stages else None)  # nothing to receive: first F, last B
        works = exchange(pending, None if buffer is None else (buffer, peer))
        in_flight += zip(works, [tensor for tensor, _ in pending], strict=True)
        pending = []
        # the action as one named range of a profiler's timeline (Appendix E), pacing included
        with record_function(f"{ACTION_NAMES[kind]} {i}"):
            start, tick = clock.mark(), time.perf_counter()
            if kind == "F":
                inputs[i] = xs[i] if rank == 0 else buffer.requires_grad_()
                out = stage(inputs[i])
                if last:
                    out = torch.nn.functional.mse_loss(out, ys[i]) / m
                    losses.append(out.detach())  # read after the step: .item() would wait
                else:
                    pending.append((out.detach(), rank + 1))
                outputs[i] = out
                peak = max(peak, len(outputs))
            else:
                out = outputs.pop(i)
                out.backward(None if last else buffer)
                grad = inputs.pop(i).grad
                if rank > 0:
                    pending.append((grad, rank - 1))
            if plan.pace_s is not None:
                target = plan.pace_s * len(xs[i]) * (1 if kind == "F" else 2)
                time.sleep(max(0.0, tick + target - time.perf_counter()))
            events.append([kind, i, start, clock.mark()])
    in_flight += zip(exchange(pending, None), [tensor for tensor, _ in pending], strict=True)
    for work, _ in in_flight:
        work.wait()
    timeline = [{"kind": kind, "microbatch": i, "start_s": clock.seconds(began, start),
                 "end_s": clock.seconds(began, end)} for kind, i, start, end in events]
    return {"loss": float(sum(losses)) if losses else 0.0, "timeline": timeline,
            "peak_in_flight": peak}


def _torch_step(pipe: object, rank: int, stages: int, x: torch.Tensor, y: torch.Tensor
                ) -> dict:
    """One step of a ``torch.distributed.pipelining`` schedule (``scale_grads`` divides the
    summed micro-batch gradients by ``m``, as the hand-written schedules' loss does)."""
    losses: list[torch.Tensor] = []
    if rank == 0:
        pipe.step(x)
    elif rank == stages - 1:
        pipe.step(target=y, losses=losses)
    else:
        pipe.step()
    return {"loss": float(sum(t.item() for t in losses) / len(losses)) if losses else 0.0}


def pipeline_worker(rank: int, world_size: int, plans: Sequence[PipelinePlan]) -> list[dict]:
    """Run each of ``plans`` in turn; this rank is stage ``rank`` of ``world_size``.

    Every plan builds the encoder afresh (the same seed on every rank), keeps this stage's
    blocks and takes ``plan.steps`` SGD steps. Returned per plan: ``layers`` (this stage's
    block indices), ``losses`` (the whole batch's loss at each step, on the last stage, else
    ``None``), ``grads`` (one dict per step, this stage's parameter names to gradients, on the
    CPU) and, for the hand-written engine, ``timeline`` (the last step's actions, each
    ``{"kind", "microbatch", "start_s", "end_s"}`` in seconds since the step began after a
    barrier) and ``peak_in_flight`` (the most micro-batches whose activations this stage held
    at once).
    """
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    if isinstance(plans, str) or not isinstance(plans, Sequence):
        raise TypeError(f"plans must be a list of PipelinePlan, got {type(plans).__name__}")
    for i, plan in enumerate(plans):
        check_instance(f"plans[{i}]", plan, PipelinePlan)
    device, _ = device_and_sync()
    results = []
    for plan in plans:
        plan.check_world_size(world_size)
        if plan.pace_s is not None and device.type != "cpu":
            raise ValueError("pace_s stretches CPU work; on GPUs the stages run at their speed")
        layers = stage_layers(plan.config.layers, world_size, rank)
        stage = make_encoder(plan.config, dtype=plan.dtype)[layers.start:layers.stop]
        stage.to(device)
        x, y = (t.to(device) for t in encoder_batch(plan.config, plan.batch, dtype=plan.dtype))
        optimizer = torch.optim.SGD(stage.parameters(), lr=plan.lr)
        if plan.engine == "torch":
            pipe_stage = PipelineStage(stage, rank, world_size, device)
            pipe = _TORCH_SCHEDULES[plan.schedule](
                pipe_stage, n_microbatches=plan.microbatches,
                loss_fn=torch.nn.functional.mse_loss)
        losses, grads, out = [], [], {}
        for _ in range(plan.steps):
            optimizer.zero_grad()
            if plan.engine == "hand":
                out = _hand_step(stage, plan, rank, world_size, x, y, Clock(device))
            else:
                out = _torch_step(pipe, rank, world_size, x, y)
            losses.append(out["loss"])
            grads.append({name: p.grad.detach().cpu().clone()
                          for name, p in stage.named_parameters()})
            optimizer.step()
        last = rank == world_size - 1
        results.append({"rank": rank, "layers": (layers.start, layers.stop),
                        "losses": losses if last else None, "grads": grads,
                        **{k: v for k, v in out.items() if k != "loss"}})
    return results


def run_pipelines(plans: Sequence[PipelinePlan], world_size: int = 4, timeout: float = 120.0
                  ) -> list[list[dict]]:
    """Spawn ``world_size`` stages running :func:`pipeline_worker`; one list per plan, of one
    dict per rank. Plans are checked before anything is started."""
    if isinstance(plans, str) or not isinstance(plans, Sequence):
        raise TypeError(f"plans must be a list of PipelinePlan, got {type(plans).__name__}")
    plans = tuple(plans)
    if not plans:
        raise ValueError("plans must list at least one PipelinePlan")
    check_positive("timeout", timeout)
    for i, plan in enumerate(plans):
        check_instance(f"plans[{i}]", plan, PipelinePlan)
        plan.check_world_size(check_int("world_size", world_size, 1))
    by_rank = spawn(pipeline_worker, world_size, plans, timeout=timeout)
    return [[by_rank[rank][k] for rank in range(world_size)] for k in range(len(plans))]


#: Seconds of forward per sample and stage when the stages are CPU processes (the backward takes
#: twice that), long beside a message's latency between processes (about a millisecond on a busy
#: machine).
CPU_PACE_S = 0.01


#: The tiny encoder of the CPU runs (12 blocks of width 32).
CPU_CONFIG = EncoderConfig()


#: A larger encoder for GPUs, as wide as BERT-large, on sequences of 512 tokens.
GPU_CONFIG = EncoderConfig(layers=12, hidden=1024, heads=16, ffn=4096, seq=512)


def main(argv: list[str] | None = None) -> None:
    """Run one hand-written schedule in this process (under ``torchrun``, on every rank);
    rank 0 prints the measured idle fraction beside the formula's."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.parallel.pipeline",
                                     description="A pipelined encoder step, timed.")
    parser.add_argument("schedule", choices=SCHEDULES)
    parser.add_argument("microbatches", type=int, nargs="?", default=1)
    parser.add_argument("--pace", type=float, default=None, metavar="SECONDS",
                        help="stretch each forward to SECONDS per sample (CPU processes)")
    opts = parser.parse_args(argv)
    plan = PipelinePlan(opts.schedule, opts.microbatches, steps=1, pace_s=opts.pace)
    results = run_under_torchrun(_gathered_worker, plan)
    if results is not None:
        p = len(results)
        rank0_print(f"{opts.schedule}, {p} stages, {opts.microbatches} micro-batches: idle "
                    f"{idle_fraction([r['timeline'] for r in results]):.3f} measured, "
                    f"{bubble_fraction(p, opts.microbatches):.3f} by the formula")


def _gathered_worker(rank: int, world_size: int, plan: PipelinePlan) -> list[dict] | None:
    """:func:`pipeline_worker` on one plan, every rank's result gathered on rank 0."""
    (mine,) = pipeline_worker(rank, world_size, [plan])
    gathered = [None] * world_size if rank == 0 else None
    dist.gather_object(mine, gathered, dst=0)
    return gathered


if __name__ == "__main__":
    main()
