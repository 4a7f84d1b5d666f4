"""Chapter 6's figures: pipeline timelines (simulated or measured, by
:mod:`gpudl.parallel.pipeline`), the column and row split of tensor parallelism, and how ZeRO
and FSDP divide the model state among ranks.

Book section: Chapter 6, Model parallelism, "The bubble", "Tensor parallelism" and "Sharding
the model state: ZeRO".
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from gpudl.checks import check_choice, check_instance, check_int, check_ints
from gpudl.parallel.pipeline.schedule import idle_fraction, simulate
from gpudl.plots.style import check_rows, finish

__all__ = ["pipeline_schedules", "pipeline_timelines", "tensor_parallel_split", "state_bytes",
           "zero_partition", "ZERO_PARTS"]

_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c")



def _check_timelines(timelines_by_name: object) -> None:
    check_instance("timelines_by_name", timelines_by_name, dict)
    if not timelines_by_name:
        raise ValueError("timelines_by_name must hold at least one schedule's timelines")
    for name, timelines in timelines_by_name.items():
        try:
            idle_fraction(timelines)  # the checks of a timeline: each action a finite span
        except (TypeError, ValueError) as err:
            raise type(err)(f"timelines_by_name[{name!r}]: {err}") from None


def pipeline_timelines(timelines_by_name: dict[str, Sequence[Sequence[dict]]],
                       unit: str = "ms") -> Figure:
    """A Gantt chart per schedule: one row per stage, forwards light and backwards dark, each
    bar labelled with its micro-batch; white is where the stage waits."""
    check_choice("unit", unit, ("ms", "s", "units"))
    _check_timelines(timelines_by_name)
    scale = {"ms": 1e3, "s": 1.0, "units": 1.0}[unit]
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


def pipeline_schedules(stages: int = 4, microbatches: int = 4) -> Figure:
    """Chapter 6's schedule figure: the naive split beside GPipe and 1F1B with
    ``microbatches`` micro-batches, simulated with a micro-batch's forward taking 1 unit and
    its backward 2; the naive split's passes carry the whole batch (``microbatches`` times
    as long), so the three charts share one time axis."""
    check_int("stages", stages, 1)
    m = check_int("microbatches", microbatches, 1)
    timelines = {"naive, m = 1": simulate("naive", stages, 1, 1.0 * m, 2.0 * m)}
    for name in ("gpipe", "1f1b"):
        timelines[f"{name}, m = {m}"] = simulate(name, stages, m)
    return pipeline_timelines(timelines, unit="units")


def tensor_parallel_split(hidden: int = 32, ffn: int = 64, degree: int = 2) -> Figure:
    """Megatron's split of ``Y = GeLU(X A) B`` over ``degree`` GPUs, to scale: ``A``
    (hidden x ffn) cut into column blocks, ``B`` (ffn x hidden) into the matching row blocks
    (gid ``"A:i"``, ``"B:i"``), each GPU's partial ``Y_i``, and the two communication
    points: ``g``, an all-reduce of Y in the forward pass, and ``f``, an all-reduce of dX
    in the backward pass."""
    check_int("hidden", hidden, 1)
    check_int("ffn", ffn, 1)
    check_int("degree", degree, 1)
    if degree < 1 or ffn % degree:
        raise ValueError(f"degree must be >= 1 and divide ffn = {ffn}, got {degree}")
    fig, ax = plt.subplots(figsize=(7.4, 3.9))
    s = 3.2 / max(hidden, ffn)  # drawing units per feature
    part = ffn // degree
    y0, top = 1.2, 1.2 + max(hidden, ffn) * s
    ax.add_patch(Rectangle((0, y0), 0.5, hidden * s, facecolor="#dddddd", edgecolor="k"))
    ax.text(0.25, y0 - 0.15, "X\n(whole)", ha="center", va="top")
    x0, bx = 1.4, 1.4 + ffn * s + 1.0
    for i in range(degree):
        c = _COLORS[i % len(_COLORS)]
        ax.add_patch(Rectangle((x0 + i * part * s, y0), part * s, hidden * s, facecolor=c,
                               alpha=0.75, edgecolor="k", gid=f"A:{i}"))
        ax.add_patch(Rectangle((bx, y0 + ffn * s - (i + 1) * part * s), hidden * s, part * s,
                               facecolor=c, alpha=0.75, edgecolor="k", gid=f"B:{i}"))
        ax.text(x0 + (i + 0.5) * part * s, y0 + hidden * s / 2, f"GPU {i}", ha="center",
                va="center")
        ax.text(bx + hidden * s / 2, y0 + ffn * s - (i + 0.5) * part * s, f"GPU {i}",
                ha="center", va="center")
    ax.text(x0 + ffn * s / 2, y0 - 0.15, f"A: {hidden} x {ffn}, split by columns:\n"
            f"{part} per GPU, then GeLU", ha="center", va="top")
    ax.text(bx + hidden * s / 2, y0 - 0.15, f"B: {ffn} x {hidden},\nsplit by rows",
            ha="center", va="top")
    yx = bx + hidden * s + 1.3
    ax.add_patch(Rectangle((yx, y0), 0.5, hidden * s, facecolor="#dddddd", edgecolor="k"))
    ax.text(yx + 0.25, y0 - 0.15, "Y = Σ Yᵢ", ha="center", va="top")
    for a, label, gid in ((0.6, "f: forward copy,\nbackward all-reduce of dX", "f"),
                          (yx - 1.1, "g: forward all-reduce\nof the partial Yᵢ", "g")):
        ax.add_patch(FancyArrowPatch((a, y0 + 0.3), (a + 0.7, y0 + 0.3), arrowstyle="-|>",
                                     mutation_scale=14, lw=1.5, gid=f"allreduce:{gid}"))
        ax.text(a + 0.35, top + 0.15, label, ha="center", va="bottom")
    ax.set(xlim=(-0.5, yx + 1.0), ylim=(-0.1, top + 1.0), aspect="equal")
    ax.axis("off")
    ax.set_title(f"Tensor parallelism over {degree} GPUs: no communication between A and B")
    return finish(fig)


def state_bytes(rows: Sequence[dict]) -> Figure:
    """Bytes of parameters, gradients and Adam state on rank 0 for each strategy and world
    size (rows of :func:`gpudl.parallel.zero.fsdp.state_bytes`, rank 0's), stacked."""
    check_rows("rows", rows, ())
    fig, ax = plt.subplots(figsize=(6, 3.5))
    labels = [f"{r['strategy']}\nN={r['world_size']}" for r in rows]
    bottom = np.zeros(len(rows))
    for key, label in (("param_bytes", "parameters"), ("grad_bytes", "gradients"),
                       ("adam_bytes", "Adam m, v")):
        values = np.array([r[key] for r in rows], dtype=float) / 1e3
        ax.bar(labels, values, bottom=bottom, label=label)
        bottom += values
    ax.set(ylabel="kB on rank 0", title="Model state per rank (fp32 Adam)")
    ax.legend()
    return finish(fig)


#: The model state of mixed-precision Adam, bytes per parameter (ZeRO's accounting):
#: 16-bit parameters, 16-bit gradients, and 12 bytes of float32 master copy, m and v.
ZERO_PARTS = (("parameters", 2), ("gradients", 2), ("optimizer state", 12))
_SHARDED_FROM = {"parameters": 3, "gradients": 2, "optimizer state": 1}  # stage that shards


def zero_partition(world_size: int = 4, stages: Sequence[int] = (0, 1, 2, 3)) -> Figure:
    """For each ZeRO stage, each rank's bytes per parameter, one bar per rank split into
    ``ZERO_PARTS``: a part is whole on every rank until the stage that shards it, then
    each rank holds its 1/N slice (drawn at that rank's position). The bars' totals are
    :func:`gpudl.estimate.model_state_memory` per parameter."""
    check_int("world_size", world_size, 1)
    for i, stage in enumerate(check_ints("stages", stages, 0)):
        check_int(f"stages[{i}]", stage, 0, 3)
    n = world_size
    colors = {"parameters": "#4c72b0", "gradients": "#55a868", "optimizer state": "#dd8452"}
    fig, axes = plt.subplots(1, len(stages), figsize=(7.4, 3.4), sharey=True, squeeze=False)
    for ax, stage in zip(axes[0], stages, strict=True):
        for rank in range(n):
            x = 0.0
            for part, nbytes in ZERO_PARTS:
                if stage >= _SHARDED_FROM[part]:
                    ax.add_patch(Rectangle((x + rank * nbytes / n, rank), nbytes / n, 0.7,
                                           color=colors[part], gid=f"{part}:{rank}"))
                    ax.add_patch(Rectangle((x, rank), nbytes, 0.7, fill=False, ls=":",
                                           edgecolor=colors[part], lw=0.8))
                else:
                    ax.add_patch(Rectangle((x, rank), nbytes, 0.7, color=colors[part],
                                           gid=f"{part}:{rank}"))
                x += nbytes
        ax.set(xlim=(0, 16), ylim=(n, -0.3), xlabel="bytes per parameter",
               title=f"stage {stage}", yticks=np.arange(n) + 0.35,
               yticklabels=[f"rank {r}" for r in range(n)])
    handles = [Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    fig.legend(handles, list(colors), loc="lower center", ncol=3, frameon=False)
    fig.suptitle(f"ZeRO on {n} ranks: what each rank holds", fontsize=12)
    finish(fig)
    fig.subplots_adjust(bottom=0.3)
    return fig


def held_bytes(fig: Figure) -> dict[tuple[int, int], float]:
    """Bytes per parameter each rank holds in each panel of :func:`zero_partition`
    (panel index, rank) -> total of its filled parts (for tests)."""
    held: dict[tuple[int, int], float] = {}
    for k, ax in enumerate(fig.axes):
        for patch in ax.patches:
            gid = patch.get_gid()
            if gid:
                rank = int(gid.rsplit(":", 1)[1])
                held[(k, rank)] = held.get((k, rank), 0.0) + patch.get_width()
    return held
