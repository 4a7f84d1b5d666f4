"""Chapter 1's figures: an SM, occupancy, and CPU against GPU.

Book section: Chapter 1, GPU hardware and SIMT (and its lab). Each function draws data that
the package computes, so a figure is always the package's current answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import (
    check_compute_capability,
    check_instance,
    check_ints,
    check_real_mapping,
)
from gpudl.hardware import FP32_CORES_PER_SM, SM_LIMITS, occupancy
from gpudl.plots.style import finish

__all__ = ["sm_diagram", "occupancy_curves", "time_bars"]



def _check_cc(compute_capability: object) -> None:
    """A compute capability the SM tables describe."""
    cc = check_compute_capability("compute_capability", compute_capability)
    if cc not in SM_LIMITS or cc not in FP32_CORES_PER_SM:
        raise ValueError(f"compute_capability {cc} is not in gpudl.hardware.SM_LIMITS")


def sm_diagram(compute_capability: tuple[int, int] = (9, 0)) -> Figure:
    """One streaming multiprocessor of ``compute_capability``, drawn from
    ``gpudl.hardware.SM_LIMITS`` and ``gpudl.hardware.FP32_CORES_PER_SM``: its
    partitions, each with a warp scheduler, a slice of the register file and its FP32 lanes
    (one small square per lane, gid ``"fp32-lane"``), and the shared memory they all reach."""
    _check_cc(compute_capability)
    limits = SM_LIMITS[compute_capability]
    parts = limits.register_partitions
    lanes = FP32_CORES_PER_SM[compute_capability] // parts
    regs = limits.registers // parts
    warps = limits.max_warps // parts
    fig, ax = plt.subplots(figsize=(7.2, 5.0))
    ax.add_patch(Rectangle((0, 0), 100, 70, fill=False, lw=2))
    width = 96 / parts
    cols = 8
    for p in range(parts):
        x0 = 2 + p * width
        ax.add_patch(Rectangle((x0, 18), width - 2, 50, facecolor="#eef3fb", edgecolor="k"))
        ax.text(x0 + width / 2 - 1, 64, f"partition {p}", ha="center", va="center")
        ax.add_patch(Rectangle((x0 + 1, 55), width - 4, 6, facecolor="#f9d6a0", edgecolor="k"))
        ax.text(x0 + width / 2 - 1, 58, "warp scheduler", ha="center", va="center")
        ax.add_patch(Rectangle((x0 + 1, 44), width - 4, 9, facecolor="#c9e3c1", edgecolor="k"))
        ax.text(x0 + width / 2 - 1, 48.5, f"{regs:,}\nregisters", ha="center",
                va="center")
        size = (width - 4) / cols
        for lane in range(lanes):
            r, c = divmod(lane, cols)
            ax.add_patch(Rectangle((x0 + 1 + c * size, 40 - (r + 1) * size), size * 0.85,
                                   size * 0.85, facecolor="#4c72b0", gid="fp32-lane"))
        rows = -(-lanes // cols)
        ax.text(x0 + width / 2 - 1, 38 - rows * size, f"{lanes} FP32 lanes\nup to {warps} warps",
                ha="center", va="top")
    shared_kb = limits.shared_memory // 1024
    ax.add_patch(Rectangle((2, 3), 96, 12, facecolor="#e4d4f0", edgecolor="k"))
    ax.text(50, 9, f"shared memory and L1 cache: up to {shared_kb} KB of shared memory,\n"
            "each block's part visible to its own threads", ha="center", va="center")
    ax.set(xlim=(-1, 101), ylim=(-1, 71), aspect="equal")
    ax.axis("off")
    cc = f"{compute_capability[0]}.{compute_capability[1]}"
    ax.set_title(f"One SM of compute capability {cc}: {parts * lanes} FP32 lanes, "
                 f"{limits.max_warps} warps, {limits.registers:,} registers")
    return finish(fig)


def _occupancy_or_zero(threads: int, regs: int, cc: tuple[int, int]) -> float:
    try:
        return occupancy(threads, regs, 0, cc).occupancy
    except ValueError:  # the block needs more registers than a block may have: no launch
        return 0.0


def occupancy_curves(
    compute_capability: tuple[int, int],
    block_sizes: Sequence[int] = (64, 256, 1024),
    registers: Sequence[int] = tuple(range(16, 256)),
) -> Figure:
    """Occupancy against registers per thread, one line per block size (no shared memory);
    zero where a block of that size cannot launch at all."""
    _check_cc(compute_capability)
    check_ints("block_sizes", block_sizes, 1)
    check_ints("registers", registers, 1)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for threads in block_sizes:
        occ = [_occupancy_or_zero(threads, r, compute_capability) for r in registers]
        ax.step(list(registers), occ, where="post", label=f"{threads} threads/block")
    ax.set(
        xlabel="registers per thread",
        ylabel="occupancy",
        ylim=(0, 1.05),
        title=f"Occupancy on compute capability {compute_capability[0]}.{compute_capability[1]}",
    )
    ax.legend()
    return finish(fig)


def time_bars(seconds: dict[str, float], title: str, note: str = "") -> Figure:
    """A horizontal bar per method, time in milliseconds on a linear axis (so that a bar
    twice as long took twice as long), each labelled with its time and its speed-up over
    the slowest."""
    check_real_mapping("seconds", seconds, 0)
    check_instance("title", title, str)
    check_instance("note", note, str)
    fig, ax = plt.subplots(figsize=(6.5, 0.6 * len(seconds) + 1.4))
    names = list(seconds)
    ms = [seconds[n] * 1e3 for n in names]
    ax.barh(names, ms)
    slowest = max(ms) if ms else 1.0
    for y, value in enumerate(ms):
        ax.text(value, y, f" {value:.3g} ms ({slowest / value:.1f}x)", va="center")
    ax.set(xlabel="time (ms)", title=title, xlim=(0, slowest * 1.35 if ms else 1))
    ax.invert_yaxis()
    if note:
        ax.text(0.99, 0.02, note, transform=ax.transAxes, ha="right", va="bottom")
    return finish(fig)
