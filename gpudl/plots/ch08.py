"""Chapter 8's figures: the roofline of each precision, the tiles a fused attention kernel
visits, the lanes that hold an mma's fragments, and the bytes each attention variant moves.

Book section: Chapter 8, Attention and tensor cores (and its lab).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from gpudl.checks import (
    check_array,
    check_bool,
    check_instance,
    check_int,
    check_ints,
    check_positive,
    check_real_mapping,
    check_reals,
)
from gpudl.estimate import ridge_point
from gpudl.estimate import roofline as attainable
from gpudl.kernels.grid import blocks_to_cover
from gpudl.plots.style import finish

__all__ = ["roofline_precisions", "online_softmax_tiles", "mma_fragments", "attention_bytes"]


def roofline_precisions(peaks: dict[str, float], peak_bandwidth: float,
                        points: dict[str, tuple[float, str]], title: str) -> Figure:
    """One roof per precision (``peaks``: name -> flop/s) over one memory bandwidth
    (bytes/s), each ridge point marked, and kernels placed on the roof of their precision:
    ``points`` maps a name to ``(intensity, precision)``."""
    check_real_mapping("peaks", peaks, 0, strict=True)
    check_positive("peak_bandwidth", peak_bandwidth)
    check_instance("points", points, dict)
    check_instance("title", title, str)
    intensities = np.logspace(-1, 4, 300)
    fig, ax = plt.subplots(figsize=(6.5, 5.4))
    styles = ["-", "--", "-.", ":"]
    for (name, peak), style in zip(peaks.items(), styles * len(peaks), strict=False):
        ridge = ridge_point(peak, peak_bandwidth)
        ax.loglog(intensities, attainable(intensities, peak, peak_bandwidth), "k" + style,
                  lw=1, label=f"{name} roof, ridge {ridge:.0f} flop/B")
        ax.axvline(ridge, color="grey", ls=":", lw=0.8)
    for name, (intensity, precision) in points.items():
        ax.plot(intensity, attainable(intensity, peaks[precision], peak_bandwidth), "o",
                label=f"{name} ({intensity:,.3g} flop/B)" if intensity < 1000
                else f"{name} ({intensity:,.0f} flop/B)")
    ax.set(xlabel="arithmetic intensity (flop/byte)", ylabel="attainable flop/s", title=title)
    finish(fig)
    # the legend in a band of its own below the axes, so it covers neither the curves nor the
    # x-axis label
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=10, frameon=False,
               handlelength=2.5, columnspacing=1.0)
    fig.subplots_adjust(bottom=0.35)
    return fig


def online_softmax_tiles(s: int, tile: int, causal: bool) -> Figure:
    """The tiles of the ``s x s`` score matrix that a fused kernel computes, one block of
    ``tile`` queries per row of tiles, keys ``tile`` at a time from left to right; grey tiles
    (above the diagonal, when causal) are skipped. Each visited tile updates the block's
    running maximum ``m`` and sum ``l``; the numbers give the order of one block's visits."""
    check_int("s", s, 1)
    check_int("tile", tile, 1)
    check_bool("causal", causal)
    blocks = blocks_to_cover(s, tile)
    grid = np.array([[1.0 if (not causal or j <= i) else 0.0 for j in range(blocks)]
                     for i in range(blocks)])
    fig, ax = plt.subplots(figsize=(4.8, 4.4))
    ax.imshow(grid, cmap="Blues", vmin=-0.4, vmax=1.4)
    row = blocks // 2
    for j in range(blocks):
        if grid[row, j]:
            ax.text(j, row, str(j + 1), ha="center", va="center", fontsize=8, color="white")
    ax.annotate("m and l updated\nafter each tile", xy=(row, row), xytext=(blocks - 0.6, 0.6),
                fontsize=8, ha="right", arrowprops={"arrowstyle": "->"})
    ax.set(xticks=range(blocks), yticks=range(blocks),
           xlabel=f"key tile ({tile} keys)", ylabel=f"query block ({tile} queries)",
           title=f"Tiles of S for s = {s}" + (", causal" if causal else "")
           + "\n(dark: computed, light: skipped)")
    return finish(fig)


def mma_fragments(owners: dict[str, np.ndarray]) -> Figure:
    """Which lane of the warp holds each element of the matrices of one mma: ``owners`` maps
    a matrix name to an array of lane numbers (:func:`gpudl.kernels.mma.lanes`)."""
    # the widest matrix on a row of its own, the others side by side below it, every cell
    # large enough for its lane number in readable type, on light colours
    check_instance("owners", owners, dict)
    for name, lanes in owners.items():
        check_array(f"owners[{name!r}]", lanes, 2, "iu")
    (wide, *rest) = sorted(owners, key=lambda name: -owners[name].shape[1])
    fig = plt.figure(figsize=(7.5, 7.5 + 7.5 / max(len(rest), 1) * (1 if rest else 0)))
    grid = fig.add_gridspec(2 if rest else 1, max(len(rest), 1),
                            height_ratios=[1, 1] if rest else [1])
    axes = {wide: fig.add_subplot(grid[0, :])}
    axes |= {name: fig.add_subplot(grid[1, i]) for i, name in enumerate(rest)}
    for name, ax in axes.items():
        lanes = owners[name]
        ax.imshow(lanes // 4, cmap="Pastel2", vmin=0, vmax=7)
        for (r, c), lane in np.ndenumerate(lanes):
            ax.text(c, r, str(lane), ha="center", va="center", fontsize=10)
        ax.set(title=name, xticks=[], yticks=[])
    axes[wide].set_title(f"m16n8k16, the lane holding each element (colour: lane // 4)\n{wide}")
    return finish(fig)


def attention_bytes(s_values: Sequence[int], bytes_by_variant: dict[str, Sequence[float]],
                    traced: dict[str, tuple[Sequence[int], Sequence[float]]] | None = None,
                    title: str = "") -> Figure:
    """Device-memory bytes per variant against the sequence length (log-log), from the
    formula, with traced counts (``(s values, bytes)`` per variant) as markers if given."""
    check_ints("s_values", s_values, 1)
    check_instance("bytes_by_variant", bytes_by_variant, dict)
    for variant, values in bytes_by_variant.items():
        check_reals(f"bytes_by_variant[{variant!r}]", values, 0)
    check_instance("title", title, str)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for name, values in bytes_by_variant.items():
        ax.loglog(list(s_values), list(values), "-", label=f"{name} (formula)")
    for name, (s_traced, values) in (traced or {}).items():
        ax.loglog(list(s_traced), list(values), "o", label=f"{name} (traced)")
    ax.set(xlabel="sequence length s", ylabel="bytes read and written", title=title)
    ax.legend(fontsize=7)
    return finish(fig)
