"""Pipeline schedules: which blocks each stage holds, the order of its forward and backward
passes, and the bubble they leave, simulated.

Book section: *Chapter 6, "The bubble"*.

Stage ``s`` of ``p`` holds blocks ``[s L/p, (s + 1) L/p)`` of the encoder
(:func:`stage_layers`). A schedule is the order in which a stage runs the forward (``"F"``)
and backward (``"B"``) pass of each micro-batch (:func:`schedule`):

* ``naive``: the whole batch at once, as the articles describe it: one stage works while the
  others wait;
* ``gpipe``: the batch cut into ``m`` micro-batches, all forwards, then all backwards
  (Huang et al. 2019);
* ``1f1b``: after ``p - s - 1`` warm-up forwards, one forward then one backward, so a stage
  holds at most ``p - s`` micro-batches' activations instead of ``m`` (PipeDream-flush,
  Narayanan et al. 2021).

:func:`simulate` plays a schedule with fixed costs; :func:`idle_fraction` measures the bubble
of any timeline, simulated or measured, for comparison with
:func:`gpudl.estimate.bubble_fraction`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudl.checks import check_choice, check_int, check_positive, check_real
from gpudl.parallel.degrees import ParallelDegrees

__all__ = ["SCHEDULES", "check_schedule", "idle_fraction", "schedule", "simulate",
           "stage_layers"]

SCHEDULES = ("naive", "gpipe", "1f1b")


def stage_layers(layers: int, stages: int, stage: int) -> range:
    """The blocks stage ``stage`` of ``stages`` holds: an equal, contiguous share."""
    degrees = ParallelDegrees(pipeline=check_int("stages", stages, 1))
    check_int("stage", stage, 0, stages - 1)
    per = degrees.check_divides("pipeline", "the encoder's layers",
                                check_int("layers", layers, 1))
    return range(stage * per, (stage + 1) * per)


def schedule(name: str, stage: int, stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The actions of ``stage``, in order: ``("F", i)`` or ``("B", i)`` for micro-batch ``i``."""
    check_schedule(name, microbatches)
    check_int("stage", stage, 0, check_int("stages", stages, 1) - 1)
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
    check_schedule(name, microbatches)
    check_positive("forward", forward)
    check_positive("backward", backward)
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
    with ``T`` the end of the last action (times measured from a common start).
    ``ValueError`` for no action, or for a time that is not a finite number >= 0 or an
    action that ends before it starts."""
    if isinstance(timelines, str) or not isinstance(timelines, Sequence) or not timelines:
        raise TypeError(f"timelines must be a non-empty list of each stage's actions, got "
                        f"{timelines!r}")
    for s, timeline in enumerate(timelines):
        for k, event in enumerate(timeline):
            start = check_real(f"timelines[{s}][{k}]['start_s']", event["start_s"], 0)
            check_real(f"timelines[{s}][{k}]['end_s']", event["end_s"], start)
    makespan = max((event["end_s"] for timeline in timelines for event in timeline),
                   default=0.0)
    if not makespan > 0:
        raise ValueError("timelines must hold at least one action that takes time")
    busy = sum(event["end_s"] - event["start_s"] for timeline in timelines for event in timeline)
    return 1.0 - busy / (len(timelines) * makespan)


def check_schedule(name: str, microbatches: int) -> None:
    """``ValueError`` unless ``name`` is a schedule that can run ``microbatches``."""
    check_choice("name (the schedule)", name, SCHEDULES)
    check_int("microbatches", microbatches, 1)
    if name == "naive" and microbatches != 1:
        raise ValueError(f"the naive schedule runs the whole batch at once (microbatches=1), "
                         f"got microbatches={microbatches}; use 'gpipe' or '1f1b'")
