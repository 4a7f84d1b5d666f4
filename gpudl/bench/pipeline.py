"""Chapter 6's measurement: the pipeline bubble of the naive split, GPipe and 1F1B, measured on
four stages against the formula.

Book section: *Chapter 6, "The bubble"* and its "Measured on GPUs" box.

The schedules and their worker are :mod:`gpudl.parallel.pipeline`'s; every action of a
step is timed there (the timeline is what a schedule is about). :func:`bubble_sweep` runs them at
several numbers of micro-batches; ``python -m gpudl bench pipeline`` runs :func:`run` and stores
``results/pipeline-<backend>.json`` (on GPUs it needs one per stage, else it is skipped).
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudl.bench import row
from gpudl.bench.environment import gpus_missing
from gpudl.bench.timing import Timing
from gpudl.checks import check_choice, check_ints
from gpudl.estimate import bubble_fraction
from gpudl.parallel import pipeline
from gpudl.parallel.spawn import default_backend

__all__ = ["BARS", "VIEWS", "STAGES", "MICROBATCHES", "bubble_sweep", "run"]

#: No speed goal; the rows set the measured idle fraction beside the formula's.
BARS: tuple[dict, ...] = ()
#: The book's boxes of this topic (``{gpudl-measured} pipeline <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"bubble": ()}
#: The stages (one GPU each) and the numbers of micro-batches :func:`run` sweeps.
STAGES, MICROBATCHES = 4, (1, 2, 4, 8, 16)


def bubble_sweep(world_size: int = 4, microbatches: Sequence[int] = (1, 2, 4, 8, 16),
                 schedules: Sequence[str] = ("gpipe", "1f1b"), timeout: float = 600.0
                 ) -> list[dict]:
    """The naive split, then each of ``schedules`` at each number of ``microbatches``, timed,
    in one set of ``world_size`` processes. On as many GPUs (NCCL): the
    :data:`gpudl.parallel.pipeline.GPU_CONFIG` encoder on a batch of 32 at its own
    speed, two steps, the second timed. Otherwise the ``CPU_CONFIG`` encoder on 16 samples,
    paced at ``CPU_PACE_S``, one step.

    One row per run: ``schedule``, ``microbatches``, ``measured``
    (:func:`gpudl.parallel.pipeline.idle_fraction` of the timed step), ``formula``
    (:func:`gpudl.estimate.bubble_fraction`), ``makespan_s``, ``paced`` and ``timelines``
    (one per stage)."""
    _check_sweep(world_size, microbatches)
    if isinstance(schedules, str) or not isinstance(schedules, Sequence):
        raise TypeError(f"schedules must be a list of schedule names, got {schedules!r}")
    for i, name in enumerate(schedules):
        check_choice(f"schedules[{i}]", name, ("gpipe", "1f1b"))
    on_gpus = default_backend(world_size) == "nccl"
    common = (dict(steps=2, batch=32, config=pipeline.GPU_CONFIG) if on_gpus
              else dict(steps=1, batch=16, config=pipeline.CPU_CONFIG,
                        pace_s=pipeline.CPU_PACE_S))
    plans = [pipeline.PipelinePlan("naive", 1, **common)]
    plans += [pipeline.PipelinePlan(name, m, **common)
              for name in schedules for m in microbatches]
    rows = []
    for plan, ranks in zip(plans, pipeline.run_pipelines(plans, world_size, timeout), strict=True):
        timelines = [r["timeline"] for r in ranks]
        rows.append({"schedule": plan.schedule, "microbatches": plan.microbatches,
                     "measured": pipeline.idle_fraction(timelines),
                     "formula": bubble_fraction(world_size, plan.microbatches),
                     "makespan_s": max(e["end_s"] for t in timelines for e in t),
                     "paced": not on_gpus, "timelines": timelines})
    return rows


def _check_sweep(world_size: int, microbatches: Sequence[int]) -> None:
    """``world_size`` stages that split the encoder evenly, and micro-batch counts."""
    pipeline.PipelinePlan().check_world_size(world_size)
    check_ints("microbatches", microbatches, 1)


def run(world_size: int = STAGES, microbatches: Sequence[int] = MICROBATCHES) -> dict:
    """:func:`bubble_sweep` on ``world_size`` stages at each of ``microbatches``, one GPU per
    stage (skipped with fewer GPUs; CPU processes on the simulator). One row per run: the
    makespan of its timed step, with the sweep's keys, timelines included."""
    _check_sweep(world_size, microbatches)
    missing = gpus_missing(world_size)
    if missing:
        print(f"[pipeline] {world_size} stages skipped: {missing}", flush=True)
        return {"rows": [], "bars": [], "skipped": missing}
    rows = []
    for r in bubble_sweep(world_size, microbatches):
        makespan = Timing((r["makespan_s"],), "wall-clock", True)
        rows.append(row(f"{r['schedule']} m={r['microbatches']}", makespan, stages=world_size,
                        **r))
        print(f"    idle {r['measured']:.3f} measured, {r['formula']:.3f} by the formula",
              flush=True)
    return {"rows": rows, "bars": []}
