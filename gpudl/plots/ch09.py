"""Chapter 9's figures: the KV cache against a GPU's memory, what each thread of a decode block
holds and reads, the blocks each decode variant launches, the memory a paged cache wastes, and
static against continuous batching.

Book section: Chapter 9, Inference on a GPU (and its lab).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from gpudl.checks import (
    check_instance,
    check_int,
    check_ints,
    check_real,
    check_real_mapping,
    check_reals,
)
from gpudl.estimate.batching import Served
from gpudl.plots.style import finish

__all__ = ["kv_cache_growth", "decode_layout", "word_banks", "decode_blocks", "paged_waste",
           "batching_timeline"]


def _check_lines(name: str, lines: object, points: int, check: Callable[[str, object], tuple]
                 ) -> None:
    """``lines``, a dict of names to values, each ``check``-ed and ``points`` long."""
    check_instance(name, lines, dict)
    for key, values in lines.items():
        if len(check(f"{name}[{key!r}]", values)) != points:
            raise ValueError(f"{name}[{key!r}] must hold {points} values, one per point, got "
                             f"{len(values)}")


def kv_cache_growth(tokens: Sequence[int], bytes_by_model: dict[str, Sequence[float]],
                    limits: dict[str, float], title: str) -> Figure:
    """The KV cache's bytes against the tokens it holds, one line per model
    (``bytes_by_model``: name -> bytes at each of ``tokens``), with a GPU's memory as
    horizontal lines (``limits``: name -> bytes)."""
    _check_lines("bytes_by_model", bytes_by_model, len(check_ints("tokens", tokens, 1)),
                 lambda name, v: check_reals(name, v, 0, strict=True))
    check_real_mapping("limits", limits, 0, strict=True)
    check_instance("title", title, str)
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, values in bytes_by_model.items():
        ax.loglog(list(tokens), [v / 1e9 for v in values], "-o", ms=3, label=name)
    for name, limit in limits.items():
        ax.axhline(limit / 1e9, color="grey", ls="--", lw=1)
        ax.text(tokens[0], limit / 1e9 * 1.1, name, fontsize=10, color="grey")
    ax.set(xlabel="tokens in the cache (all sequences)", ylabel="KV cache (GB)", title=title)
    ax.legend(fontsize=9, loc="lower right")
    return finish(fig)


def word_banks(rows: int, row_words: int, banks: int) -> np.ndarray:
    """The shared-memory bank of each element of a ``rows x row_words`` tile of 4-byte words
    laid out row after row from a bank boundary: word ``w`` is in bank ``w mod banks``."""
    for name, value in (("rows", rows), ("row_words", row_words), ("banks", banks)):
        check_int(name, value, 1)
    return np.arange(rows * row_words).reshape(rows, row_words) % banks


def decode_layout(threads: int, columns: int, padded: int, banks: int, value_bytes: int
                  ) -> Figure:
    """Who holds and reads what in a decode-attention block (Chapter 9,
    ``v1_one_block_per_head``). Top: the ``threads * columns`` head dimensions of the query,
    thread t holding ``t, t + threads, ...`` in registers; a key row is read the same way,
    each row of the grid one load of the warp (``threads * value_bytes`` contiguous bytes).
    Bottom: the ``threads x padded`` shared tile of partial scores coloured by bank
    (:func:`word_banks`), beside the same tile without padding; lane t stores column t, and
    one step of the row sums reads a column (outlined)."""
    for name, value in (("threads", threads), ("columns", columns), ("padded", padded),
                        ("banks", banks), ("value_bytes", value_bytes)):
        check_int(name, value, 1)
    if padded < threads:
        raise ValueError(f"padded ({padded}) must be at least threads ({threads}): a row holds "
                         "one partial score per lane")
    fig = plt.figure(figsize=(7.5, 8.0))
    grid = fig.add_gridspec(3, 2, height_ratios=[1.25, 3.4, 0.16])
    top = fig.add_subplot(grid[0, :])
    top.imshow(np.arange(columns)[:, None] * np.ones(threads), cmap="Pastel1", vmin=0, vmax=8,
               aspect="auto")
    for r in range(columns):
        for t in range(threads):
            top.text(t, r, str(t + r * threads), ha="center", va="center", fontsize=10,
                     rotation=90)
    top.set(xticks=[*range(0, threads, 4), threads - 1], yticks=range(columns),
            yticklabels=["t" if r == 0 else f"t + {r * threads}" for r in range(columns)],
            xlabel="lane t = thread t of the block (one warp)",
            title=f"q: thread t holds {columns} columns in registers; the warp reads a key row "
                  f"the same way,\none row of this grid per load ({threads * value_bytes} "
                  "contiguous bytes)")
    top.tick_params(length=0)
    axes = [fig.add_subplot(grid[1, i]) for i in range(2)]
    outline = {"column": "#d62728", "row": "black"}
    for ax, width in zip(axes, (padded, threads), strict=True):
        bank = word_banks(threads, width, banks).astype(float)
        bank[:, threads:] = np.nan  # the padding: never written or read
        ax.imshow(bank, cmap="twilight", vmin=0, vmax=banks - 1)
        for c in range(threads, width):
            ax.add_patch(Rectangle((c - 0.5, -0.5), 1, threads, facecolor="lightgrey",
                                   edgecolor="grey", hatch="////", lw=0.5))
        ax.add_patch(Rectangle((-0.5, -0.5), 1, threads, fill=False,
                               edgecolor=outline["column"], lw=2.4))
        ax.add_patch(Rectangle((-0.5, -0.5), threads, 1, fill=False, edgecolor=outline["row"],
                               lw=1.4, ls="--"))
        in_column = len(set(bank[:, 0].astype(int).tolist()))
        verdict = ("no conflict" if in_column == threads
                   else f"a {threads // in_column}-way conflict")
        ax.set(xticks=[0, 8, 16, 24, width - 1], yticks=[0, 8, 16, 24, threads - 1],
               xlabel="column: the lane that stores it",
               title=f"{threads} x {width}: a column in {in_column} bank"
                     f"{'s' if in_column > 1 else ''},\n{verdict}")
    axes[0].set_ylabel("row: key j, summed by thread j")
    axes[1].set_yticklabels([])
    strip = fig.add_subplot(grid[2, :])
    strip.imshow(np.arange(banks)[None, :], cmap="twilight", vmin=0, vmax=banks - 1,
                 aspect="auto")
    strip.set(xticks=[*range(0, banks, 4), banks - 1], yticks=[],
              xlabel=f"bank ({value_bytes}-byte word mod {banks})")
    fig.suptitle("Decode attention v1: one block of one warp per sequence and head")
    finish(fig)
    fig.legend([Line2D([], [], color=outline["column"], lw=2.4),
                Line2D([], [], color=outline["row"], lw=1.4, ls="--")],
               ["one step of the row sums: thread j reads row j's word of one column",
                "one key's row: lane t stores its share of the score in column t"],
               loc="lower center", ncol=1, fontsize=10, frameon=False)
    fig.subplots_adjust(bottom=0.14, hspace=0.62)
    return fig


def decode_blocks(lengths: Sequence[int], blocks_by_variant: dict[str, Sequence[int]],
                  sms: int, title: str) -> Figure:
    """Thread blocks each decode variant launches against the sequence length (log-log),
    with the GPU's SM count as a line: below it, SMs are left idle."""
    _check_lines("blocks_by_variant", blocks_by_variant, len(check_ints("lengths", lengths, 1)),
                 check_ints)
    check_int("sms", sms, 1)
    check_instance("title", title, str)
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for name, blocks in blocks_by_variant.items():
        ax.loglog(list(lengths), list(blocks), "-o", ms=3, label=name)
    ax.axhline(sms, color="grey", ls="--", lw=1, label=f"{sms} SMs")
    ax.set(xlabel="cached tokens s (batch 1)", ylabel="thread blocks", title=title)
    ax.legend(fontsize=9)
    return finish(fig)


def paged_waste(block_sizes: Sequence[int], paged: Sequence[float], contiguous: float,
                title: str) -> Figure:
    """The fraction of reserved KV-cache positions that hold no token: one bar for a
    ``max_len`` reservation per sequence, one per block size of a paged cache."""
    sizes, fractions = check_ints("block_sizes", block_sizes, 1), check_reals("paged", paged)
    for i, fraction in enumerate(fractions):
        check_real(f"paged[{i}]", fraction, 0, 1)
    if len(fractions) != len(sizes):
        raise ValueError(f"paged must hold one fraction per block size, {len(sizes)}, got "
                         f"{len(fractions)}")
    check_real("contiguous", contiguous, 0, 1)
    check_instance("title", title, str)
    labels = ["max_len per\nsequence", *(f"blocks of\n{b}" for b in block_sizes)]
    values = [contiguous, *paged]
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    bars = ax.bar(labels, [100 * v for v in values], color=["#c44e52"] + ["#4c72b0"] * len(
        block_sizes))
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_x() + bar.get_width() / 2, 100 * value + 1, f"{value:.1%}",
                ha="center", fontsize=10)
    ax.set(ylabel="reserved but empty (%)", ylim=(0, 100 * max(values) * 1.2 + 2), title=title)
    return finish(fig)


def batching_timeline(runs: Sequence[Served], max_batch: int, title: str) -> Figure:
    """Left: the requests each policy computes at every step over time (static batches keep
    computing their finished requests' slots: the dotted line). Right: each policy's
    latencies, sorted."""
    if isinstance(runs, str) or not isinstance(runs, Sequence):
        raise TypeError(f"runs must be a list of Served runs, got {type(runs).__name__}")
    if not runs:
        raise ValueError("runs must hold at least one Served run")
    for i, run in enumerate(runs):
        check_instance(f"runs[{i}]", run, Served)
    check_int("max_batch", max_batch, 1)
    check_instance("title", title, str)
    fig, (left, right) = plt.subplots(1, 2, figsize=(7.5, 4.2))
    for run in runs:
        line, = left.step(run.times_s, run.running, where="post", lw=1, label=run.policy)
        if run.policy == "static":
            left.step(run.times_s, run.computing, where="post", lw=1, ls=":",
                      color=line.get_color(), label="static, slots computed")
        right.plot(np.sort(run.latency_s), np.arange(1, len(run.requests) + 1)
                   / len(run.requests), label=run.policy)
    left.axhline(max_batch, color="grey", ls="--", lw=1)
    left.set(xlabel="time (s)", ylabel="requests making a token", title="Batch over time")
    right.set(xlabel="latency (s)", ylabel="fraction of requests", title="Latency")
    left.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=2)
    right.legend(fontsize=9, loc="lower right")
    fig.suptitle(title)
    return finish(fig)
