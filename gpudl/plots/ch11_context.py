"""Chapter 11's figures of long sequences and of the five dimensions: which key/value chunk each
rank holds at each step of ring attention, a ring step's transfer against its computation,
the work a causal mask leaves each rank in the two layouts, and the groups of a 5-D mesh.

Book section: *Chapter 11, "Ring attention"*, *"When the ring hides its transfers"*,
*"Splitting the sequence"* and *"Five dimensions"*. The layouts are
:func:`gpudl.parallel.context.rank_segments`'s, the step times
:func:`gpudl.estimate.ring_step_time`'s, and the mesh is laid out as
:meth:`gpudl.parallel.degrees.ParallelDegrees.device_mesh` lays out its ranks (row-major
over the dimensions in the order given).
"""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.checks import check_choice, check_instance, check_int
from gpudl.parallel.context import LAYOUTS, rank_segments
from gpudl.parallel.degrees import ParallelDegrees
from gpudl.plots.ch11 import EXPERT_COLORS
from gpudl.plots.style import finish

__all__ = ["MESH_DIMS", "causal_balance", "mesh_groups", "parallel_mesh", "query_owners",
           "ring_attention_steps", "ring_timelines"]

#: The four degrees that multiply to the world size, in the order of a mesh's dimensions.
MESH_DIMS = ("data", "pipeline", "context", "tensor")


def ring_attention_steps(world_size: int = 4) -> Figure:
    """Ring attention on ``world_size`` ranks: at step ``t`` rank ``r`` attends its queries to
    the key/value chunk of rank ``(r - t) mod W`` (cell text and colour), while it sends that
    chunk on to rank ``r + 1``; after ``W`` steps every rank has seen every chunk once."""
    w = check_int("world_size", world_size, 1, len(EXPERT_COLORS))
    held = np.array([[(r - t) % w for t in range(w)] for r in range(w)])
    fig, ax = plt.subplots(figsize=(1.6 + 1.2 * w, 0.9 + 0.55 * w))
    for r in range(w):
        for t in range(w):
            ax.add_patch(plt.Rectangle((t - 0.45, r - 0.4), 0.9, 0.8,
                                       facecolor=EXPERT_COLORS[held[r, t]], gid=f"held:{r}:{t}"))
            ax.text(t, r, f"K, V of {held[r, t]}", ha="center", va="center", color="white")
            if t < w - 1:
                ax.annotate("", xy=(t + 0.6, (r + 1) % w - 0.1 if r < w - 1 else 0.0),
                            xytext=(t + 0.4, r + 0.1 if r < w - 1 else w - 1.0),
                            arrowprops={"arrowstyle": "->", "color": "#555555",
                                        "linewidth": 0.8})
    ax.set(xlim=(-0.55, w - 0.45), ylim=(w - 0.5, -0.5), xlabel="ring step",
           title="Queries stay; each key/value chunk moves one rank on per step")
    ax.set_xticks(range(w), [str(t) for t in range(w)])
    ax.set_yticks(range(w), [f"rank {r}" for r in range(w)])
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    return finish(fig)


def ring_timelines(cases: dict[str, dict], world_size: int = 4) -> Figure:
    """For each case (a label -> :func:`gpudl.estimate.ring_step_time`'s dict), one rank's
    ``world_size`` ring steps in two rows: the ring that posts the next chunk's transfer
    before it computes (the transfer, gid ``"transfer"``, under the computation, gid
    ``"compute"``; a step lasts the longer of the two) and the ring that waits for each
    transfer after computing (their sum). Times in microseconds."""
    check_instance("cases", cases, dict)
    if not cases:
        raise ValueError("cases must hold at least one ring step")
    w = check_int("world_size", world_size, 2)
    for label, case in cases.items():
        check_instance(f"cases[{label!r}]", case, dict)
        for key in ("compute_s", "transfer_s"):
            if key not in case:
                raise ValueError(f"cases[{label!r}] lacks {key!r} (a ring_step_time dict)")
    fig, axes = plt.subplots(len(cases), 1, figsize=(7.4, 0.9 + 1.55 * len(cases)),
                             squeeze=False)
    for ax, (label, case) in zip(axes[:, 0], cases.items(), strict=True):
        compute, transfer = case["compute_s"] * 1e6, case["transfer_s"] * 1e6
        for y, overlapped in ((0, True), (1, False)):
            t = 0.0
            for step in range(w):
                ax.barh(y - 0.17, compute, left=t, height=0.3, color="#4c72b0", gid="compute")
                if step == w - 1:  # the last step sends nothing
                    t += compute
                    continue
                ax.barh(y + 0.17, transfer, left=t if overlapped else t + compute, height=0.3,
                        color="#dd8452", gid="transfer")
                t += max(compute, transfer) if overlapped else compute + transfer
            ax.text(t, y, f" {t:,.1f} µs", va="center")
        ax.set_yticks([0, 1], ["overlapped", "waiting"])
        ax.invert_yaxis()
        ax.set(xlabel="µs", title=label)
    fig.legend(handles=[plt.Rectangle((0, 0), 1, 1, color="#4c72b0"),
                        plt.Rectangle((0, 0), 1, 1, color="#dd8452")],
               labels=["attention of one chunk", "next chunk's transfer"], loc="lower center",
               ncol=2, fontsize=10, frameon=False)
    finish(fig)
    fig.subplots_adjust(bottom=0.1 + 0.25 / len(cases), right=0.88)
    return fig


def query_owners(seq_len: int, world_size: int, layout: str) -> np.ndarray:
    """The rank that holds each query position of a sequence of ``seq_len`` tokens in
    ``layout`` (:func:`gpudl.parallel.context.rank_segments`): under ring attention that
    rank computes the query's scores."""
    check_choice("layout", layout, LAYOUTS)
    owners = np.full(check_int("seq_len", seq_len, 1), -1)
    for rank, segments in enumerate(rank_segments(seq_len, world_size, layout)):
        for start, end in segments:
            owners[start:end] = rank
    return owners


def causal_balance(seq_len: int = 16, world_size: int = 4) -> Figure:
    """Causal attention's scores (query rows, key columns; a key after its query is masked)
    coloured by the rank that computes them, in the contiguous and the balanced layout, and
    the number of scores each rank computes in each (bars, gid ``"scores:<layout>"``)."""
    w = check_int("world_size", world_size, 1, len(EXPERT_COLORS))
    fig, axes = plt.subplots(1, 3, figsize=(7.4, 2.9),
                             gridspec_kw={"width_ratios": [1, 1, 1.1]})
    width = 0.38
    for k, (ax, layout) in enumerate(zip(axes[:2], LAYOUTS, strict=True)):
        owners = query_owners(seq_len, w, layout)
        image = np.ones((seq_len, seq_len, 3))
        for q in range(seq_len):
            image[q, :q + 1] = plt.matplotlib.colors.to_rgb(EXPERT_COLORS[owners[q]])
        ax.imshow(image, interpolation="nearest")
        ax.set(title=layout, xlabel="key", xticks=[], yticks=[])
        counts = [int(((owners == r)[:, None] * np.tri(seq_len)).sum()) for r in range(w)]
        axes[2].bar(np.arange(w) + (k - 0.5) * width, counts, width, label=layout,
                    color=["#bbbbbb", "#4c72b0"][k], gid=f"scores:{layout}")
    axes[0].set_ylabel("query")
    axes[2].set(xticks=range(w), xlabel="rank", ylabel="scores computed")
    axes[2].legend(fontsize=10, loc="upper left")
    return finish(fig)


def mesh_groups(degrees: ParallelDegrees, order: tuple[str, ...] = MESH_DIMS
                ) -> dict[str, list[tuple[int, int]]]:
    """For each dimension of ``order`` (the four degrees that multiply to the world size, in
    mesh order, the last varying fastest) and ``"expert"``: each rank's ``(group, place)``,
    the group of ranks that share every other coordinate, and its coordinate along the
    dimension. The experts are spread over the ``data x context`` ranks that share a tensor
    and a pipeline coordinate, ``expert`` consecutive ones to a group (as
    ``device_mesh(("expert_data", "expert"))`` lays them out)."""
    check_instance("degrees", degrees, ParallelDegrees)
    if not isinstance(order, tuple):
        raise TypeError(f"order must be a tuple of {MESH_DIMS} in some order, got {order!r}")
    if sorted(order) != sorted(MESH_DIMS):
        raise ValueError(f"order must be a tuple of {MESH_DIMS} in some order, got {order!r}")
    shape = tuple(getattr(degrees, d) for d in order)
    coords = np.array(np.unravel_index(np.arange(degrees.world_size), shape)).T
    out = {}
    for i, dim in enumerate(order):
        others = np.delete(coords, i, axis=1)
        keys = {tuple(c): g for g, c in enumerate(sorted({tuple(c) for c in others}))}
        out[dim] = [(keys[tuple(o)], int(c[i])) for o, c in zip(others, coords, strict=True)]
    index = {d: order.index(d) for d in MESH_DIMS}
    spread = coords[:, index["data"]] * degrees.context + coords[:, index["context"]]
    home = [(int(c[index["tensor"]]), int(c[index["pipeline"]]), int(s) // degrees.expert)
            for c, s in zip(coords, spread, strict=True)]
    keys = {h: g for g, h in enumerate(sorted(set(home)))}
    out["expert"] = [(keys[h], int(s) % degrees.expert) for h, s in zip(home, spread,
                                                                          strict=True)]
    return out


def parallel_mesh(degrees: ParallelDegrees, order: tuple[str, ...] = MESH_DIMS,
                  per_node: int = 8) -> Figure:
    """The ranks of ``degrees`` drawn as nodes of ``per_node`` GPUs, one panel per dimension
    of :func:`mesh_groups`: a GPU's colour is its group (the ranks that communicate along that
    dimension), its number its place in the group."""
    groups = mesh_groups(degrees, order)
    n = check_int("per_node", per_node, 1)
    world = degrees.world_size
    rows = math.ceil(world / n)
    dims = (*reversed(order), "expert")
    fig, axes = plt.subplots(len(dims), 1, figsize=(7.4, 0.4 + len(dims) * (0.5 + 0.36 * rows)),
                             squeeze=False)
    names = {"tensor": "tensor", "context": "context", "pipeline": "pipeline (stage)",
             "data": "data", "expert": "expert (within data x context)"}
    for ax, dim in zip(axes[:, 0], dims, strict=True):
        for rank, (group, place) in enumerate(groups[dim]):
            x, y = rank % n, rank // n
            color = EXPERT_COLORS[group % len(EXPERT_COLORS)]
            ax.add_patch(plt.Rectangle((x - 0.45, y - 0.4), 0.9, 0.8, facecolor=color,
                                       gid=f"{dim}:{rank}"))
            ax.text(x, y, f"{place}", ha="center", va="center", color="white")
        degree = getattr(degrees, dim)
        ax.set_title(f"{names[dim]}: groups of {degree}", loc="left", fontsize=11)
        ax.set(xlim=(-0.55, n - 0.45), ylim=(rows - 0.5, -0.5), xticks=[])
        ax.set_yticks(range(rows), [f"node {r}" for r in range(rows)])
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
    return finish(fig)
