"""Chapter 4's figures: the memory traffic of each Adam variant, and how ZeRO divides the
model state among ranks.

Book section: Chapter 4, Optimizers on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_int, check_ints
from gpudl.plots._style import check_rows, finish

__all__ = ["optimizer_traffic", "zero_partition", "ZERO_PARTS"]


def optimizer_traffic(rows: Sequence[dict]) -> Figure:
    """Bytes per parameter of one Adam step for each variant (rows of
    :func:`gpudl.optim.traffic_table`, counted by the tracer): device memory and shared
    memory side by side, each bar labelled with its kernel launches."""
    check_rows("rows", rows, ())
    fig, ax = plt.subplots(figsize=(7.0, 3.6))
    names = [r["variant"] for r in rows]
    x = np.arange(len(rows))
    device = [r["global_bytes_per_param"] for r in rows]
    shared = [r["shared_bytes_per_param"] for r in rows]
    ax.bar(x - 0.2, device, 0.4, label="device memory", color="#4c72b0")
    ax.bar(x + 0.2, shared, 0.4, label="shared memory", color="#dd8452")
    for k, r in enumerate(rows):
        ax.text(k - 0.2, device[k], f"{device[k]:g}", ha="center", va="bottom")
        launches = f"{r['launches']} launch" + ("es" if r["launches"] != 1 else "")
        ax.text(k, max(device[k], shared[k]) + 0.12 * max(device), launches, ha="center")
    ax.axhline(28, color="k", ls=":", lw=1, label="28 B: read p, g, m, v; write p, m, v")
    ax.set(xticks=x, xticklabels=names, ylabel="bytes per parameter",
           ylim=(0, max(device) * 1.75),
           title="One Adam step, counted by the tracer")
    ax.legend(loc="upper right")
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
