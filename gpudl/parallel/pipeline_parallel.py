"""Pipeline parallelism: the encoder's layers cut into stages, one per rank, run by hand with
``send``/``recv`` under three schedules, and by ``torch.distributed.pipelining``.

Book section: *Chapter 6, "Pipeline parallelism"* (the articles' 12-layer / 4-GPU split,
claim C10) and *"The bubble"*.

Stage ``s`` of ``p`` holds blocks ``[s L/p, (s + 1) L/p)`` of :func:`gpudl.models.make_encoder`.
A schedule is the order in which a stage runs the forward (``"F"``) and backward (``"B"``)
pass of each micro-batch (:func:`schedule`):

* ``naive``: the whole batch at once, as the articles describe it: one stage works while the
  others wait;
* ``gpipe``: the batch cut into ``m`` micro-batches, all forwards, then all backwards
  (Huang et al. 2019);
* ``1f1b``: after ``p - s - 1`` warm-up forwards, one forward then one backward, so a stage
  holds at most ``p - s`` micro-batches' activations instead of ``m`` (PipeDream-flush,
  Narayanan et al. 2021).

The loss is the mean-squared error of the whole batch: each micro-batch's mean is divided by
``m`` and the gradients add up over the micro-batches, so a step gives the gradient of one
process on the whole batch. Every action is timed (:func:`pipeline_worker`), and
:func:`idle_fraction` compares the measured bubble with :func:`gpudl.estimate.bubble_fraction`.

Run the hand-written GPipe schedule on four processes with
``torchrun --standalone --nproc_per_node=4 -m gpudl.parallel.pipeline_parallel gpipe 8``
(add ``--pace 0.01`` on a CPU, see :class:`PipelinePlan`).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import torch
import torch.distributed as dist
from matplotlib.figure import Figure
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from gpudl.checks import check_int
from gpudl.estimate import bubble_fraction
from gpudl.models import EncoderConfig, encoder_batch, make_encoder
from gpudl.parallel.comms import device_and_sync
from gpudl.parallel.grad_timeline import _Clock
from gpudl.parallel.launch import rank0_print, run_under_torchrun, spawn

__all__ = [
    "CPU_CONFIG",
    "CPU_PACE_S",
    "ENGINES",
    "GPU_CONFIG",
    "SCHEDULES",
    "PipelinePlan",
    "idle_fraction",
    "main",
    "plot_timelines",
    "plot_schedules",
    "reference_steps",
    "run_pipelines",
    "schedule",
    "simulate",
    "stage_layers",
    "pipeline_worker",
]

SCHEDULES = ("naive", "gpipe", "1f1b")
ENGINES = ("hand", "torch")  # written here with send/recv, or torch.distributed.pipelining
_TORCH_SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def stage_layers(layers: int, stages: int, stage: int) -> range:
    """The blocks stage ``stage`` of ``stages`` holds: an equal, contiguous share."""
    check_int("stages", stages, 1)
    if layers % stages:
        raise ValueError(f"the {layers} layers must split evenly into {stages} stages "
                         f"(one per rank), but {stages} does not divide {layers}")
    if not 0 <= stage < stages:
        raise ValueError(f"stage must be in [0, {stages}), got {stage}")
    per = layers // stages
    return range(stage * per, (stage + 1) * per)


def schedule(name: str, stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The actions of ``stage``, in order: ``("F", i)`` or ``("B", i)`` for micro-batch ``i``."""
    _check_schedule(name, microbatches)
    m = microbatches
    if name in ("naive", "gpipe"):
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    warmup = min(stages - stage - 1, m)
    steady = [a for i in range(m - warmup) for a in (("F", warmup + i), ("B", i))]
    return ([("F", i) for i in range(warmup)] + steady
            + [("B", i) for i in range(m - warmup, m)])


def simulate(name: str, stages: int, microbatches: int, forward: float = 1.0,
             backward: float = 2.0) -> list[list[dict]]:
    """The timeline of each stage if every forward took ``forward`` and every backward
    ``backward`` time units and messages took none: an action starts when the stage is free
    and its input has arrived (the previous stage's forward, the next stage's backward)."""
    check_int("stages", stages, 1)
    end: dict[tuple[str, int, int], float] = {}
    orders = [schedule(name, s, stages, microbatches) for s in range(stages)]
    timelines: list[list[dict]] = [[] for _ in range(stages)]
    position = [0] * stages
    while any(position[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] == len(orders[s]):
                continue
            kind, i = orders[s][position[s]]
            needs = (("F", s - 1, i) if s > 0 else None) if kind == "F" else (
                ("B", s + 1, i) if s < stages - 1 else ("F", s, i))
            if needs is not None and needs not in end:
                continue
            free = timelines[s][-1]["end_s"] if timelines[s] else 0.0
            start = max(free, end[needs] if needs else 0.0)
            stop = start + (forward if kind == "F" else backward)
            end[kind, s, i] = stop
            timelines[s].append({"kind": kind, "microbatch": i, "start_s": start,
                                 "end_s": stop})
            position[s] += 1
            progressed = True
        if not progressed:  # impossible for the three schedules: a guard, not a hang
            raise RuntimeError(f"schedule {name!r} deadlocks at positions {position}")
    return timelines


def idle_fraction(timelines: Sequence[Sequence[dict]]) -> float:
    """The share of ``stages x makespan`` in which no stage computed: ``1 - busy / (p T)``,
    with ``T`` the end of the last action (times measured from a common start)."""
    makespan = max(event["end_s"] for timeline in timelines for event in timeline)
    busy = sum(event["end_s"] - event["start_s"] for timeline in timelines for event in timeline)
    return 1.0 - busy / (len(timelines) * makespan)


def _check_schedule(name: str, microbatches: int) -> None:
    if name not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {name!r}")
    check_int("microbatches", microbatches, 1)
    if name == "naive" and microbatches != 1:
        raise ValueError(f"the naive schedule runs the whole batch at once (microbatches=1), "
                         f"got microbatches={microbatches}; use 'gpipe' or '1f1b'")


@dataclass(frozen=True)
class PipelinePlan:
    """One pipelined run: ``steps`` SGD steps of ``schedule`` over ``microbatches`` on a batch
    of ``batch`` samples, hand-written (``engine="hand"``) or by torch's pipelining.

    ``pace_s``, hand-written only and on CPU tensors only: each forward is stretched to take
    at least ``pace_s`` seconds per sample of its micro-batch, each backward twice that, so
    that every stage costs the same however many processes share the CPU's cores (the
    assumption of :func:`gpudl.estimate.bubble_fraction`); ``None`` times the bare compute.
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
        _check_schedule(self.schedule, self.microbatches)
        if self.engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {self.engine!r}")
        if self.engine == "torch" and self.schedule not in _TORCH_SCHEDULES:
            raise ValueError(f"torch.distributed.pipelining runs {tuple(_TORCH_SCHEDULES)}, "
                             f"got schedule {self.schedule!r}")
        check_int("steps", self.steps, 1)
        check_int("batch", self.batch, 1)
        if self.batch % self.microbatches:
            raise ValueError(f"microbatches ({self.microbatches}) must divide the batch "
                             f"({self.batch}) into equal micro-batches")
        if self.pace_s is not None and (self.engine != "hand" or not self.pace_s > 0):
            raise ValueError(f"pace_s must be None or a positive number of seconds for the "
                             f"hand-written engine, got {self.pace_s!r} ({self.engine})")

    def check_world_size(self, world_size: int) -> None:
        stage_layers(self.config.layers, world_size, 0)


def reference_steps(config: EncoderConfig, batch: int, steps: int, lr: float,
                    dtype: torch.dtype = torch.float32) -> dict:
    """``steps`` SGD steps of the whole encoder in one process on the whole batch (mean-
    squared error): ``losses`` (one per step, before its update) and ``grads`` (one dict
    of parameter name to gradient per step). What every parallel run must reproduce."""
    model = make_encoder(config, dtype=dtype)
    x, y = encoder_batch(config, batch, dtype=dtype)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses, grads = [], []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append({name: p.grad.clone() for name, p in model.named_parameters()})
        optimizer.step()
    return {"losses": losses, "grads": grads}


def _exchange(sends: list[tuple[torch.Tensor, int]], recv: tuple[torch.Tensor, int] | None
              ) -> list[dist.Work]:
    """Post this stage's pending sends together with its next receive, wait for the receive,
    and return the sends' handles (their tensors must stay alive until they are waited for).

    The stage does not wait for its sends, so it can run ahead of its neighbours (as a GPU
    stage does: NCCL sends run on their own stream). Posting a send and a receive as one batch
    matters on NCCL: two neighbours that each sent to the other and waited for the send before
    posting the receive (1F1B's steady state) would deadlock."""
    ops = [dist.P2POp(dist.isend, tensor, peer) for tensor, peer in sends]
    if recv is not None:
        ops.append(dist.P2POp(dist.irecv, *recv))
    works = dist.batch_isend_irecv(ops) if ops else []
    if recv is not None:
        works.pop().wait()
    return works


def _hand_step(stage: torch.nn.Module, plan: PipelinePlan, rank: int, stages: int,
               x: torch.Tensor, y: torch.Tensor, clock: _Clock) -> dict:
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
        works = _exchange(pending, None if buffer is None else (buffer, peer))
        in_flight += zip(works, [tensor for tensor, _ in pending], strict=True)
        pending = []
        start, tick = clock.mark(), time.perf_counter()
        if kind == "F":
            inputs[i] = xs[i] if rank == 0 else buffer.requires_grad_()
            out = stage(inputs[i])
            if last:
                out = torch.nn.functional.mse_loss(out, ys[i]) / m
                losses.append(out.detach())  # read after the step: .item() would wait here
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
    in_flight += zip(_exchange(pending, None), [tensor for tensor, _ in pending], strict=True)
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
                out = _hand_step(stage, plan, rank, world_size, x, y, _Clock(device))
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
    plans = tuple(plans)
    for plan in plans:
        if not isinstance(plan, PipelinePlan):
            raise TypeError(f"plans must be PipelinePlan objects, got {type(plan).__name__}")
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


def plot_timelines(timelines_by_name: dict[str, Sequence[Sequence[dict]]],
                   unit: str = "ms") -> Figure:
    """A Gantt chart per schedule: one row per stage, forwards light and backwards dark, each
    bar labelled with its micro-batch; white is where the stage waits."""
    scale = {"ms": 1e3, "s": 1.0, "slots": 1.0}[unit]
    stages = max(len(t) for t in timelines_by_name.values())
    fig, axes = plt.subplots(len(timelines_by_name), 1, squeeze=False,
                             figsize=(7, 0.3 + len(timelines_by_name) * (0.8 + 0.3 * stages)))
    colors = {"F": "#9ecae1", "B": "#3182bd"}
    for ax, (name, timelines) in zip(axes[:, 0], timelines_by_name.items(), strict=True):
        for stage, timeline in enumerate(timelines):
            for event in timeline:
                start, width = event["start_s"] * scale, (event["end_s"] - event["start_s"]) * scale
                ax.barh(stage, width, left=start, color=colors[event["kind"]], edgecolor="white")
                ax.text(start + width / 2, stage, str(event["microbatch"]), ha="center",
                        va="center", fontsize=7)
        ax.set_yticks(range(len(timelines)), [f"stage {s}" for s in range(len(timelines))])
        ax.invert_yaxis()
        ax.set_title(f"{name}: idle {idle_fraction(timelines):.0%}", fontsize=9)
        ax.set_xlabel(f"time ({unit})", fontsize=8)
        ax.set_xlim(left=0)
        ax.tick_params(labelsize=8)
    fig.tight_layout()
    return fig


def plot_schedules(stages: int = 4, microbatches: int = 4) -> Figure:
    """Chapter 6's schedule figure: the naive split beside GPipe and 1F1B with
    ``microbatches`` micro-batches, simulated with a micro-batch's forward taking 1 unit and
    its backward 2; the naive split's passes carry the whole batch (``microbatches`` times
    as long), so the three charts share one time axis."""
    m = check_int("microbatches", microbatches, 1)
    timelines = {"naive, m = 1": simulate("naive", stages, 1, 1.0 * m, 2.0 * m)}
    for name in ("gpipe", "1f1b"):
        timelines[f"{name}, m = {m}"] = simulate(name, stages, m)
    return plot_timelines(timelines, unit="slots")


def main(argv: list[str] | None = None) -> None:
    """Run one hand-written schedule in this process (under ``torchrun``, on every rank);
    rank 0 prints the measured idle fraction beside the formula's."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.parallel.pipeline_parallel",
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
