"""Chapter 2's figures: the memory levels, what a warp's loads touch (from the tracer),
bank conflicts and the transpose tile's banks, the reduction's tree and warp shuffles, the
elements a lane of the K-loads and 16-byte copies loads, the levels' latency and bandwidth,
and the roofline.

Book section: Chapter 2, The memory hierarchy (and its lab). The access-pattern figures draw
requests recorded by :mod:`gpudl.trace` on the simulator
(:func:`gpudl.kernels.access_patterns.copy_requests`,
:func:`gpudl.kernels.access_patterns.tile_load_requests`), not hand-made pictures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_choice, check_instance, check_int, check_ints, check_positive
from gpudl.estimate import ridge_point
from gpudl.estimate import roofline as attainable
from gpudl.hardware import SM_LIMITS, SPECS, DeviceInfo
from gpudl.plots.style import LABEL_PT, TICK_PT, check_rows, finish
from gpudl.trace import BANK_BYTES, BANKS, SECTOR_BYTES

__all__ = [
    "memory_levels", "warp_sectors", "bank_conflicts", "tile_banks", "reduction_stages",
    "block_loads", "sectors_per_request", "roofline", "hierarchy",
]


def _check_words(words: object) -> None:
    check_instance("words", words, dict)
    if not words:
        raise ValueError("words must name at least one access")
    for name, indices in words.items():
        check_ints(f"words[{name!r}]", indices, 0)


def memory_levels(gpu: str = "H100 SXM", l2_mb: float = 50.0) -> Figure:
    """Size and bandwidth of each memory level of the GPU called ``gpu``, from
    ``gpudl.hardware.SPECS`` and ``gpudl.hardware.SM_LIMITS``: registers (SMs x 256
    KB; bandwidth three 4-byte operands per FP32 core per clock), shared memory (SMs x the
    largest carveout; 32 banks x 4 bytes per clock per SM), the L2 (``l2_mb``, a whitepaper
    figure the table does not hold; its bandwidth is in no datasheet and is not drawn) and
    device memory (the datasheet). The clock is the one the FP32 peak implies. Bars:
    left, bytes; right, GB/s; both on log scales."""
    check_choice("gpu", gpu, tuple(SPECS))
    check_positive("l2_mb", l2_mb)
    from gpudl.estimate.register_file import register_file_bandwidth_gbs

    spec = SPECS[gpu]
    limits = SM_LIMITS[spec.compute_capability]
    clock_hz = spec.fp32_tflops * 1e12 / (2 * spec.cuda_cores)
    info = DeviceInfo(backend="cuda", name=gpu, sm_count=spec.sm_count,
                      fp32_cores_per_sm=spec.fp32_cores_per_sm, sm_clock_khz=clock_hz / 1e3)
    levels = {
        "registers": (spec.sm_count * limits.registers * 4, register_file_bandwidth_gbs(info)),
        "shared\nmemory": (spec.sm_count * limits.shared_memory,
                           spec.sm_count * BANKS * BANK_BYTES * clock_hz / 1e9),
        "L2 cache": (l2_mb * 1e6, None),
        "device\nmemory": (spec.memory_gb * 1e9, spec.memory_bandwidth_gbs),
    }
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.4, 3.6))
    names = list(levels)
    sizes = [levels[n][0] for n in names]
    left.barh(names, sizes, color="#55a868")
    for y, size in enumerate(sizes):
        left.text(size, y, " " + _bytes_label(size), va="center")
    left.set(xscale="log", xlabel="bytes (whole GPU)", xlim=(1e6, 1e14), title="Size")
    left.invert_yaxis()
    bandwidths = [levels[n][1] or 0.0 for n in names]
    right.barh(names, bandwidths, color="#c44e52")
    for y, gbs in enumerate(bandwidths):
        right.text(gbs if gbs else 1e2, y, f" {gbs / 1e3:,.1f} TB/s" if gbs else
                   " not in a datasheet", va="center")
    right.set(xscale="log", xlabel="GB/s (whole GPU)", xlim=(1e2, 1e7), title="Bandwidth")
    right.set_yticks(range(len(names)), [""] * len(names))
    right.invert_yaxis()
    fig.suptitle(f"{gpu}: tens of megabytes on chip, at tens to hundreds of TB/s", fontsize=12)
    return finish(fig)


def _bytes_label(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:,.3g} {unit}"
    return f"{n:g} B"


def warp_sectors(rows: Sequence[dict], size: int = 4) -> Figure:
    """For each traced request (rows of
    :func:`gpudl.kernels.access_patterns.copy_requests`), the 32-byte sectors its 32 lanes
    touch: a dot per lane at the sector of its ``size``-byte word, touched sectors
    shaded, and the count in the title of each panel."""
    check_rows("rows", rows, ("addresses",))
    check_int("size", size, 1)
    fig, axes = plt.subplots(len(rows), 1, figsize=(7.4, 1.15 * len(rows) + 0.9),
                             squeeze=False)
    for ax, row in zip(axes[:, 0], rows, strict=True):
        span = max(8, -(-(max(row["addresses"]) // SECTOR_BYTES + 1) // 8) * 8)
        sectors = sorted({a // SECTOR_BYTES for a in row["addresses"]}
                         | {(a + size - 1) // SECTOR_BYTES for a in row["addresses"]})
        for s in sectors:
            ax.axvspan(s, s + 1, color="#f2c57c", lw=0)
        x = [a / SECTOR_BYTES for a in row["addresses"]]
        ax.plot(x, [0.5] * len(x), "|", color="#1f4e79", markersize=14, mew=1.5)
        ax.set(xlim=(0, span), ylim=(0, 1), yticks=[])
        ax.set_ylabel(row["pattern"], rotation=0, ha="right", va="center")
        ax.set_title(f"{len(sectors)} sectors", loc="right", fontsize=10.5)
        ax.set_xticks(range(0, span + 1, max(4, span // 8)))
    axes[-1, 0].set_xlabel("32-byte sector of the array (lanes' words as ticks, "
                           "touched sectors shaded)")
    fig.suptitle("One warp's float32 load, traced on the simulator", fontsize=12)
    return finish(fig)


def bank_conflicts(words: dict[str, Sequence[int]]) -> Figure:
    """For each variant (``words`` of
    :func:`gpudl.kernels.access_patterns.tile_load_requests`), the 32 banks and the
    distinct words each is asked for by one warp's request: a bank asked for k different
    words serves them in k passes, and the tallest column is the conflict degree."""
    _check_words(words)
    fig, axes = plt.subplots(1, len(words), figsize=(7.4, 3.4), sharey=True, squeeze=False)
    for ax, (name, ws) in zip(axes[0], words.items(), strict=True):
        per_bank: dict[int, list[int]] = {}
        for w in sorted(set(ws)):
            per_bank.setdefault(w % BANKS, []).append(w)
        for bank, bank_words in per_bank.items():
            ax.bar([bank] * len(bank_words), [1] * len(bank_words),
                   bottom=list(range(len(bank_words))), width=0.8, color="#4c72b0",
                   edgecolor="white")
        degree = max(len(v) for v in per_bank.values())
        verdict = "conflict-free" if degree == 1 else f"{degree}-way conflict"
        ax.set(xlabel="bank (word mod 32)", xlim=(-1, BANKS), title=f"{name}: {verdict}")
    axes[0, 0].set_ylabel("words asked of the bank")
    fig.suptitle("One warp reads a column of the transpose tile (traced)", fontsize=12)
    return finish(fig)


def tile_banks(tiles: dict[str, dict]) -> Figure:
    """Each transpose tile as it lies in shared memory (``tiles``: name -> ``rows``,
    ``width`` in words, and the words one warp's column ``read`` asks for, as
    :func:`gpudl.kernels.access_patterns.tile_load_requests` traces them): every word
    coloured by its bank (word mod 32), the columns past ``rows`` hatched as unused padding,
    and the column read outlined (one rectangle per word, gid ``"read"``)."""
    check_instance("tiles", tiles, dict)
    if not tiles:
        raise ValueError("tiles must name at least one tile")
    for name, tile in tiles.items():
        check_instance(f"tiles[{name!r}]", tile, dict)
        check_int(f"tiles[{name!r}]['rows']", tile.get("rows"), 1)
        check_int(f"tiles[{name!r}]['width']", tile.get("width"), tile["rows"])
        check_ints(f"tiles[{name!r}]['read']", tile.get("read"), 0)
    colours = ListedColormap(plt.get_cmap("turbo")(np.linspace(0.05, 0.95, BANKS)))
    fig, axes = plt.subplots(1, len(tiles), figsize=(7.4, 3.9), squeeze=False,
                             layout="constrained")
    for ax, (name, tile) in zip(axes[0], tiles.items(), strict=True):
        rows, width = tile["rows"], tile["width"]
        words = np.arange(rows * width).reshape(rows, width)
        image = ax.imshow(words % BANKS, cmap=colours, vmin=-0.5, vmax=BANKS - 0.5,
                          extent=(-0.5, width - 0.5, rows - 0.5, -0.5))
        for c in range(rows, width):
            ax.add_patch(Rectangle((c - 0.5, -0.5), 1, rows, facecolor="#dddddd",
                                   edgecolor="k", hatch="///", lw=0.5, gid="padding"))
        per_bank: dict[int, set[int]] = {}
        for w in tile["read"]:
            per_bank.setdefault(w % BANKS, set()).add(w)
            r, c = divmod(w, width)
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, edgecolor="k",
                                   lw=1.2, gid="read"))
        degree = max(len(v) for v in per_bank.values())
        verdict = "conflict-free" if degree == 1 else f"{degree}-way conflict"
        ax.set(title=f"{name}: {rows} x {width} words\ncolumn read: {verdict}",
               xlabel="column of the tile")
        ax.tick_params(labelsize=TICK_PT)
    axes[0, 0].set_ylabel("row of the tile", fontsize=LABEL_PT)
    bar = fig.colorbar(image, ax=axes[0].tolist(), ticks=[0, 8, 16, 24, BANKS - 1])
    bar.set_label("bank (word mod 32)", fontsize=LABEL_PT)
    bar.ax.tick_params(labelsize=TICK_PT)
    return fig  # constrained layout: finish's tight layout would undo it


def _halvings(n: int, stop: int) -> list[int]:
    """n // 2, n // 4, ... while greater than ``stop``."""
    steps = []
    while n // 2 > stop:
        n //= 2
        steps.append(n)
    return steps


def reduction_stages(threads_per_block: int, warp: int) -> Figure:
    """One block's sum in :mod:`gpudl.kernels.reduction`'s v5 and v6, from its
    ``THREADS_PER_BLOCK`` and the warp size: the shared-memory steps that add the upper half
    of the live values onto the lower half until ``2 * warp`` remain (a barrier after each;
    one bar per step, gid ``"shared"``), warp 0 adding the two halves into its registers, and
    the ``shfl_down_sync`` steps, offsets ``warp / 2`` down to 1, after which lane 0 holds the
    sum. Lanes whose value still counts are dark (gid ``"counts"``), the others, which every
    shuffle still computes, light (gid ``"unused"``)."""
    check_int("threads_per_block", threads_per_block, 4)
    check_int("warp", warp, 2)
    for name, n in (("threads_per_block", threads_per_block), ("warp", warp)):
        if n & (n - 1):
            raise ValueError(f"{name} must be a power of two, got {n}")
    if threads_per_block < 2 * warp:
        raise ValueError(f"threads_per_block must be at least 2 * warp = {2 * warp}, got "
                         f"{threads_per_block}")
    live = [threads_per_block, *_halvings(threads_per_block, warp)]
    offsets = [warp // 2**k for k in range(1, int(math.log2(warp)) + 1)]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.4, 6.6), gridspec_kw={
        "height_ratios": [len(live) + 0.6, len(offsets) + 1.6]})
    for row, n in enumerate(live):
        top.add_patch(Rectangle((0, row - 0.3), n, 0.6, facecolor="#4c72b0", gid="shared"))
        if row:
            for t in range(0, n, max(1, n // 4)):  # a few of the n additions
                top.plot([t + n + 0.5, t + 0.5], [row - 0.7, row - 0.3], color="#888888",
                         lw=0.8)
    for w in range(0, threads_per_block + 1, warp):
        top.axvline(w, color="white" if w < threads_per_block else "k", lw=0.8)
    top.set(xlim=(0, threads_per_block), ylim=(len(live) - 0.4, -0.6),
            xticks=range(0, threads_per_block + 1, 2 * warp), xlabel="word of shared memory",
            title=f"Shared memory: {threads_per_block} values to {live[-1]} in "
                  f"{len(live) - 1} steps, a barrier after each")
    top.set_yticks(range(len(live)), [f"{threads_per_block} values"]
                   + [f"+ upper {n}" for n in live[1:]])
    lanes = [warp, *offsets]
    for row, counting in enumerate(lanes):
        for lane in range(warp):
            gid = "counts" if lane < counting else "unused"
            bottom.add_patch(Rectangle((lane + 0.1, row - 0.3), 0.8, 0.6, gid=gid,
                                       facecolor="#4c72b0" if gid == "counts" else "#d9e2f0"))
        if row:
            for lane in range(counting):
                bottom.plot([lane + counting + 0.5, lane + 0.5], [row - 0.7, row - 0.3],
                            color="#555555", lw=0.8)
    bottom.text(1.2, len(lanes) - 1, "lane 0: the block's sum", va="center")
    bottom.set(xlim=(0, warp), ylim=(len(lanes) - 0.4, -0.6), xlabel="lane of warp 0",
               xticks=range(0, warp + 1, 4),
               title=f"Warp 0's registers: {len(offsets)} shuffles, no barrier")
    bottom.set_yticks(range(len(lanes)), [f"words t, t + {warp}"]
                      + [f"+ shfl_down {o}" for o in offsets])
    return finish(fig)


def block_loads(loads: dict[str, Sequence[Sequence[Sequence[int]]]], warp: int = 32,
                itemsize: int = 4) -> Figure:
    """Which load instruction of which warp brings each element of one block's share of the
    array (``loads``: a kernel's name -> per thread of the block, the element indices of each
    of its loads, in order, as the tracer records them): one panel per kernel, a row per
    warp, each element coloured by the load (0, 1, ...) of its thread that asks for it, and
    the elements of thread 0 marked (gid ``"thread 0"``). ``itemsize`` bytes per element."""
    check_instance("loads", loads, dict)
    if not loads:
        raise ValueError("loads must name at least one kernel")
    check_int("warp", warp, 1)
    check_int("itemsize", itemsize, 1)
    for name, threads in loads.items():
        if isinstance(threads, str) or not isinstance(threads, Sequence) or not threads:
            raise TypeError(f"loads[{name!r}] must be a list of threads' loads")
        for thread, thread_loads in enumerate(threads):
            if len(thread_loads) != len(threads[0]) or not thread_loads:
                raise ValueError(f"loads[{name!r}]: thread {thread} has {len(thread_loads)} "
                                 f"loads, thread 0 {len(threads[0])}")
            for k, elements in enumerate(thread_loads):
                check_ints(f"loads[{name!r}][{thread}][{k}]", elements, 0)
    fig, axes = plt.subplots(len(loads), 1, figsize=(7.4, 1.2 + 2.2 * len(loads)),
                             squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, (name, threads) in zip(axes[:, 0], loads.items(), strict=True):
        span = 1 + max(e for thread in threads for load in thread for e in load)
        warps = -(-len(threads) // warp)
        cells = np.full((warps, span), np.nan)
        for thread, thread_loads in enumerate(threads):
            for k, elements in enumerate(thread_loads):
                cells[thread // warp, elements] = k
        count = len(threads[0])
        ax.imshow(cells, cmap=ListedColormap([colours(k % 10) for k in range(count)]),
                  vmin=-0.5, vmax=count - 0.5, aspect="auto", interpolation="nearest",
                  extent=(-0.5, span - 0.5, warps - 0.5, -0.5))
        for elements in threads[0]:
            ax.add_patch(Rectangle((elements[0] - 0.5, -0.5), len(elements), 1,
                                   facecolor="k", edgecolor="k", lw=1.2, gid="thread 0"))
            ax.plot(elements[0] + len(elements) / 2 - 0.5, -0.5, "v", color="k",
                    markersize=7, clip_on=False)
        apart = threads[0][1][0] - threads[0][0][0] if count > 1 else 0
        ax.set_title(f"{name}: {count} loads of {len(threads[0][0]) * itemsize} B per "
                     f"thread, {apart:,} elements apart", fontsize=11, pad=10)
        ax.set_yticks(range(warps), [f"warp {w}" for w in range(warps)])
        ax.set_xticks(range(0, span + 1, span // 8))
        ax.set_xlim(-0.5, span - 0.5)
    axes[-1, 0].set_xlabel("element of the block's share of x (colour: which load of its "
                           "thread; black: thread 0)")
    return finish(fig)


def sectors_per_request(rows: Sequence[dict]) -> Figure:
    """Sectors per warp request for each access pattern (rows of
    :func:`gpudl.kernels.memory.coalescing_report`), against the ideal."""
    check_rows("rows", rows, ("pattern", "sectors"))
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["pattern"].replace(" ", "\n") for r in rows]  # two lines: the labels fit
    ax.bar(names, [r["sectors"] for r in rows], label="traced")
    ax.axhline(rows[0]["ideal"], color="k", ls="--", lw=1, label="ideal (coalesced)")
    ax.set(ylabel="32-byte sectors per request", title="One warp's float32 load")
    ax.legend()
    return finish(fig)


def roofline(peak_flops: float, peak_bandwidth: float, points: dict[str, tuple],
             title: str) -> Figure:
    """The roofline of a device (flop/s, bytes/s) with kernels placed on it by arithmetic
    intensity. ``points`` maps a name to ``(intensity, measured flop/s or None)``: measured
    points are drawn where they were measured, the others on the roof."""
    check_positive("peak_flops", peak_flops)
    check_positive("peak_bandwidth", peak_bandwidth)
    check_instance("points", points, dict)
    check_instance("title", title, str)
    intensities = np.logspace(-2, 3, 200)
    fig, ax = plt.subplots(figsize=(7.0, 6.4))
    ax.loglog(intensities, attainable(intensities, peak_flops, peak_bandwidth), "k-",
              label="attainable = min(peak, intensity x bandwidth)")
    ax.axvline(ridge_point(peak_flops, peak_bandwidth), color="grey", ls=":", lw=1,
               label="ridge point")
    for name, (intensity, measured) in points.items():
        y = measured if measured is not None else attainable(intensity, peak_flops,
                                                             peak_bandwidth)
        ax.plot(intensity, y, "o" if measured is not None else "s", label=name)
    ax.set(xlabel="arithmetic intensity (flop/byte)", ylabel="flop/s", title=title)
    # below the axes, so that it hides none of the kernels' points
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), fontsize=10)
    return finish(fig)


def hierarchy(levels: dict) -> Figure:
    """Latency (ns per dependent load) and bandwidth (GB/s) of each memory level, from
    :func:`gpudl.bench.hierarchy.measure`, side by side on log scales."""
    check_instance("levels", levels, dict)
    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    latency = levels["latency"]
    left.bar(list(latency), [r["ns_per_hop"] for r in latency.values()])
    left.set(yscale="log", ylabel="ns per dependent load", title="Latency")
    bandwidth = dict(levels["bandwidth"])
    names = list(bandwidth)
    values = [r["gbs"] for r in bandwidth.values()]
    if levels.get("register_file_gbs") is not None:
        names.append("registers\n(derived)")
        values.append(levels["register_file_gbs"])
    right.bar(names, values)
    right.set(yscale="log", ylabel="GB/s", title="Bandwidth")
    return finish(fig)
