"""Chapter 5's figures: the all-reduce cost model and measured bandwidths, the ring all-reduce
step by step, when a backward pass's gradients and all-reduces happen, and DDP's buckets
overlapping the backward pass.

Book section: Chapter 5, Data parallelism.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.checks import (
    check_instance,
    check_int,
    check_ints,
    check_positive,
    check_real,
    check_reals,
)
from gpudl.estimate import allreduce_time
from gpudl.plots.style import check_rows, finish

__all__ = ["ring_schedule", "ring_steps", "bucket_timeline", "ddp_overlap", "allreduce_bandwidth",
           "ring_allreduce_model", "bandwidth_vs_size", "gradient_timeline"]


def ring_schedule(world_size: int) -> list[np.ndarray]:
    """The state of a ring all-reduce after each step, by the rule of
    :func:`gpudl.parallel.data.ring_all_reduce`: at reduce-scatter step ``s`` rank ``r``
    sends chunk ``r - s`` to rank ``r + 1``, which adds it to its own; at all-gather step
    ``s`` it sends chunk ``r + 1 - s``, which replaces the receiver's (indices modulo N).
    Element ``[r, c]`` of each state counts the ranks' contributions in rank ``r``'s chunk
    ``c``: the first state is all ones, the last all ``world_size``."""
    check_int("world_size", world_size, 1)
    n = world_size
    held = [[{r} for _ in range(n)] for r in range(n)]
    states = [np.ones((n, n), dtype=int)]
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            sends = [(r, (r - s) % n if phase == "reduce-scatter" else (r + 1 - s) % n)
                     for r in range(n)]
            payload = {r: set(held[r][c]) for r, c in sends}
            for r, c in sends:
                dest = (r + 1) % n
                held[dest][c] = held[dest][c] | payload[r] if phase == "reduce-scatter" \
                    else set(payload[r])
            states.append(np.array([[len(h) for h in row] for row in held]))
    return states


def ring_steps(world_size: int = 4) -> Figure:
    """:func:`ring_schedule` drawn: a panel per step, rows ranks and columns chunks, each cell
    shaded by how many ranks' contributions it holds (N is the complete sum)."""
    check_int("world_size", world_size, 1)
    states = ring_schedule(world_size)
    n = world_size
    # square panels side by side: the height holds one panel, its title and ticks, and the label
    fig, axes = plt.subplots(1, len(states), figsize=(7.4, 1.8), squeeze=False)
    for k, (ax, state) in enumerate(zip(axes[0], states, strict=True)):
        ax.imshow(state, cmap="Blues", vmin=0, vmax=n)
        for r in range(n):
            for c in range(n):
                ax.text(c, r, str(state[r, c]), ha="center", va="center",
                        color="white" if state[r, c] == n else "black")
        phase = "start" if k == 0 else (f"RS {k}" if k < n else f"AG {k - n + 1}")
        ax.set_title(phase)
        ax.set_xticks(range(n), [str(c) for c in range(n)])
        ax.set_yticks(range(n), [f"r{r}" for r in range(n)] if k == 0 else [""] * n)
        ax.tick_params(length=0)
    axes[0, 0].set_ylabel("rank")
    fig.supxlabel("chunk; number = ranks summed into it (RS: reduce-scatter, AG: all-gather)",
                  fontsize=10.5)
    return finish(fig)


def bucket_timeline(compute_s: float, grad_bytes: float, world_size: int, bandwidth: float,
                    latency: float = 0.0, backward_fraction: float = 2 / 3,
                    n_buckets: int = 1) -> list[tuple[float, float, float]]:
    """The schedule behind :func:`gpudl.estimate.data_parallel_step_time`: per bucket, the
    time its gradients are ready and the start and end of its all-reduce (seconds from the
    start of the backward pass)."""
    check_int("n_buckets", n_buckets, 1)
    check_real("backward_fraction", backward_fraction, 0, 1)
    check_real("compute_s", compute_s, 0)
    check_real("grad_bytes", grad_bytes, 0)
    per_bucket = allreduce_time(grad_bytes / n_buckets, world_size, bandwidth, latency)
    backward = backward_fraction * compute_s
    rows, free = [], 0.0
    for i in range(n_buckets):
        ready = (i + 1) / n_buckets * backward
        start = max(ready, free)
        free = start + per_bucket
        rows.append((ready, start, free))
    return rows


def ddp_overlap(compute_s: float = 0.15, grad_bytes: float = 100e6, world_size: int = 4,
                bandwidth: float = 2e9, latency: float = 50e-6,
                bucket_counts: tuple[int, ...] = (1, 4)) -> Figure:
    """The backward pass and the all-reduces of :func:`bucket_timeline` for each bucket count:
    with one bucket the all-reduce starts when backward ends; with several, each starts as
    its bucket is ready and only the last one's tail is exposed."""
    check_ints("bucket_counts", bucket_counts, 1)
    bucket_timeline(compute_s, grad_bytes, world_size, bandwidth, latency)  # the checks
    fig, ax = plt.subplots(figsize=(7.4, 1.4 + 1.3 * len(bucket_counts)))
    backward = 2 / 3 * compute_s
    ticks, labels = [], []
    for k, n in enumerate(bucket_counts):
        y = 2.2 * k
        ax.barh(y, backward * 1e3, color="#9db8d9", height=0.7, gid="backward")
        rows = bucket_timeline(compute_s, grad_bytes, world_size, bandwidth, latency,
                               n_buckets=n)
        for i, (ready, start, end) in enumerate(rows):
            ax.barh(y + 0.9, (end - start) * 1e3, left=start * 1e3, height=0.7,
                    color="#dd8452" if i % 2 == 0 else "#c44e52", gid=f"allreduce:{n}")
            ax.plot(ready * 1e3, y + 0.45, "kv", markersize=6)
        exposed = max(0.0, rows[-1][2] - backward)
        ax.text(rows[-1][2] * 1e3, y + 0.9, f" {exposed * 1e3:.0f} ms exposed", va="center")
        ticks += [y, y + 0.9]
        labels += ["backward", f"{n} bucket{'s' * (n > 1)}"]
    ax.set_yticks(ticks, labels)
    ax.invert_yaxis()
    end = max(bucket_timeline(compute_s, grad_bytes, world_size, bandwidth, latency,
                              n_buckets=n)[-1][2] for n in bucket_counts)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color="#9db8d9", label="backward pass"),
                       Patch(color="#dd8452", label="all-reduce of a bucket"),
                       Patch(color="#c44e52", label="... of the next bucket")],
              loc="upper right", fontsize=10)
    ax.set(xlabel="ms since the backward pass started (▼ a bucket's gradients are ready)",
           xlim=(0, end * 1e3 * 1.35),
           title=f"Model: {grad_bytes / 1e6:g} MB of gradients, {world_size} ranks, "
                 f"{bandwidth / 1e9:g} GB/s")
    return finish(fig)


def allreduce_bandwidth(
    rows: Sequence[dict], model: tuple[float, float] | None = None
) -> Figure:
    """Algorithm and bus bandwidth against message size (rows of
    :func:`gpudl.bench.allreduce.allreduce_bandwidth`), with the ring model's algorithm
    bandwidth for ``model = (latency_s, bandwidth_bytes_per_s)`` if given."""
    check_rows("rows", rows, ("size_bytes",))
    if model is not None:
        check_reals("model", model, 0, minimum_count=2)
    sizes = [r["size_bytes"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.plot(sizes, [r["algbw_gbs"] for r in rows], "o-", label="algorithm bandwidth")
    # with 2 ranks the bus bandwidth's factor 2(N-1)/N is 1: the two lines coincide
    same = rows[0]["world_size"] == 2
    ax.plot(sizes, [r["busbw_gbs"] for r in rows], "s--" if same else "s-",
            label="bus bandwidth" + (" (= algorithm bandwidth for 2 ranks)" if same else ""))
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
    return finish(fig)


def ring_allreduce_model(
    n_bytes: float, bus_bandwidth_gbs: float, latency_s: float, world_sizes: Sequence[int]
) -> Figure:
    """The ring model's all-reduce time against the number of ranks, with and without the
    per-step latency: the bandwidth term approaches 2 S/B, the latency term grows with N."""
    check_real("n_bytes", n_bytes, 0)
    check_positive("bus_bandwidth_gbs", bus_bandwidth_gbs)
    check_real("latency_s", latency_s, 0)
    check_ints("world_sizes", world_sizes, 1)
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
    return finish(fig)


def bandwidth_vs_size(rows: Sequence[dict], key: str, title: str) -> Figure:
    """Bandwidth (``row[key]``, GB/s) against message size (``row["size_bytes"]``)."""
    check_rows("rows", rows, ("size_bytes", key))
    check_instance("title", title, str)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["size_bytes"] for r in rows], [r[key] for r in rows], "o-")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="message size (bytes)", ylabel="GB/s", title=title)
    return finish(fig)


def gradient_timeline(events: Sequence[dict]) -> Figure:
    """One backward pass with DDP on one rank (``events`` of
    :func:`gpudl.parallel.data.timeline_worker`): a row per parameter, marked when
    its gradient became ready, then a row per bucket, a bar from the start to the end of its
    all-reduce; milliseconds since the backward pass started. A dotted line marks the last
    gradient: bars that start left of it overlap the computation."""
    check_rows("events", events, ("kind",))
    ready = [e for e in events if e["kind"] == "grad_ready"]
    buckets = [e for e in events if e["kind"] == "allreduce"]
    fig, ax = plt.subplots(figsize=(7.4, 0.32 * (len(ready) + len(buckets)) + 1.4))
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
    ])
    ax.invert_yaxis()
    ax.set(xlabel="ms since the backward pass started", xlim=(0, None),
           title="Gradients and DDP's all-reduces in one backward pass")
    ax.legend(loc="upper right")
    return finish(fig)
