"""Appendix E's figures: the book's stored profiles drawn as timelines, rows of ranks, threads
or streams, operations as bars, communication hatched apart.

Book section: *Appendix E, "Reading a profile"*. Each figure reads a stored profile
(:func:`gpudl.profiles.load`) and draws its spans (:func:`gpudl.profiles.spans`): what Perfetto
shows of the same file, with the parts the book's claims are about coloured.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from gpudl.checks import check_instance
from gpudl.estimate import bubble_fraction
from gpudl.parallel.pipeline.schedule import idle_fraction
from gpudl.plots.style import finish
from gpudl.profiles import Span, action_timelines, load, rows, spans

__all__ = ["ddp_profile", "gpu_profiles", "mlp_step_profile", "pipeline_profiles",
           "streams_profile", "COMMUNICATION"]

#: How communication is drawn apart from computation: its colour and hatch.
COMMUNICATION = {"color": "#dd8452", "hatch": "////"}
_BUCKETS = ("#4c72b0", "#55a868", "#8172b3", "#c44e52", "#937860", "#da8bc3")
_PHASES = {"forward": "#9ecae1", "loss": "#fdae6b", "backward": "#3182bd", "update": "#31a354"}
_KINDS = {"copy to device": "#74c476", "memset": "#bdbdbd", "kernel launch": "#3182bd",
          "copy to host": "#fd8d3c"}
_GREY = "#cccccc"


def _bar(ax: Axes, y: float, span: Span, height: float = 0.7, **style: object) -> None:
    ax.barh(y, span.duration_s * 1e3, left=span.start_s * 1e3, height=height,
            linewidth=0.4, **{"edgecolor": "white", **style})


def _rows_axis(ax: Axes, labels: Sequence[str], xlabel: str) -> None:
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.4, -0.6)
    ax.set_xlabel(xlabel)
    ax.set_xlim(left=0)


def ddp_profile(trace: dict) -> Figure:
    """A DDP profile of :func:`gpudl.bench.profiles.record_ddp`: per rank, the backward
    nodes on the main thread (each layer's ``AddmmBackward0`` in the colour of its bucket),
    DDP's ``c10d::allreduce_`` calls (black), each gloo thread's all-reduces (hatched, in their
    bucket's colour) and, below, the book's hook timeline of the same pass (each bucket's
    all-reduce from the hook's call to its completion, one line per bucket)."""
    trace = load(check_instance("trace", trace, dict))
    about = trace["gpudl"]
    buckets = about["buckets"]
    colour = {b["bucket"]: _BUCKETS[b["bucket"] % len(_BUCKETS)] for b in buckets}
    bucket_of = {layer: b["bucket"] for b in buckets for layer in b["layers"]}
    processes = list(dict.fromkeys(p for p, _ in rows(trace)))
    labels, fig = [], plt.figure(figsize=(7.5, 7.0))
    ax = fig.add_subplot()
    for rank, process in enumerate(processes):
        threads = [t for p, t in rows(trace) if p == process]
        base = len(labels)
        labels += [f"{process}: {t}" for t in threads] + [f"{process}: hooks"]
        for span in spans(trace, process=process):
            y = base + threads.index(span.thread)
            if span.name == "gloo:all_reduce":
                _bar(ax, y, span, color=colour[span.args["bucket"]], hatch="////")
            elif span.name == "c10d::allreduce_":
                _bar(ax, y - 0.25, span, height=0.2, color="black")
            elif span.name.endswith("AddmmBackward0"):
                _bar(ax, y, span, color=colour[bucket_of[span.args["layer"]]])
            elif span.name.startswith("autograd::"):
                _bar(ax, y, span, color=_GREY)
        begun = spans(trace, ["DDP backward pass"], process=process)[0].start_s
        hooks = about["hooks"][rank]["allreduce"]
        for k, hook in enumerate(hooks):
            y = base + len(threads) - 0.3 + 0.6 * k / max(1, len(hooks) - 1)
            ax.plot([(begun + hook["start_s"]) * 1e3, (begun + hook["end_s"]) * 1e3], [y, y],
                    color=colour[hook["bucket"]], marker="|", linewidth=2)
    _rows_axis(ax, labels, "ms since the first rank's backward pass began")
    handles = [Patch(color=colour[b["bucket"]], label=f"bucket {b['bucket']}: layers "
                     f"{min(b['layers'])}-{max(b['layers'])}" if len(b["layers"]) > 1
                     else f"bucket {b['bucket']}: layer {b['layers'][0]}") for b in buckets]
    handles += [Patch(color=_GREY, label="other backward nodes"),
                Patch(facecolor="white", edgecolor="black", hatch="////",
                      label="all-reduce on a gloo thread"),
                Patch(color="black", label="c10d::allreduce_: DDP's call"),
                Line2D([], [], color="black", marker="|",
                       label="hooks: from the call to the callback")]
    ax.set_title(f"DDP backward pass on {len(processes)} gloo ranks, "
                 f"{len(buckets)} buckets (profile)")
    fig.legend(handles=handles, loc="lower center", ncol=2, fontsize=10, frameon=False)
    finish(fig)
    fig.subplots_adjust(bottom=1.7 / fig.get_figheight())
    return fig


def pipeline_profiles(traces: Sequence[dict]) -> Figure:
    """Pipeline profiles of :func:`gpudl.bench.profiles.record_pipeline`, one panel each: a
    row per stage, forwards light and backwards dark with their micro-batch, the waits for a
    message (``gloo:recv``) hatched; titled with the idle fraction measured in the profile
    and the formula's (:func:`gpudl.estimate.bubble_fraction`)."""
    if isinstance(traces, dict | str) or not isinstance(traces, Sequence):
        raise TypeError(f"traces must be a list of pipeline profiles, got {type(traces).__name__}")
    if not traces:
        raise ValueError("traces must hold at least one pipeline profile")
    traces = [load(check_instance("traces[i]", t, dict)) for t in traces]
    fig, axes = plt.subplots(len(traces), 1, figsize=(7.5, 0.9 + 1.9 * len(traces)),
                             squeeze=False)
    colours = {"forward": "#9ecae1", "backward": "#3182bd"}
    for ax, trace in zip(axes[:, 0], traces, strict=True):
        program = trace["gpudl"]["program"]
        processes = list(dict.fromkeys(p for p, _ in rows(trace)))
        for span in spans(trace):
            y = processes.index(span.process)
            kind = span.name.split(" ")[0]
            if kind in colours:
                _bar(ax, y, span, color=colours[kind])
                ax.text((span.start_s + span.duration_s / 2) * 1e3, y, span.name.split(" ")[1],
                        ha="center", va="center", color="white" if kind == "backward"
                        else "black")
            elif span.name == "gloo:recv":
                _bar(ax, y, span, height=0.35, color=COMMUNICATION["color"],
                     hatch=COMMUNICATION["hatch"])
        name = {"gpipe": "GPipe", "1f1b": "1F1B"}[program["schedule"]]
        formula = bubble_fraction(program["stages"], program["microbatches"])
        ax.set_title(f"{name}, {program['microbatches']} micro-batches: idle "
                     f"{idle_fraction(action_timelines(trace)):.0%} measured, "
                     f"{formula:.0%} by the formula")
        _rows_axis(ax, [f"stage {k}" for k in range(len(processes))], "ms")
    fig.legend(handles=[Patch(color=colours["forward"], label="forward"),
                        Patch(color=colours["backward"], label="backward"),
                        Patch(facecolor=COMMUNICATION["color"], hatch=COMMUNICATION["hatch"],
                              label="waiting for a message (gloo:recv)")],
               loc="lower center", ncol=3, frameon=False, fontsize=10)
    finish(fig)
    fig.subplots_adjust(bottom=0.85 / fig.get_figheight())
    return fig


def mlp_step_profile(trace: dict) -> Figure:
    """The kernel MLP's step of :func:`gpudl.bench.profiles.record_mlp_step`: above, the
    host's timeline, each launch coloured by the part of the step it belongs to, copies and
    memsets grey; below, each launch's host time, in launch order."""
    trace = load(check_instance("trace", trace, dict))
    program = trace["gpudl"]["program"]
    parts = {s.name: s for s in spans(trace, list(_PHASES))}
    launches = spans(trace, category="kernel launch")

    def part(span: Span) -> str:
        return next(n for n, p in parts.items() if p.start_s <= span.start_s <= p.end_s)

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6.2),
                                      gridspec_kw={"height_ratios": [1, 2.4]})
    for name, span in parts.items():
        _bar(top, 0, span, height=0.3, color=_PHASES[name])
    for span in spans(trace):
        if span.category in ("copy", "memset"):
            _bar(top, 0.45, span, height=0.4, color="#888888")
    for span in launches:
        _bar(top, 0.45, span, height=0.4, color=_PHASES[part(span)], edgecolor="black")
    _rows_axis(top, ["parts", "host"], "ms since the step began")
    top.set_ylim(0.8, -0.3)
    top.set_yticks([0, 0.45], ["parts", "host"])
    bottom.bar(range(len(launches)), [s.duration_s * 1e3 for s in launches],
               color=[_PHASES[part(s)] for s in launches], edgecolor="black", linewidth=0.4)
    bottom.set_xticks(range(len(launches)), [s.name for s in launches], rotation=90)
    bottom.set_ylabel("host time per launch (ms),\nthe simulated kernel included")
    bottom.legend(handles=[Patch(color=c, label=n) for n, c in _PHASES.items()]
                  + [Patch(color="#888888", label="copy or memset")], ncol=5, fontsize=10,
                  loc="upper center", bbox_to_anchor=(0.5, 1.22), frameon=False)
    fig.suptitle(f"Kernel MLP {tuple(program['sizes'])}, batch {program['batch']}: one "
                 f"training step\non the simulator, {len(launches)} launches")
    return finish(fig)


def streams_profile(trace: dict) -> Figure:
    """Chapter 1's streams, :func:`gpudl.bench.profiles.record_streams`: a row per stream,
    each chunk's uploads, memset, kernel and download in the colour of their kind."""
    trace = load(check_instance("trace", trace, dict))
    program = trace["gpudl"]["program"]
    ops = [s for s in spans(trace) if s.category in ("copy", "memset", "kernel launch")]
    streams = sorted({s.args["stream"] for s in ops})
    fig, (ax, order) = plt.subplots(2, 1, figsize=(7.5, 4.4))
    for k, span in enumerate(ops):
        kind = span.name if span.category == "copy" else span.category
        y = streams.index(span.args["stream"])
        _bar(ax, y, span, color=_KINDS[kind], edgecolor="black")
        order.barh(y, 1, left=k, color=_KINDS[kind], edgecolor="black", linewidth=0.4)
    for axis, xlabel in ((ax, "ms since the call began"),
                         (order, "the same operations in the order they were issued")):
        _rows_axis(axis, [f"stream {s}" for s in streams], xlabel)
    order.set_xticks([])
    fig.legend(handles=[Patch(color=c, label=n) for n, c in _KINDS.items()], ncol=4,
               fontsize=10, loc="lower center", frameon=False)
    fig.suptitle(f"saxpy_streamed on the simulator: {program['chunks']} chunks on "
                 f"{program['streams']} streams,\none operation at a time")
    finish(fig)
    fig.subplots_adjust(bottom=0.7 / fig.get_figheight())
    return fig


def gpu_profiles(traces: dict[str, dict]) -> Figure:
    """GPU profiles (``profiles`` of a ``results/profiles-cuda.json``), a panel each: a row
    per host thread and GPU stream, host ranges and runtime calls above, the GPU's kernels,
    copies and memsets on their streams."""
    check_instance("traces", traces, dict)
    if not traces:
        raise ValueError("traces must hold at least one profile")
    colours = {"kernel launch": "#3182bd", "cuda_runtime": "#08519c", "cuda_driver": "#08519c",
               "kernel": "#31a354", "gpu_memcpy": COMMUNICATION["color"],
               "gpu_memset": "#888888", "copy": "#fdae6b", "memset": "#bdbdbd"}
    fig, axes = plt.subplots(len(traces), 1, figsize=(7.5, 0.8 + 1.6 * len(traces)),
                             squeeze=False)
    for ax, (name, trace) in zip(axes[:, 0], traces.items(), strict=True):
        trace = load(check_instance("trace", trace, dict))
        found = rows(trace)
        for span in spans(trace):
            if span.category in colours:
                _bar(ax, found.index((span.process, span.thread)), span,
                     color=colours[span.category])
        _rows_axis(ax, [f"{p}: {t}" for p, t in found], "ms")
        ax.set_title(name)
    fig.legend(handles=[Patch(color=c, label=n) for n, c in colours.items()
                        if n not in ("cuda_driver", "memset")], ncol=4, fontsize=10,
               loc="lower center", frameon=False)
    finish(fig)
    fig.subplots_adjust(bottom=0.9 / fig.get_figheight())
    return fig
