"""Chapter 7's figures: training time and cost, and model state per GPU under ZeRO.

Book section: Chapter 7, A case study and choosing a GPU.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.checks import (
    check_instance,
    check_ints,
    check_positive,
    check_real,
    check_real_mapping,
    check_reals,
)
from gpudl.plots.style import finish

__all__ = ["training_time_and_cost", "memory_by_zero_stage"]


def training_time_and_cost(flops: float, peak_flops: float, gpu_name: str,
                           gpus: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
                           mfus: Sequence[float] = (0.3, 0.4, 0.5),
                           claimed: tuple[int, float] | None = None) -> Figure:
    """Chapter 7, "Time, cost and energy": hours against the number of GPUs for each MFU
    (left; ``claimed`` = (GPUs, hours) marks a run someone reported), and GPU-hours, which
    set the cost at any price per GPU-hour, against MFU (right)."""
    check_positive("flops", flops)
    check_positive("peak_flops", peak_flops)
    check_instance("gpu_name", gpu_name, str)
    check_ints("gpus", gpus, 1)
    for i, value in enumerate(check_reals("mfus", mfus, 0, strict=True)):
        check_real(f"mfus[{i}]", value, 0, 1)
    if claimed is not None:
        check_reals("claimed", claimed, 0, strict=True, minimum_count=2)
    from gpudl.estimate import training_time

    fig, (left, right) = plt.subplots(1, 2, figsize=(7.4, 4.6))
    for fraction in mfus:
        hours = [training_time(flops, n, peak_flops, fraction) / 3600 for n in gpus]
        left.plot(gpus, hours, "o-", label=f"MFU {fraction:.0%}")
    if claimed is not None:
        left.plot([claimed[0]], [claimed[1]], "r*", markersize=12,
                  label=f"claimed: {claimed[0]} GPUs, {claimed[1]:g} h")
    mantissa, exponent = f"{flops:.3e}".split("e")
    left.set(xscale="log", yscale="log", xlabel=f"{gpu_name} GPUs", ylabel="hours",
             title=f"${float(mantissa):.3g} \\times 10^{{{int(exponent)}}}$ flops")
    left.set_xticks(list(gpus), [str(n) for n in gpus])
    fractions = np.linspace(0.1, 0.6, 26)
    right.plot(fractions * 100, [training_time(flops, 1, peak_flops, f) / 3600 for f in fractions])
    right.set(xlabel="MFU (%)", ylabel="GPU-hours (x price = cost)",
              title="any number of GPUs")
    finish(fig)
    # below the panels, away from the points, so that its star is not read as one of them
    fig.subplots_adjust(bottom=0.3)
    fig.legend(*left.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=10,
               frameon=False)
    return fig


def memory_by_zero_stage(cases: dict[str, Sequence[float]],
                         gpu_memory_gb: dict[str, float]) -> Figure:
    """Chapter 7, "Memory": model state per GPU (GB) under ZeRO stages 0 to 3 for each case
    (label -> four values, e.g. from :func:`gpudl.estimate.model_state_memory`), against the
    memory of some GPUs (name -> GB, horizontal lines)."""
    check_instance("cases", cases, dict)
    for case, values in cases.items():
        check_reals(f"cases[{case!r}]", values, 0)
    check_real_mapping("gpu_memory_gb", gpu_memory_gb, 0, strict=True)
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    x = np.arange(4)
    width = 0.8 / len(cases)
    for k, (label, values) in enumerate(cases.items()):
        ax.bar(x + (k - (len(cases) - 1) / 2) * width, values, width, label=label)
    for (name, gb), style in zip(gpu_memory_gb.items(), (":", "--", "-.", "-"), strict=False):
        ax.axhline(gb, color="gray", linestyle=style, linewidth=1)
        ax.text(3.45, gb, name, va="bottom", ha="right")
    ax.set(xticks=x, xticklabels=["0\n(none)", "1\n(optimizer)", "2\n(+gradients)",
                                  "3\n(+parameters)"],
           xlabel="ZeRO stage", ylabel="model state per GPU (GB)", title="Mixed-precision Adam")
    ax.legend()
    return finish(fig)
