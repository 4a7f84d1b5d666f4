"""Chapter 4's figures: the memory traffic of each Adam variant, and why mixed precision keeps a
float32 master copy of the weights.

Book section: Chapter 4, Optimizers on the GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.checks import check_int, check_real
from gpudl.plots.style import check_rows, finish

__all__ = ["optimizer_traffic", "master_weight_updates", "weight_after_updates"]


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


def weight_after_updates(steps: int = 100, update: float = -1e-3,
                         start: float = 1.0) -> dict[str, list[float]]:
    """A weight of ``start`` after each of ``steps`` additions of ``update`` (index 0: before
    any), three ways, computed with torch: ``"bfloat16"`` (the weight kept in bfloat16),
    ``"float32"`` (kept in float32) and ``"float32, read as bfloat16"`` (a float32 master copy
    rounded to bfloat16 after each step, as mixed precision writes the parameter)."""
    check_int("steps", steps, 1)
    check_real("update", update)
    check_real("start", start)
    import torch

    bf16, fp32 = torch.tensor([start], dtype=torch.bfloat16), torch.tensor([start])
    out = {"bfloat16": [bf16.item()], "float32": [fp32.item()],
           "float32, read as bfloat16": [fp32.to(torch.bfloat16).item()]}
    for _ in range(steps):
        bf16 += update
        fp32 += update
        out["bfloat16"].append(bf16.item())
        out["float32"].append(fp32.item())
        out["float32, read as bfloat16"].append(fp32.to(torch.bfloat16).item())
    return out


def master_weight_updates(steps: int = 100, update: float = -1e-3) -> Figure:
    """The three weights of ``weight_after_updates`` against the number of updates: in
    bfloat16 every update rounds away, the float32 master copy keeps them."""
    weights = weight_after_updates(steps, update)
    fig, ax = plt.subplots(figsize=(6.8, 3.4))
    styles = {"bfloat16": ("#c44e52", "-", 2.5), "float32": ("#4c72b0", "-", 1.5),
              "float32, read as bfloat16": ("#55a868", "--", 1.5)}
    for name, values in weights.items():
        color, ls, lw = styles[name]
        ax.plot(np.arange(steps + 1), values, ls, color=color, lw=lw, label=name, gid=name)
    ax.set(xlabel=f"updates of {update:g}", ylabel="weight",
           title="A weight of 1.0, updated in bfloat16 and in float32")
    ax.legend(loc="lower left")
    return finish(fig)
