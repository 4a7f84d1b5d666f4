"""Chapter 3's figures: how each matmul variant tiles its work, a linear layer's data flow
forward and backward.

Book section: Chapter 3, Matrix multiply and backpropagation (and its lab).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from gpudl.checks import check_choice, check_int
from gpudl.plots.style import finish

__all__ = ["tile_geometry", "matmul_tiling", "linear_dataflow"]

TILED_VARIANTS = ("v3_tiled", "v4_register_1d", "v5_register_2d")



def _check_names(name: str, names: object, choices: Sequence[str]) -> None:
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise TypeError(f"{name} must be a non-empty list of names, got {names!r}")
    for i, value in enumerate(names):
        check_choice(f"{name}[{i}]", value, choices)


def tile_geometry(variant: str) -> dict:
    """What one thread block of ``variant`` (of :mod:`gpudl.kernels.matmul`) computes and
    stages: ``rows`` x ``cols`` of C, slabs ``depth`` deep of A and B in shared memory, and
    the (row, column) offsets in the tile of thread 0's outputs, which it keeps in
    registers. Read from the module's launch configuration and tile constants."""
    from gpudl.kernels import matmul as matmul_kernels

    check_choice("variant", variant, TILED_VARIANTS)
    big = 1 << 12
    grid, block = matmul_kernels.launch_config(variant, big, big)
    rows, cols = big // grid[1], big // grid[0]
    threads = 1
    for b in block:
        threads *= b
    if variant == "v3_tiled":
        depth, outputs = matmul_kernels.TILE, [(0, 0)]
    elif variant == "v4_register_1d":
        depth, outputs = matmul_kernels.V4_BK, [(i, 0) for i in range(matmul_kernels.V4_TM)]
    else:
        depth = matmul_kernels.V5_BK
        outputs = [(i * matmul_kernels.V5_THREAD_ROWS, j * matmul_kernels.V5_THREAD_COLS)
                   for i in range(matmul_kernels.V5_TM) for j in range(matmul_kernels.V5_TN)]
    return {"variant": variant, "rows": rows, "cols": cols, "depth": depth,
            "threads": threads, "outputs": outputs}


def matmul_tiling(variants: Sequence[str] = TILED_VARIANTS) -> Figure:
    """One panel per variant (:func:`tile_geometry`): the block's tile of C, the slabs of A
    (left) and B (top) it stages in shared memory for one step along K, and thread 0's
    outputs (dots), which it accumulates in registers. Scales differ between panels: each is
    labelled with its sizes."""
    _check_names("variants", variants, TILED_VARIANTS)
    fig, axes = plt.subplots(1, len(variants), figsize=(7.4, 3.3), squeeze=False)
    for ax, variant in zip(axes[0], variants, strict=True):
        g = tile_geometry(variant)
        rows, cols, depth = g["rows"], g["cols"], g["depth"]
        gap = 0.08 * cols
        ax.add_patch(Rectangle((0, 0), cols, rows, facecolor="#dfe9f5", edgecolor="k",
                               gid="c-tile"))
        ax.add_patch(Rectangle((-gap - depth, 0), depth, rows, facecolor="#e4d4f0",
                               edgecolor="k", gid="a-slab"))
        ax.add_patch(Rectangle((0, rows + gap), cols, depth, facecolor="#e4d4f0",
                               edgecolor="k", gid="b-slab"))
        ys = [rows - r - 0.5 for r, _ in g["outputs"]]
        xs = [c + 0.5 for _, c in g["outputs"]]
        ax.plot(xs, ys, "o", color="#c44e52", markersize=3.5 if len(xs) > 8 else 5,
                gid="thread-outputs")
        ax.text(cols / 2, -0.08 * rows, f"C tile {rows} x {cols}\n{g['threads']} threads, "
                f"{len(g['outputs'])} output{'s' * (len(g['outputs']) > 1)} each",
                ha="center", va="top")
        ax.text(-gap - depth - 0.04 * cols, rows / 2, f"A\n{rows}\nx {depth}", ha="right",
                va="center")
        ax.text(cols / 2, rows + gap + depth + 0.04 * rows, f"B {depth} x {cols}",
                ha="center", va="bottom")
        ax.set(xlim=(-0.62 * cols - depth, 1.03 * cols),
               ylim=(-0.45 * rows, 1.3 * rows + depth), aspect="equal", title=variant)
        ax.axis("off")
    fig.suptitle("Per block: C tile (blue), shared-memory slabs (purple), "
                 "thread 0's registers (red)", fontsize=11)
    return finish(fig)


def _box(ax, x, y, w, h, label, color, gid):
    ax.add_patch(Rectangle((x, y), w, h, facecolor=color, edgecolor="k", gid=gid))
    ax.text(x + w / 2, y + h / 2, label, ha="center", va="center")


def _arrow(ax, start, end, text="", color="k"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color=color,
                                 lw=1.4))
    if text:
        ax.text((start[0] + end[0]) / 2, (start[1] + end[1]) / 2 + 0.35, text, ha="center",
                va="bottom", color=color)


def linear_dataflow(batch: int = 32, in_features: int = 64, out_features: int = 32) -> Figure:
    """One linear layer ``Y = X W + b`` forward (top) and backward (bottom): which arrays
    each product reads and writes, with their shapes and the flops of
    :func:`gpudl.kernels.nn.linear_forward_flops` and ``linear_backward_flops``."""
    for name, value in (("batch", batch), ("in_features", in_features),
                        ("out_features", out_features)):
        check_int(name, value, 1)
    from gpudl.kernels.nn import linear_backward_flops, linear_forward_flops

    b, k, n = batch, in_features, out_features
    forward = linear_forward_flops(b, k, n)
    backward = linear_backward_flops(b, k, n)
    fig, ax = plt.subplots(figsize=(7.4, 4.2))
    blue, green, orange = "#dfe9f5", "#d8ecd3", "#f9d6a0"
    _box(ax, 0, 6, 2.4, 1.3, f"X\n{b} x {k}", blue, "X")
    _box(ax, 3.6, 6, 2.4, 1.3, f"W\n{k} x {n}", blue, "W")
    _box(ax, 8.2, 6, 2.4, 1.3, f"Y = XW + b\n{b} x {n}", green, "Y")
    ax.text(3.0, 6.65, "×", ha="center", va="center", fontsize=16)  # X times W
    _arrow(ax, (6.0, 6.65), (8.2, 6.65), "1 product")
    ax.text(5.3, 7.7, f"forward: {forward:,} flops", ha="center")
    _box(ax, 8.2, 1.5, 2.4, 1.3, f"dY\n{b} x {n}", orange, "dY")
    _box(ax, 3.6, 3.3, 2.4, 1.3, f"dX = dY Wᵀ\n{b} x {k}", orange, "dX")
    _box(ax, 3.6, 0.0, 2.4, 1.3, f"dW = Xᵀ dY\n{k} x {n}", orange, "dW")
    _box(ax, 0.0, 1.5, 2.4, 1.3, f"db = Σₙ dY\n{n}", orange, "db")
    _arrow(ax, (8.2, 2.4), (6.0, 3.9), "product 1", "#8c4a00")
    _arrow(ax, (8.2, 1.9), (6.0, 0.7), "product 2", "#8c4a00")
    _arrow(ax, (8.2, 2.15), (2.4, 2.15), "column sum", "#8c4a00")
    _arrow(ax, (1.2, 6.0), (4.0, 1.3), "", "#777777")
    ax.text(5.3, 5.0, f"backward: {backward:,} flops ({backward / forward:.2f}x forward)",
            ha="center")
    ax.text(1.2, 4.4, "X kept\nfrom forward", ha="center", color="#555555")
    ax.set(xlim=(-0.3, 11), ylim=(-0.4, 8.2))
    ax.axis("off")
    ax.set_title("A linear layer: one product forward, two backward")
    return finish(fig)
