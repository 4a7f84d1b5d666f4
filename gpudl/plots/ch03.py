"""Chapter 3's figures: what one warp of the naive and coalesced matmuls touches, how each
tiled variant tiles its work, what one thread of the 2-D register-blocked kernel reads and
keeps, a linear layer's data flow forward and backward.

Book section: Chapter 3, Matrix multiply and backpropagation (and its lab).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from gpudl.checks import check_choice, check_instance, check_int, check_ints
from gpudl.plots.style import check_rows, finish
from gpudl.plots.traced import element_indices, sector_elements

__all__ = ["warp_footprint", "warp_footprints", "tile_geometry", "matmul_tiling",
           "thread_registers", "register_tile", "linear_dataflow"]

NAIVE_VARIANTS = ("v1_naive", "v2_coalesced")
TILED_VARIANTS = ("v3_tiled", "v4_register_1d", "v5_register_2d")
#: What warp 0 does to each operand in :func:`warp_footprint`.
_WARP_OPS = (("a", "load"), ("b", "load"), ("c", "store"))


def _check_names(name: str, names: object, choices: Sequence[str]) -> None:
    if isinstance(names, str) or not isinstance(names, Sequence) or not names:
        raise TypeError(f"{name} must be a non-empty list of names, got {names!r}")
    for i, value in enumerate(names):
        check_choice(f"{name}[{i}]", value, choices)


def warp_footprint(variant: str, m: int = 32, k: int = 8, n: int = 32) -> dict:
    """What warp 0 of block 0 of ``variant`` (``v1_naive`` or ``v2_coalesced``) touches in an
    (m, k) @ (k, n) product, traced on the simulator (:func:`gpudl.trace.trace`; call it
    through :func:`gpudl.trace.on_simulator` on a GPU): the elements of A and B its lanes load
    at the first step along K, the elements of C they store at the end, and for each operand
    the elements of the 32-byte sectors those words lie in and the sectors' number.

    Returns ``{"variant", "shapes": {name: (rows, cols)}, "words": {name: [flat index]},
    "sectors": {name: [flat index]}, "sector_count": {name: int}}`` for names a, b and c."""
    check_choice("variant", variant, NAIVE_VARIANTS)
    for name, value in (("m", m), ("k", k), ("n", n)):
        check_int(name, value, 1)
    from gpudl.kernels import matmul as matmul_kernels
    from gpudl.trace import trace

    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    c = np.full((m, n), np.nan, dtype=np.float32)
    grid, block = matmul_kernels.launch_config(variant, m, n)
    t = trace(getattr(matmul_kernels, variant), grid, block, a, b, c)
    shapes = {"a": (m, k), "b": (k, n), "c": (m, n)}
    out: dict = {"variant": variant, "shapes": shapes, "words": {}, "sectors": {},
                 "sector_count": {}}
    for name, op in _WARP_OPS:
        request = next(r for r in t.requests("global", op, name)
                       if r.block == (0, 0, 0) and r.warp == 0 and r.occurrence == 0)
        size = shapes[name][0] * shapes[name][1]
        out["words"][name] = element_indices(t, name, request.addresses)
        out["sectors"][name] = sector_elements(t, name, request.addresses, size)
        out["sector_count"][name] = request.sectors
    return out


def _matrix(ax, shape: tuple[int, int], x0: float, y0: float,
            layers: Sequence[tuple[Sequence[int], str]], gid: str) -> None:
    """A ``shape`` matrix drawn with its row 0 on top, its lower left corner at (x0, y0), one
    unit per element: white, then each layer's elements (flat row-major indices) in its
    colour."""
    from matplotlib.colors import to_rgb

    rows, cols = shape
    image = np.ones((rows, cols, 3))
    for indices, color in layers:
        for i in indices:
            image[i // cols, i % cols] = to_rgb(color)
    ax.imshow(image, extent=(x0, x0 + cols, y0, y0 + rows), interpolation="nearest",
              zorder=1)
    ax.add_patch(Rectangle((x0, y0), cols, rows, fill=False, edgecolor="k", lw=0.8, zorder=2,
                           gid=gid))


_WORD, _SECTOR = "#1f4e79", "#f2c57c"


def _sectors_label(count: int) -> str:
    return f"{count} sector{'s' * (count != 1)}"


def warp_footprints(footprints: Sequence[dict]) -> Figure:
    """One panel per :func:`warp_footprint`: A (left), B (top) and C, the words warp 0 uses
    dark, the rest of the sectors they lie in light, each operand labelled with its count of
    sectors."""
    check_rows("footprints", footprints, ("variant", "shapes", "words", "sectors",
                                          "sector_count"))
    fig, axes = plt.subplots(1, len(footprints), figsize=(7.4, 4.1), squeeze=False)
    for ax, f in zip(axes[0], footprints, strict=True):
        (m, k), n = f["shapes"]["a"], f["shapes"]["c"][1]
        gap = 2
        places = {"a": (-gap - k, 0), "b": (0, m + gap), "c": (0, 0)}
        for name, (x0, y0) in places.items():
            _matrix(ax, f["shapes"][name], x0, y0,
                    [(f["sectors"][name], _SECTOR), (f["words"][name], _WORD)], name)
        count = f["sector_count"]
        ax.text(-gap - k / 2, -1, f"A\n{_sectors_label(count['a'])}", ha="center", va="top")
        ax.text(n + 1, m + gap + k / 2, f"B\n{_sectors_label(count['b'])}", ha="left",
                va="center")
        ax.text(n / 2, -1, f"C: {_sectors_label(count['c'])} stored", ha="center", va="top")
        ax.set(xlim=(-gap - k - 2, n + 12), ylim=(-7, m + gap + k + 1), aspect="equal",
               title=f["variant"])
        ax.axis("off")
    fig.suptitle("Warp 0, first step along K: words used (dark), sectors moved (light)",
                 fontsize=11)
    return finish(fig)


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


def thread_registers(threads: Sequence[int] = (0, 89)) -> dict:
    """What ``threads`` of one block of ``v5_register_2d`` read and write, traced on the
    simulator (through :func:`gpudl.trace.on_simulator` on a GPU) for a product of one tile,
    ``(V5_BM, V5_BK) @ (V5_BK, V5_BN)``: for each thread the elements of the shared slabs of
    A and B it loads (all steps along K, and the first step alone) and the elements of C it
    stores, as flat row-major indices.

    Returns ``{"variant", "shapes": {"a", "b", "c"}, "thread_grid": (rows, cols), "threads":
    {thread: {"a", "a_first", "b", "b_first", "c"}}}``."""
    from gpudl.kernels import matmul as matmul_kernels
    from gpudl.trace import trace

    threads = check_ints("threads", threads, 0)
    for i, thread in enumerate(threads):
        check_int(f"threads[{i}]", thread, 0, matmul_kernels.V5_THREADS - 1)
    bm, bk, bn = matmul_kernels.V5_BM, matmul_kernels.V5_BK, matmul_kernels.V5_BN
    rng = np.random.default_rng(0)
    a = rng.standard_normal((bm, bk), dtype=np.float32)
    b = rng.standard_normal((bk, bn), dtype=np.float32)
    c = np.full((bm, bn), np.nan, dtype=np.float32)
    grid, block = matmul_kernels.launch_config("v5_register_2d", bm, bn)
    t = trace(matmul_kernels.v5_register_2d, grid, block, a, b, c)
    out: dict = {"variant": "v5_register_2d",
                 "shapes": {"a": (bm, bk), "b": (bk, bn), "c": (bm, bn)},
                 "thread_grid": (matmul_kernels.V5_THREAD_ROWS, matmul_kernels.V5_THREAD_COLS),
                 "threads": {}}
    for thread in threads:
        def touched(kind: str, array: str, op: str, thread: int = thread) -> list[int]:
            return element_indices(t, array, [x.address for x in t.accesses if (
                x.kind, x.array, x.op, x.thread) == (kind, array, op, thread)])

        loads_a = touched("shared", "a_tile", "load")
        loads_b = touched("shared", "b_tile", "load")
        out["threads"][thread] = {
            "a": sorted(set(loads_a)), "a_first": sorted({i for i in loads_a if i % bk == 0}),
            "b": sorted(set(loads_b)), "b_first": sorted({i for i in loads_b if i < bn}),
            "c": sorted(touched("global", "c", "store"))}
    return out


_THREAD_COLORS = ("#c44e52", "#4c72b0", "#55a868")


def register_tile(footprint: dict) -> Figure:
    """Left, a block of :func:`thread_registers`: the shared slabs of A (left) and B (top)
    and the tile of C, with each traced thread's loads (squares; dark: the first step along
    K) and outputs (dots), and grey lines every ``thread_grid`` rows and columns. Right, the
    registers of the first thread at one step: the values of A and B it loads and the outer
    product it adds to its accumulators."""
    check_instance("footprint", footprint, dict)
    for key in ("variant", "shapes", "thread_grid", "threads"):
        if key not in footprint:
            raise ValueError(f"footprint lacks {key!r}")
    (bm, bk), bn = footprint["shapes"]["a"], footprint["shapes"]["c"][1]
    rows_per, cols_per = footprint["thread_grid"]
    fig, (ax, reg) = plt.subplots(1, 2, figsize=(7.4, 4.6), width_ratios=[1.45, 1])
    gap = 6
    ax.add_patch(Rectangle((0, 0), bn, bm, facecolor="#f4f4f4", edgecolor="k", lw=0.8))
    ax.add_patch(Rectangle((-gap - bk, 0), bk, bm, facecolor="#f4f4f4", edgecolor="k",
                           lw=0.8))
    ax.add_patch(Rectangle((0, bm + gap), bn, bk, facecolor="#f4f4f4", edgecolor="k",
                           lw=0.8))
    for x in range(cols_per, bn, cols_per):
        ax.plot([x, x], [0, bm], color="#bbbbbb", lw=0.6, zorder=1.5)
    for y in range(rows_per, bm, rows_per):
        ax.plot([0, bn], [bm - y, bm - y], color="#bbbbbb", lw=0.6, zorder=1.5)

    def xy(indices, cols, x0, y0, rows):
        return ([x0 + i % cols + 0.5 for i in indices], [y0 + rows - i // cols - 0.5
                                                          for i in indices])

    for (thread, f), color in zip(footprint["threads"].items(), _THREAD_COLORS, strict=False):
        tr, tc = divmod(thread, cols_per)
        label = f"thread {thread} (tr {tr}, tc {tc})"
        ax.plot(*xy(f["c"], bn, 0, 0, bm), "o", color=color, markersize=3.2, label=label,
                gid=f"outputs-{thread}")
        for name, x0, y0, shape in (("a", -gap - bk, 0, (bm, bk)),
                                    ("b", 0, bm + gap, (bk, bn))):
            ax.plot(*xy(f[name], shape[1], x0, y0, shape[0]), "s", color=color, alpha=0.35,
                    markersize=2.6, gid=f"{name}-{thread}")
            ax.plot(*xy(f[f"{name}_first"], shape[1], x0, y0, shape[0]), "s", color=color,
                    markersize=3.2, gid=f"{name}-first-{thread}")
    ax.text(-gap - bk / 2, -3, f"A slab\n{bm} x {bk}", ha="center", va="top")
    ax.text(bn / 2, bm + gap + bk + 3, f"B slab {bk} x {bn}", ha="center", va="bottom")
    ax.text(bn / 2, -3, f"C tile {bm} x {bn}", ha="center", va="top")
    ax.set(xlim=(-gap - bk - 4, bn + 2), ylim=(-20, bm + gap + bk + 16), aspect="equal")
    ax.axis("off")

    thread, f = next(iter(footprint["threads"].items()))
    color = _THREAD_COLORS[0]
    tm, tn = len(f["a_first"]), len(f["b_first"])
    for i in range(tm):
        reg.add_patch(Rectangle((0, tm - 1 - i), 1, 1, facecolor=color, edgecolor="w"))
        for j in range(tn):
            reg.add_patch(Rectangle((2 + j, tm - 1 - i), 1, 1, facecolor=color, alpha=0.45,
                                    edgecolor="w", gid="accumulator"))
    for j in range(tn):
        reg.add_patch(Rectangle((2 + j, tm + 1), 1, 1, facecolor=color, edgecolor="w"))
    reg.text(0.5, tm + 0.3, "A", ha="center", va="bottom")
    reg.text(2.2 + tn, tm + 1.5, "B", ha="left", va="center")
    reg.text(2 + tn / 2, -0.5, f"{tm} x {tn} accumulators", ha="center", va="top")
    reg.text(2 + tn / 2, -2.2, f"thread {thread}, one step along K:\n{tm} + {tn} loads "
             f"from shared memory,\n{tm * tn} multiply-adds in registers", ha="center",
             va="top")
    reg.set(xlim=(-0.5, tn + 3.5), ylim=(-6.5, tm + 3), aspect="equal")
    reg.axis("off")
    fig.suptitle(f"{footprint['variant']}: the outputs of a thread are {tm} x {tn} "
                 f"elements {rows_per} apart", fontsize=11)
    finish(fig)
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(labels), fontsize=10,
               frameon=False, markerscale=1.6)
    fig.subplots_adjust(bottom=0.1)
    return fig


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
