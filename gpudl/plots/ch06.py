"""Chapter 6's figure of tensor parallelism: the column and row split of a feed-forward
network and its all-reduces. (The pipeline schedules are drawn by
:func:`gpudl.parallel.pipeline_parallel.plot_schedules`.)

Book section: Chapter 6, Model parallelism, "Tensor parallelism".
"""

from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from gpudl.plots._style import finish

__all__ = ["tensor_parallel_split"]

_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c")


def tensor_parallel_split(hidden: int = 32, ffn: int = 64, degree: int = 2) -> Figure:
    """Megatron's split of ``Y = GeLU(X A) B`` over ``degree`` GPUs, to scale: ``A``
    (hidden x ffn) cut into column blocks, ``B`` (ffn x hidden) into the matching row blocks
    (gid ``"A:i"``, ``"B:i"``), each GPU's partial ``Y_i``, and the two communication
    points: ``g``, an all-reduce of Y in the forward pass, and ``f``, an all-reduce of dX
    in the backward pass."""
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
