"""Chapter 8's data-layout figures: which elements one block of a kernel, and one thread or
warp in it, reads and writes, for each kernel the chapter walks through; and the running
maximum and sum of one row of online softmax, tile by tile.

Book section: Chapter 8, Attention and tensor cores ("v1: three kernels and the scores in
memory", "v2: one fused kernel with online softmax" and "A tensor-core matmul").

The footprints are read off :func:`gpudl.trace.trace`: they are what the kernels did on the
simulator, not a drawing of what they should do. Tracing needs the simulator: on a GPU, call
:func:`attention_footprints` and :func:`tensor_core_footprints` through
:func:`gpudl.trace.on_simulator`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from gpudl.checks import (
    check_array,
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_ints,
    is_device_array,
)
from gpudl.plots.style import finish

__all__ = ["footprint", "attention_footprints", "tensor_core_footprints", "kernel_footprints",
           "online_softmax_steps", "online_softmax_row"]

#: The colours of an element no one touches, one the block touches, one the marked thread (or
#: warp) reads and one it writes: the values 0 to 3 of :func:`footprint`.
COLOURS = ("#f0f0f0", "#c6dbef", "#2c7fb8", "#d7301f")
#: The thread every attention figure marks, (ty, tx): query 5 of its block, key or column 3.
MARKED = (5, 3)


def footprint(kernel: Any, griddim: Any, blockdim: Any, args: Sequence[Any],
              block: Sequence[int], threads: Sequence[int],
              shared: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Launch ``kernel[griddim, blockdim](*args)`` under the tracer and return, for each array
    argument and each shared array named in ``shared`` (name -> its number of rows), an
    int8 array of its shape: 1 where block ``block`` (blockIdx x, y, z) loads or stores, 2
    where one of ``threads`` (linear indices in the block) loads, 3 where one of them stores,
    0 elsewhere. A shared array's width is read off the highest element the block touches."""
    from gpudl.trace import trace

    check_callable("kernel", kernel)
    where = check_ints("block", block, 0)
    if len(where) > 3:
        raise ValueError(f"block must hold at most 3 indices (x, y, z), got {where}")
    where = where + (0,) * (3 - len(where))
    marked = set(check_ints("threads", threads, 0))
    check_instance("shared", shared or {}, dict)
    for name, rows in (shared or {}).items():
        check_int(f"shared[{name!r}]", rows, 1)
    traced = trace(kernel, griddim, blockdim, *args)
    layout: dict[tuple[str, str], tuple[tuple[int, ...], int, int]] = {}
    for position, (name, arg) in enumerate(zip(traced.parameters, args, strict=True)):
        ary = arg._ary if is_device_array(arg) else arg
        if isinstance(ary, np.ndarray) and ary.ndim > 0:
            layout[("global", name)] = (ary.shape, ary.itemsize, (position + 1) << 32)
    for name, rows in (shared or {}).items():
        seen = [a for a in traced.accesses if a.kind == "shared" and a.array == name]
        if not seen:
            raise ValueError(f"{traced.kernel} makes no access to a shared array {name!r}")
        base, size = min(a.address for a in seen), seen[0].size
        width = math.ceil(((max(a.address for a in seen) - base) // size + 1) / rows)
        layout[("shared", name)] = ((rows, width), size, base)
    levels = {key: np.zeros(math.prod(shape), np.int8) for key, (shape, _, _) in layout.items()}
    for a in traced.accesses:
        key = (a.kind, a.array)
        if key not in layout or a.block != where:
            continue
        _, size, base = layout[key]
        level = (3 if a.op == "store" else 2) if a.thread in marked else 1
        index = (a.address - base) // size
        levels[key][index] = max(levels[key][index], level)
    return {name: levels[(kind, name)].reshape(layout[(kind, name)][0])
            for kind, name in layout}


def attention_footprints(variant: str, s: int, d: int) -> list[dict]:
    """The panels of :func:`kernel_footprints` for an attention variant of
    :mod:`gpudl.kernels.attention`, traced on one head of ``s`` tokens and head size ``d``
    (not causal), each marking the thread (ty, tx) = ``MARKED`` or, in v1's softmax, the
    lane tx of the row ty. v1: the blocks of its three kernels that compute the score of
    query ty with key 16 + tx, row ty of the probabilities, and column tx of row ty of the
    output. v2: block 0's shared tiles, and the rows of the output it owns."""
    from numba import cuda

    from gpudl.kernels import attention
    from gpudl.kernels.arrays import poisoned

    check_choice("variant", variant, attention.TRACEABLE)  # the tracer sees Numba's launches
    tile = attention.TILE
    check_int("s", s, tile + 1)
    check_int("d", d, 1, attention.MAX_HEAD_DIM)
    ty, tx = MARKED
    thread = ty * tile + tx
    marks = {"v1_scores": ((1, 0), [thread], None), "v1_softmax": ((ty, 0), [tx], None),
             "v1_pv": ((0, 0), [thread], None),
             "v2_fused": ((0, 0), [thread], dict.fromkeys(("q_s", "k_s", "v_s", "x_s"), tile))}
    found: dict[str, dict[str, np.ndarray]] = {}

    def launch(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        name = kernel.py_func.__name__
        block, threads, shared = marks[name]
        found[name] = footprint(kernel, griddim, blockdim, args, block, threads, shared)

    rng = np.random.default_rng(0)
    q, k, v = (cuda.to_device(rng.standard_normal((1, s, d)).astype(np.float32))
               for _ in range(3))
    attention.VARIANTS[variant](q, k, v, poisoned((1, s, d)), poisoned((1, s)), False,
                                launch=launch)
    if variant == "v1_three_kernels":
        scores, softmax, pv = found["v1_scores"], found["v1_softmax"], found["v1_pv"]
        return [
            {"title": f"v1_scores: block (1, 0),\nthread ({ty}, {tx})",
             "left": ("q", scores["q"][0]), "top": ("k, transposed", scores["k"][0].T),
             "out": ("scores", scores["scores"][0])},
            {"title": f"v1_softmax: block {ty},\nlane {tx}",
             "out": ("scores", softmax["scores"][0])},
            {"title": f"v1_pv: block (0, 0),\nthread ({ty}, {tx})",
             "left": ("probs", pv["probs"][0]), "top": ("v", pv["v"][0]),
             "out": ("o", pv["o"][0])},
        ]
    fused = found["v2_fused"]
    return [
        {"title": "the scores of one key tile",
         "left": ("q_s", fused["q_s"]), "top": ("k_s, transposed", fused["k_s"].T),
         "out": ("x_s", fused["x_s"])},
        {"title": "weights times values",
         "left": ("x_s", fused["x_s"]), "top": ("v_s", fused["v_s"]),
         "out": (f"o, rows 0-{tile - 1}", fused["o"][0, :tile])},
    ]


def tensor_core_footprints(variant: str) -> list[dict]:
    """The panel of :func:`kernel_footprints` for a kernel of
    :mod:`gpudl.kernels.tensor_core_matmul`, traced on a product with one step of K, marking
    warp 1 of one block. ``v1_warp_tiles``: C of two blocks by two, the words of A and B
    (B's words as B lays them out, K down) that the block reads. ``v2_shared_tiles``: one
    block's tile of C and the shared slabs of A's and B's words."""
    from gpudl.kernels import mma
    from gpudl.kernels import tensor_core_matmul as tc

    check_choice("variant", variant, tc.VARIANTS)
    if variant == "v1_warp_tiles":
        m, n, block, shared = 2 * mma.M, 2 * tc.WARPS * mma.N, (1, 1), None
    else:
        m, n, block, shared = tc.BM, tc.BN, (0, 0), {"a_s": tc.BM, "b_s": tc.BN}
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, mma.K), (mma.K, n)))
    griddim, blockdim = tc.launch_config(variant, m, n)
    kernel = getattr(tc, variant)
    found = footprint(kernel, griddim, blockdim, [mma.bf16_words(a), mma.bf16_words(b.T),
                                                  np.full((m, n), np.nan, np.float32)],
                      block, range(32, 64), shared)
    if variant == "v1_warp_tiles":
        return [{"title": f"v1_warp_tiles: block {block},\nwarp 1",
                 "left": ("A, words", found["a"]), "top": ("B, words", found["bt"].T),
                 "out": ("C", found["c"])}]
    return [{"title": "v2_shared_tiles: one block,\nwarp 1",
             "left": ("a_s", found["a_s"]), "top": ("b_s, transposed", found["b_s"].T),
             "out": ("C", found["c"])}]


def _check_panels(panels: object) -> list[dict]:
    if isinstance(panels, str | dict) or not isinstance(panels, Sequence):
        raise TypeError(f"panels must be a list of dicts, got {panels!r}")
    if not panels:
        raise ValueError("panels must hold at least one panel")
    for i, panel in enumerate(panels):
        check_instance(f"panels[{i}]", panel, dict)
        check_instance(f"panels[{i}]['title']", panel.get("title"), str)
        if "out" not in panel:
            raise ValueError(f"panels[{i}] has no 'out' array")
        for part in ("left", "top", "out"):
            if part in panel:
                label, levels = panel[part]
                check_instance(f"panels[{i}][{part!r}][0]", label, str)
                check_array(f"panels[{i}][{part!r}][1]", levels, 2, "iu")
    return list(panels)


def _show(ax: Any, levels: np.ndarray, x: float, y: float, label: str, where: str) -> None:
    """One array at (x, y) (its top-left corner, y downwards), framed, labelled ``where``
    ("above" or "below") with its name and shape."""
    rows, cols = levels.shape
    ax.imshow(levels, cmap=ListedColormap(COLOURS), vmin=0, vmax=3, interpolation="nearest",
              extent=(x, x + cols, y + rows, y))
    ax.add_patch(Rectangle((x, y), cols, rows, fill=False, edgecolor="k", lw=0.8))
    for level in (2, 3):  # a marker at least 3.5 points wide on the marked cells, however small
        r, c = np.nonzero(levels == level)
        ax.plot(x + c + 0.5, y + r + 0.5, "s", color=COLOURS[level], markersize=3.5, lw=0)
    text_y = y - 0.6 if where == "above" else y + rows + 0.6
    ax.text(x + cols / 2, text_y, f"{label}\n{rows} x {cols}", ha="center",
            va="bottom" if where == "above" else "top")


def kernel_footprints(panels: Sequence[dict], title: str, unit: str = "thread") -> Figure:
    """One panel per kernel (:func:`attention_footprints`, :func:`tensor_core_footprints`):
    its output ``out`` (label, levels) with, as a matrix product lays them out, the
    operand whose rows it reads on the left and the one whose columns it reads on top. The
    colours are the levels of :func:`footprint`; ``unit`` names what is marked (a thread, a
    warp)."""
    panels = _check_panels(panels)
    check_instance("title", title, str)
    check_choice("unit", unit, ("thread", "warp"))
    extents = []
    for panel in panels:
        rows, cols = panel["out"][1].shape
        gap = max(2.0, 0.06 * max(rows, cols))
        left = panel["left"][1].shape[1] + gap if "left" in panel else 0.0
        top = panel["top"][1].shape[0] + gap if "top" in panel else 0.0
        extents.append((gap, left, top, rows, cols))
    widths = [left + cols for _, left, _, _, cols in extents]
    fig, axes = plt.subplots(1, len(panels), figsize=(7.5, 4.2), squeeze=False,
                             gridspec_kw={"width_ratios": widths})
    for ax, panel, (_, left, top, rows, cols) in zip(axes[0], panels, extents, strict=True):
        _show(ax, panel["out"][1], 0, 0, panel["out"][0], "below")
        if "left" in panel:
            _show(ax, panel["left"][1], -left, 0, panel["left"][0], "below")
        if "top" in panel:
            _show(ax, panel["top"][1], 0, -top, panel["top"][0], "above")
        room = 0.2 * (top + rows) + 3  # for the labels above and below
        ax.set(xlim=(-left - 1, cols + 1), ylim=(rows + room, -top - room), aspect="equal")
        ax.set_title(panel["title"], fontsize=10)
        ax.axis("off")
    fig.suptitle(title, fontsize=11)
    finish(fig)
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.5) for c in COLOURS[1:]]
    fig.legend(handles, ["the block's elements", f"read by the {unit}",
                         f"written by the {unit}"], loc="lower center", ncol=3, frameon=False)
    fig.subplots_adjust(bottom=0.12)
    return fig


def online_softmax_steps(x: np.ndarray, tile: int) -> list[dict]:
    """Online softmax over the scores ``x`` of one row, ``tile`` keys at a time: for each
    tile its keys (``start``, ``stop``), the running maximum ``m`` after it, the factor
    ``alpha = exp(m_before - m)`` that rescales the running sum, the sum kept
    (``alpha * l_before``), the tile's own ``added`` sum of ``exp(x - m)`` and the running
    sum ``l`` after it (float64). After the last tile, ``m + log(l)`` is the row's
    log-sum-exp."""
    x = np.asarray(check_array("x", x, 1), np.float64)
    check_int("tile", tile, 1)
    if not x.size or not np.isfinite(x).all():
        raise ValueError("x must hold at least one score, every one finite")
    m, total, steps = -math.inf, 0.0, []
    for start in range(0, x.size, tile):
        part = x[start:start + tile]
        m_new = max(m, float(part.max()))
        alpha = math.exp(m - m_new)
        added = float(np.exp(part - m_new).sum())
        steps.append({"start": start, "stop": start + part.size, "m": m_new, "alpha": alpha,
                      "kept": alpha * total, "added": added, "l": alpha * total + added})
        m, total = m_new, alpha * total + added
    return steps


def online_softmax_row(x: np.ndarray, tile: int) -> Figure:
    """One row of scores walked ``tile`` keys at a time (:func:`online_softmax_steps`):
    above, the scores and the running maximum ``m`` after each tile; below, the running sum
    ``l`` after each tile, split into what was kept (rescaled by ``alpha``) and what the tile
    added."""
    steps = online_softmax_steps(x, tile)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(6.5, 5.0), sharex=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(np.arange(len(x)), x, "o", color="#2c7fb8", markersize=4, label="score")
    for i, step in enumerate(steps):
        top.hlines(step["m"], step["start"] - 0.5, step["stop"] - 0.5, color="#d7301f", lw=2,
                   label="running maximum m" if i == 0 else None)
        for ax in (top, bottom):
            ax.axvline(step["start"] - 0.5, color="grey", ls=":", lw=0.8)
    low, high = float(np.min(x)), float(np.max(x))
    top.set(ylabel="score", title=f"Online softmax over one row, {tile} keys per tile",
            ylim=(low - 0.1 * (high - low), high + 0.45 * (high - low)))
    top.legend(loc="upper left", ncol=2, fontsize=10)
    centres = [(step["start"] + step["stop"] - 1) / 2 for step in steps]
    widths = [0.8 * (step["stop"] - step["start"]) for step in steps]
    kept = [step["kept"] for step in steps]
    bottom.bar(centres, kept, widths, color="#bdbdbd", edgecolor="k",
               label="kept: l before the tile, times α")
    bottom.bar(centres, [step["added"] for step in steps], widths, bottom=kept,
               color="#c6dbef", edgecolor="k", label="added by the tile")
    for centre, step in zip(centres[1:], steps[1:], strict=True):
        bottom.text(centre, step["l"], f"α = {step['alpha']:.3g}", ha="center", va="bottom")
    bottom.set(xlabel="key", ylabel="running sum l", ylim=(0, 1.6 * max(s["l"] for s in steps)))
    bottom.legend(loc="upper right", fontsize=10)
    return finish(fig)
