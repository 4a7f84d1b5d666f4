"""The book's figures, drawn from data the notebooks compute (and print, so nbval checks it).

Book section: every chapter's lab; Chapter 1 uses :func:`occupancy_curves`,
:func:`time_bars`, :func:`allreduce_bandwidth` and :func:`ring_allreduce_model`; Chapter 2
:func:`sectors_per_request`, :func:`roofline`, :func:`bandwidth_vs_size`,
:func:`state_bytes` and :func:`hierarchy`; Chapter 7 :func:`training_time_and_cost` and
:func:`memory_by_zero_stage`; the "Measured on a GPU" boxes of every chapter
:func:`rate_bars`.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.estimate import allreduce_time, ridge_point
from gpudl.estimate import roofline as attainable
from gpudl.hardware import occupancy

__all__ = [
    "occupancy_curves", "time_bars", "allreduce_bandwidth", "ring_allreduce_model",
    "sectors_per_request", "roofline", "bandwidth_vs_size", "state_bytes", "hierarchy",
    "gradient_timeline", "training_time_and_cost", "memory_by_zero_stage", "rate_bars",
]


def _occupancy_or_zero(threads: int, regs: int, cc: tuple[int, int]) -> float:
    try:
        return occupancy(threads, regs, 0, cc).occupancy
    except ValueError:  # the block needs more registers than a block may have: no launch
        return 0.0


def occupancy_curves(
    compute_capability: tuple[int, int],
    block_sizes: Sequence[int] = (64, 256, 1024),
    registers: Sequence[int] = tuple(range(16, 256)),
) -> Figure:
    """Occupancy against registers per thread, one line per block size (no shared memory);
    zero where a block of that size cannot launch at all."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for threads in block_sizes:
        occ = [_occupancy_or_zero(threads, r, compute_capability) for r in registers]
        ax.step(list(registers), occ, where="post", label=f"{threads} threads/block")
    ax.set(
        xlabel="registers per thread",
        ylabel="occupancy",
        ylim=(0, 1.05),
        title=f"Occupancy on compute capability {compute_capability[0]}.{compute_capability[1]}",
    )
    ax.legend()
    fig.tight_layout()
    return fig


def time_bars(seconds: dict[str, float], title: str, note: str = "") -> Figure:
    """A horizontal bar per method, time in milliseconds on a log scale."""
    fig, ax = plt.subplots(figsize=(6, 0.6 * len(seconds) + 1.2))
    names = list(seconds)
    ax.barh(names, [seconds[n] * 1e3 for n in names])
    ax.set_xscale("log")
    ax.set(xlabel="time (ms, log scale)", title=title)
    ax.invert_yaxis()
    if note:
        ax.text(0.99, 0.02, note, transform=ax.transAxes, ha="right", va="bottom", fontsize=8)
    fig.tight_layout()
    return fig


def allreduce_bandwidth(
    rows: Sequence[dict], model: tuple[float, float] | None = None
) -> Figure:
    """Algorithm and bus bandwidth against message size (rows of
    :func:`gpudl.bench.allreduce.allreduce_bandwidth`), with the ring model's algorithm
    bandwidth for ``model = (latency_s, bandwidth_bytes_per_s)`` if given."""
    sizes = [r["size_bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(sizes, [r["algbw_gbs"] for r in rows], "o-", label="algorithm bandwidth")
    ax.plot(sizes, [r["busbw_gbs"] for r in rows], "s-", label="bus bandwidth")
    if model is not None:
        latency, bandwidth = model
        n = rows[0]["world_size"]
        algbw = [s / allreduce_time(s, n, bandwidth, latency) / 1e9 for s in sizes]
        ax.plot(sizes, algbw, "k--",
                label=f"α-β model: {latency * 1e6:.3g} µs, {bandwidth / 1e9:.3g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set(
        xlabel="message size (bytes)",
        ylabel="GB/s",
        title=f"All-reduce, {rows[0]['world_size']} ranks, {rows[0]['backend']}",
    )
    ax.legend()
    fig.tight_layout()
    return fig


def ring_allreduce_model(
    n_bytes: float, bus_bandwidth_gbs: float, latency_s: float, world_sizes: Sequence[int]
) -> Figure:
    """The ring model's all-reduce time against the number of ranks, with and without the
    per-step latency: the bandwidth term approaches 2 S/B, the latency term grows with N."""
    ns = list(world_sizes)
    bandwidth = bus_bandwidth_gbs * 1e9
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(ns, [allreduce_time(n_bytes, n, bandwidth) * 1e3 for n in ns], "o-",
            label="bandwidth term 2(N-1)/N S/B")
    ax.plot(ns, [allreduce_time(n_bytes, n, bandwidth, latency_s) * 1e3 for n in ns], "s--",
            label=f"with {latency_s * 1e6:g} us per step")
    ax.axhline(2 * n_bytes / bandwidth * 1e3, color="k", lw=0.8, ls=":", label="limit 2 S/B")
    ax.set(xlabel="ranks N", ylabel="time (ms)", ylim=(0, None),
           title=f"Ring all-reduce of {n_bytes / 1e9:g} GB at {bus_bandwidth_gbs:g} GB/s")
    ax.legend()
    fig.tight_layout()
    return fig


def sectors_per_request(rows: Sequence[dict]) -> Figure:
    """Sectors per warp request for each access pattern (rows of
    :func:`gpudl.kernels.memory.coalescing_report`), against the ideal."""
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["pattern"] for r in rows]
    ax.bar(names, [r["sectors"] for r in rows], label="traced")
    ax.axhline(rows[0]["ideal"], color="k", ls="--", lw=1, label="ideal (coalesced)")
    ax.set(ylabel="32-byte sectors per request", title="One warp's float32 load")
    ax.legend()
    fig.tight_layout()
    return fig


def roofline(peak_flops: float, peak_bandwidth: float, points: dict[str, tuple],
             title: str) -> Figure:
    """The roofline of a device (flop/s, bytes/s) with kernels placed on it by arithmetic
    intensity. ``points`` maps a name to ``(intensity, measured flop/s or None)``: measured
    points are drawn where they were measured, the others on the roof."""
    intensities = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(intensities, attainable(intensities, peak_flops, peak_bandwidth), "k-",
              label="attainable = min(peak, intensity x bandwidth)")
    ax.axvline(ridge_point(peak_flops, peak_bandwidth), color="grey", ls=":", lw=1,
               label="ridge point")
    for name, (intensity, measured) in points.items():
        y = measured if measured is not None else attainable(intensity, peak_flops,
                                                             peak_bandwidth)
        ax.plot(intensity, y, "o" if measured is not None else "s", label=name)
    ax.set(xlabel="arithmetic intensity (flop/byte)", ylabel="flop/s", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def bandwidth_vs_size(rows: Sequence[dict], key: str, title: str) -> Figure:
    """Bandwidth (``row[key]``, GB/s) against message size (``row["size_bytes"]``)."""
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["size_bytes"] for r in rows], [r[key] for r in rows], "o-")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="message size (bytes)", ylabel="GB/s", title=title)
    fig.tight_layout()
    return fig


def state_bytes(rows: Sequence[dict]) -> Figure:
    """Bytes of parameters, gradients and Adam state on rank 0 for each strategy and world
    size (rows of :func:`gpudl.parallel.sharding.state_bytes`, rank 0's), stacked."""
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
    fig.tight_layout()
    return fig


def hierarchy(levels: dict) -> Figure:
    """Latency (ns per dependent load) and bandwidth (GB/s) of each memory level, from
    :func:`gpudl.bench.hierarchy.measure`, side by side on log scales."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    latency = levels["latency"]
    left.bar(list(latency), [r["ns_per_hop"] for r in latency.values()])
    left.set(yscale="log", ylabel="ns per dependent load", title="Latency")
    bandwidth = dict(levels["bandwidth"])
    names = list(bandwidth)
    values = [r["gbs"] for r in bandwidth.values()]
    if levels.get("register_file_gbs") is not None:
        names.append("registers\n(derived)")
        values.append(levels["register_file_gbs"])
    right.bar(names, values)
    right.set(yscale="log", ylabel="GB/s", title="Bandwidth")
    fig.tight_layout()
    return fig


def gradient_timeline(events: Sequence[dict]) -> Figure:
    """One backward pass with DDP on one rank (``events`` of
    :func:`gpudl.parallel.grad_timeline.timeline_worker`): a row per parameter, marked when
    its gradient became ready, then a row per bucket, a bar from the start to the end of its
    all-reduce; milliseconds since the backward pass started. A dotted line marks the last
    gradient: bars that start left of it overlap the computation."""
    ready = [e for e in events if e["kind"] == "grad_ready"]
    buckets = [e for e in events if e["kind"] == "allreduce"]
    fig, ax = plt.subplots(figsize=(7, 0.28 * (len(ready) + len(buckets)) + 1.4))
    ax.plot([e["time_s"] * 1e3 for e in ready], range(len(ready)), "o", label="gradient ready")
    rows = range(len(ready), len(ready) + len(buckets))
    ax.barh(rows, [(e["end_s"] - e["start_s"]) * 1e3 for e in buckets],
            left=[e["start_s"] * 1e3 for e in buckets], height=0.6, color="tab:orange",
            label="bucket all-reduce")
    ax.axvline(max(e["time_s"] for e in ready) * 1e3, color="k", ls=":", lw=1,
               label="last gradient ready")
    ax.set_yticks(range(len(ready) + len(buckets)), [
        *(f"layer {e['layer']} {e['name'].rsplit('.', 1)[-1]}" for e in ready),
        *(f"bucket {e['bucket']} ({e['n_params']} tensor{'s' * (e['n_params'] != 1)}, "
          f"{e['bytes'] / 1e3:.0f} kB)" for e in buckets),
    ], fontsize=7)
    ax.invert_yaxis()
    ax.set(xlabel="ms since the backward pass started", xlim=(0, None),
           title="Gradients and DDP's all-reduces in one backward pass")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def training_time_and_cost(flops: float, peak_flops: float, gpu_name: str,
                           gpus: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                           mfus: Sequence[float] = (0.3, 0.4, 0.5),
                           claimed: tuple[int, float] | None = None) -> Figure:
    """Chapter 7, "Time, cost and energy": hours against the number of GPUs for each MFU
    (left; ``claimed`` = (GPUs, hours) marks a run someone reported), and GPU-hours, which
    set the cost at any price per GPU-hour, against MFU (right)."""
    from gpudl.estimate import training_time

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for fraction in mfus:
        hours = [training_time(flops, n, peak_flops, fraction) / 3600 for n in gpus]
        left.plot(gpus, hours, "o-", label=f"MFU {fraction:.0%}")
    if claimed is not None:
        left.plot([claimed[0]], [claimed[1]], "r*", markersize=12,
                  label=f"claimed: {claimed[0]} GPUs, {claimed[1]:g} h")
    left.set(xscale="log", yscale="log", xlabel=f"{gpu_name} GPUs", ylabel="hours",
             title=f"{flops:.3g} flops")
    left.set_xticks(list(gpus), [str(n) for n in gpus])
    left.legend(fontsize=8)
    fractions = np.linspace(0.1, 0.6, 26)
    right.plot(fractions * 100, [training_time(flops, 1, peak_flops, f) / 3600 for f in fractions])
    right.set(xlabel="MFU (%)", ylabel="GPU-hours (x your price = cost)",
              title="the same for any number of GPUs")
    fig.tight_layout()
    return fig


def memory_by_zero_stage(cases: dict[str, Sequence[float]],
                         gpu_memory_gb: dict[str, float]) -> Figure:
    """Chapter 7, "Memory": model state per GPU (GB) under ZeRO stages 0 to 3 for each case
    (label -> four values, e.g. from :func:`gpudl.estimate.model_state_memory`), against the
    memory of some GPUs (name -> GB, horizontal lines)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    x = np.arange(4)
    width = 0.8 / len(cases)
    for k, (label, values) in enumerate(cases.items()):
        ax.bar(x + (k - (len(cases) - 1) / 2) * width, values, width, label=label)
    for (name, gb), style in zip(gpu_memory_gb.items(), (":", "--", "-.", "-"), strict=False):
        ax.axhline(gb, color="gray", linestyle=style, linewidth=1)
        ax.text(3.45, gb, name, fontsize=7, va="bottom", ha="right")
    ax.set(xticks=x, xticklabels=["0 (none)", "1 (optimizer)", "2 (+gradients)",
                                  "3 (+parameters)"],
           xlabel="ZeRO stage", ylabel="model state per GPU (GB)", title="Mixed-precision Adam")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def rate_bars(groups: dict[str, dict[str, float]], references: dict[str, float], unit: str,
              title: str, reference_label: str) -> Figure:
    """One bar per kernel in each group (a size, a layout), its rate in ``unit`` (higher is
    faster), and each group's reference rate (a torch copy, cuBLAS) as a dashed line across
    the group's bars, labelled ``reference_label``. One group: the kernels name the bars."""
    names = list(dict.fromkeys(name for group in groups.values() for name in group))
    single = len(groups) == 1
    width = 0.8 / len(names)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.5 * len(names) * len(groups)), 3.6))
    for j, name in enumerate(names):
        xs = [i + j * width for i, group in enumerate(groups.values()) if name in group]
        ax.bar(xs, [group[name] for group in groups.values() if name in group], width * 0.9,
               label=None if single else name, color=f"C{j % 10}")
    for i, group in enumerate(groups):
        if group in references:
            ax.hlines(references[group], i - width / 2, i + 0.8 - width / 2, colors="k",
                      linestyles="dashed", label=reference_label if i == 0 else None)
    if single:
        ax.set_xticks([j * width for j in range(len(names))], names, rotation=30, ha="right",
                      fontsize=8)
    else:
        ax.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))], list(groups))
    ax.set(ylabel=unit, title=title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    return fig
