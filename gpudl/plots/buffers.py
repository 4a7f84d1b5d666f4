"""Flat buffers drawn element by element: the gradient buckets of data parallelism and the
shards of ZeRO-1, each tensor at its offset, both read from the package's own objects.

Book section: Chapter 5, Data parallelism, "Buckets by hand" (:func:`gradient_buckets`), and
Chapter 6, Model parallelism, "One ZeRO-1 step" (:func:`zero_shards`).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from gpudl.checks import check_int, check_positive, check_widths
from gpudl.parallel.data import GradientBuckets, Setup
from gpudl.parallel.one_process import ZERO_DIMS, make_mlp
from gpudl.parallel.zero import padded_numel, shard_range
from gpudl.plots.style import finish

__all__ = ["gradient_buckets", "zero_shards"]

#: One colour per linear layer (weight dark, bias light), and the padding's grey.
_LAYER_COLORS = (("#4c72b0", "#a1b9dc"), ("#dd8452", "#f0c2a2"), ("#55a868", "#a9d4b3"),
                 ("#8172b3", "#c0b8d9"), ("#937860", "#c9bbaf"))
_PADDING = "#bbbbbb"
_RANK_COLORS = ("#c44e52", "#8172b3", "#64b5cd", "#ccb974", "#da8bc3", "#8c8c8c")
#: Width of a character of 10-point text, in inches (DejaVu Sans, about 0.6 em).
_CHAR_IN = 10 * 0.6 / 72
_BAR = 0.5  # height of a buffer's bar, in the axes' y units


def _tensor_labels(name: str, shape: Sequence[int]) -> tuple[tuple[str, str], int, str]:
    """``(("W2: 32 x 32", "W2"), 2, "weight")`` for the parameter ``name`` (``"2.weight"``)
    of :func:`gpudl.parallel.one_process.make_mlp`, whose linear layers sit at even
    positions: ``Wk`` and ``bk`` are layer ``k``'s weight and bias; the longer label is
    written where it fits."""
    position, kind = name.split(".")
    layer = int(position) // 2 + 1
    short = f"{'W' if kind == 'weight' else 'b'}{layer}"
    return (f"{short}: {' x '.join(map(str, shape))}", short), layer, kind


def _segment_color(layer: int, kind: str) -> str:
    return _LAYER_COLORS[(layer - 1) % len(_LAYER_COLORS)][kind == "bias"]


def _draw_buffer(ax: Axes, y: float,
                 segments: list[tuple[tuple[str, ...], int, int, str, str]],
                 per_in: float) -> None:
    """Draw one flat buffer at height ``y`` (the y axis points down), ``per_in`` elements to
    the inch: each ``(labels, start, length, color, gid)`` a rectangle to scale. The first of
    ``labels`` that fits its rectangle is written inside; where none fits, the last is
    written above the bar, on as many levels as the labels need not to overlap, with a line
    to its rectangle."""
    ends: list[float] = []  # the right end of the last label on each level above the bar
    for labels, start, length, color, gid in segments:
        ax.add_patch(Rectangle((start, y), length, _BAR, facecolor=color, edgecolor="white",
                               lw=0.8, gid=gid))
        middle = start + length / 2
        inside = [t for t in labels if len(t) * _CHAR_IN + 0.12 < length / per_in]
        if inside:
            ax.text(middle, y + _BAR / 2, inside[0], ha="center", va="center", fontsize=10)
            continue
        label = labels[-1]
        half = (len(label) * _CHAR_IN / 2 + 0.04) * per_in
        left = max(middle - half, 0.0)
        # the lowest level where the label fits, moved right by at most 0.4 inch
        level = next((i for i, end in enumerate(ends) if end - left < 0.4 * per_in), len(ends))
        if level == len(ends):
            ends.append(0.0)
        left = max(left, ends[level])
        ends[level] = left + 2 * half
        ax.annotate(label, (middle, y), (left + half, y - 0.2 - 0.32 * level), ha="center",
                    va="bottom", fontsize=10,
                    arrowprops={"arrowstyle": "-", "lw": 0.7, "color": "0.4",
                                "shrinkA": 0, "shrinkB": 0})


def _offsets(ax: Axes, y: float, offsets: list[int]) -> None:
    """The element offsets under a bar, alternating between two rows so that close ones stay
    apart."""
    for k, offset in enumerate(offsets):
        ax.text(offset, y + _BAR + 0.06 + 0.27 * (k % 2), f"{offset:,}", ha="center",
                va="top", fontsize=10, color="0.3")


def gradient_buckets(dims: Sequence[int] = Setup.dims,
                     bucket_cap_mb: float = Setup.bucket_cap_mb) -> Figure:
    """The buckets that :class:`gpudl.parallel.data.GradientBuckets` builds for
    ``make_mlp(dims)`` with a cap of ``bucket_cap_mb`` MiB (by default the lab's MLP and cap,
    :class:`gpudl.parallel.data.Setup`'s), to scale: one bar per bucket,
    each parameter's gradient at its place (its ``.grad`` view's offset in the bucket, gid
    ``"name:offset:numel"``), in the order the backward pass makes them, the last layer's
    first. The numbers under a bar are the element offsets
    (:func:`gpudl.kernels.buckets.offsets`, what the pack kernel searches). A bucket's
    all-reduce starts when its last gradient is ready."""
    dims = check_widths("dims", dims)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    model = make_mlp(dims)
    names = {id(p): name for name, p in model.named_parameters()}
    buckets = GradientBuckets(model.parameters(), bucket_cap_mb, world_size=1)
    longest, step = max(flat.numel() for flat in buckets.flat), 2.0
    fig, ax = plt.subplots(figsize=(7.4, 1.0 + 1.25 * len(buckets.buckets)))
    per_in = longest / (7.4 * 0.55)  # the longest bucket takes 55% of the width
    for b, (bucket, flat) in enumerate(zip(buckets.buckets, buckets.flat, strict=True)):
        y, segments = step * b, []
        for param in bucket:
            start = buckets.slot_of[id(param)].storage_offset()
            labels, layer, kind = _tensor_labels(names[id(param)], param.shape)
            segments.append((labels, start, param.numel(), _segment_color(layer, kind),
                             f"{names[id(param)]}:{start}:{param.numel()}"))
        _draw_buffer(ax, y, segments, per_in)
        _offsets(ax, y, [0] + [start + length for _, start, length, _, _ in segments])
        ax.text(flat.numel() + 0.15 * per_in, y + _BAR / 2,
                f"bucket {b}: {flat.numel() * flat.element_size():,} bytes; all-reduced\n"
                f"{'first' if b == 0 else 'next'}, as soon as {segments[-1][0][-1]} is ready",
                va="center", fontsize=10)
    ax.set(xlim=(0, longest / 0.55), ylim=(step * len(buckets.buckets) - 1.1, -1.0))
    ax.axis("off")
    ax.set_title(f"Gradient buckets of the MLP {tuple(dims)}, cap {bucket_cap_mb * 1024:g} "
                 "KiB, filled in the order backward runs", fontsize=12)
    return finish(fig)


def zero_shards(dims: Sequence[int] = ZERO_DIMS, world_size: int = 4) -> Figure:
    """ZeRO-1's flat buffer for ``make_mlp(dims)`` on ``world_size`` ranks
    (:func:`gpudl.parallel.zero.padded_numel`, :func:`gpudl.parallel.zero.shard_range`), to
    scale: the parameters one after another, padded to a multiple of the world size (gid
    ``"name:offset:numel"``, ``"padding:offset:numel"``); below it one bar per rank, whole
    (the parameters and gradients every rank holds), with its shard marked (gid
    ``"shard:rank:start:stop"``): the only part whose Adam moments it keeps and updates, and
    that it all-gathers to the others."""
    dims = check_widths("dims", dims)
    n = check_int("world_size", world_size, 1)
    params = list(make_mlp(dims).named_parameters())
    numel = sum(p.numel() for _, p in params)
    padded = padded_numel(numel, n)
    ranges = [shard_range(numel, n, r) for r in range(n)]  # refuses a rank of padding only
    per_in = padded / (7.4 * 0.76)
    fig, ax = plt.subplots(figsize=(7.4, 2.6 + 0.5 * n))
    segments, start = [], 0
    for name, p in params:
        labels, layer, kind = _tensor_labels(name, p.shape)
        segments.append((labels, start, p.numel(), _segment_color(layer, kind),
                         f"{name}:{start}:{p.numel()}"))
        start += p.numel()
    if padded > numel:
        segments.append((("padding", "pad"), numel, padded - numel, _PADDING,
                         f"padding:{numel}:{padded - numel}"))
    _draw_buffer(ax, 0.0, segments, per_in)
    ax.text(-0.1 * per_in, _BAR / 2, "flat buffer", ha="right", va="center", fontsize=10)
    top = 1.5
    for r, (lo, hi) in enumerate(ranges):
        y = top + 0.7 * r
        ax.add_patch(Rectangle((0, y), padded, _BAR, facecolor="#eeeeee", edgecolor="0.6",
                               lw=0.6))
        ax.add_patch(Rectangle((lo, y), hi - lo, _BAR, facecolor=_RANK_COLORS[r % 6],
                               edgecolor="k", lw=0.8, gid=f"shard:{r}:{lo}:{hi}"))
        ax.text(-0.1 * per_in, y + _BAR / 2, f"rank {r}", ha="right", va="center",
                fontsize=10)
        ax.text((lo + hi) / 2, y + _BAR / 2, f"shard {r}", ha="center", va="center",
                fontsize=10, color="white")
    bottom = top + 0.7 * n - 0.2
    for lo, _ in ranges[1:]:  # the shards' edges, through the tensors they cut
        ax.plot([lo, lo], [-0.1, bottom], color="0.3", lw=0.8, ls=":")
    _offsets(ax, bottom - _BAR, [lo for lo, _ in ranges] + [padded])
    ax.text(padded / 2, bottom + 0.75, "reduce-scatter: rank r receives the mean gradient of "
            "shard r; Adam updates it;\nall-gather: every rank receives every updated shard",
            ha="center", va="top", fontsize=10)
    ax.set(xlim=(-0.95 * per_in, padded + 0.45 * per_in), ylim=(bottom + 1.45, -1.2))
    ax.axis("off")
    ax.set_title(f"ZeRO-1 on {n} ranks: {numel:,} parameters padded to {padded:,}, "
                 f"{n} shards of {padded // n:,}", fontsize=12)
    return finish(fig)
