"""Chapter 8's figures: the roofline of each precision, the tiles a fused attention kernel
visits, the lanes and registers that hold an mma's fragments, the bytes each attention variant
moves, and the largest error of each against its bound. The data-layout figures of the
chapter's kernels are in :mod:`gpudl.plots.ch08_layouts`.

Book section: Chapter 8, Attention and tensor cores (and its lab).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from gpudl.checks import (
    check_array,
    check_bool,
    check_choice,
    check_equal,
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

#: The colours of registers 0 to 3 of an mma fragment (a lane's A and C registers; B has two).
REGISTER_COLOURS = ("#b3e2cd", "#fdcdac", "#cbd5e8", "#f4cae4")

__all__ = ["roofline_precisions", "online_softmax_tiles", "fragment_registers", "mma_fragments",
           "attention_bytes", "observed_errors", "attention_errors"]


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


def fragment_registers(matrix: str) -> np.ndarray:
    """The register of its lane that holds each element of ``matrix`` ("a", "b" or "c") of
    an m16n8k16 mma (0 to 3 for A and C, 0 or 1 for B), read off
    :func:`gpudl.kernels.mma.fragments` as :func:`gpudl.kernels.mma.lanes` reads the lanes:
    by handing it matrices whose values number their elements."""
    from gpudl.kernels import mma

    shapes = {"a": (mma.M, mma.K), "b": (mma.K, mma.N), "c": (mma.M, mma.N)}
    check_choice("matrix", matrix, shapes)
    numbered = {name: np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
                for name, shape in shapes.items()}  # below 256: exact in bf16
    register = np.full(shapes[matrix], -1)
    for a_words, b_words, c_values in mma.fragments(*numbered.values()):
        held = {"a": a_words, "b": b_words, "c": c_values}[matrix]
        for r, value in enumerate(held):
            if matrix == "c":
                register.flat[int(value)] = r
                continue
            for half in (int(value) & 0xFFFF, int(value) >> 16):  # two bf16 in one word
                element = np.array([half << 16], np.uint32).view(np.float32)[0]
                register.flat[int(element)] = r
    return register


def mma_fragments(owners: dict[str, np.ndarray],
                  registers: dict[str, np.ndarray] | None = None) -> Figure:
    """Which lane of the warp holds each element of the matrices of one mma: ``owners`` maps
    a matrix name to an array of lane numbers (:func:`gpudl.kernels.mma.lanes`), written in
    the cells. The cells are coloured by ``registers`` (the same names to the register of
    the lane that holds each element, :func:`fragment_registers`) if given, else by lane //
    4."""
    # the widest matrix on a row of its own, the others side by side below it, every cell
    # large enough for its lane number in readable type, on light colours
    check_instance("owners", owners, dict)
    for name, lanes in owners.items():
        check_array(f"owners[{name!r}]", lanes, 2, "iu")
    if registers is not None:
        check_instance("registers", registers, dict)
        check_equal("the names of registers", sorted(registers), "those of owners",
                    sorted(owners))
        for name, held in registers.items():
            check_equal(f"registers[{name!r}].shape", check_array(
                f"registers[{name!r}]", held, 2, "iu").shape, "its owners' shape",
                owners[name].shape)
    (wide, *rest) = sorted(owners, key=lambda name: -owners[name].shape[1])
    fig = plt.figure(figsize=(7.5, 7.5 + 7.5 / max(len(rest), 1) * (1 if rest else 0)))
    grid = fig.add_gridspec(2 if rest else 1, max(len(rest), 1),
                            height_ratios=[1, 1] if rest else [1])
    axes = {wide: fig.add_subplot(grid[0, :])}
    axes |= {name: fig.add_subplot(grid[1, i]) for i, name in enumerate(rest)}
    colours = ListedColormap(REGISTER_COLOURS)
    for name, ax in axes.items():
        lanes = owners[name]
        if registers is None:
            ax.imshow(lanes // 4, cmap="Pastel2", vmin=0, vmax=7)
        else:
            ax.imshow(registers[name], cmap=colours, vmin=0, vmax=len(REGISTER_COLOURS) - 1)
        for (r, c), lane in np.ndenumerate(lanes):
            ax.text(c, r, str(lane), ha="center", va="center", fontsize=10)
        ax.set(title=name, xticks=[], yticks=[])
    if registers is None:
        axes[wide].set_title("m16n8k16, the lane holding each element (colour: lane // 4)\n"
                             f"{wide}")
        return finish(fig)
    axes[wide].set_title("m16n8k16: the lane holding each element (number) and its register "
                         f"(colour)\n{wide}")
    finish(fig)
    handles = [Patch(facecolor=c, edgecolor="k", lw=0.5) for c in REGISTER_COLOURS]
    fig.legend(handles, [f"register {r}" for r in range(len(REGISTER_COLOURS))],
               loc="lower center", ncol=len(REGISTER_COLOURS), frameon=False)
    fig.subplots_adjust(bottom=0.06)
    return fig


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


def observed_errors(cases: Sequence[tuple[int, int, bool, float]],
                    seed: int = 0) -> dict[str, list[float]]:
    """How close each attention variant (on this process's backend) and torch's float32 SDPA
    (on the CPU) come to the bound of :func:`gpudl.kernels.attention_error.error_bound`:
    for each case ``(s, d, causal, scale)``, one head of random float32 ``q``, ``k``, ``v``
    of ``s`` tokens and head size ``d`` (``q`` times ``scale``, which scales the scores),
    the largest ``|o - o_ref| / bound`` over its elements, per float32 variant and for
    ``"torch SDPA"``."""
    import torch

    from gpudl.kernels import attention, attention_error

    if isinstance(cases, str) or not isinstance(cases, Sequence):
        raise TypeError(f"cases must be a list of (s, d, causal, scale), got {cases!r}")
    if not cases:
        raise ValueError("cases must hold at least one case")
    for i, case in enumerate(cases):
        if not isinstance(case, tuple | list) or len(case) != 4:
            raise TypeError(f"cases[{i}] must be (s, d, causal, scale), got {case!r}")
        check_int(f"cases[{i}][0] (s)", case[0], 1)
        check_int(f"cases[{i}][1] (d)", case[1], 1, attention.MAX_HEAD_DIM)
        check_bool(f"cases[{i}][2] (causal)", case[2])
        check_positive(f"cases[{i}][3] (scale)", case[3])
    rng = np.random.default_rng(check_int("seed", seed, 0))
    # the float32 variants: the bound is float32's (a float16 variant has its own)
    float32 = [v for v in attention.VARIANTS if attention.precision(v) == "float32"]
    ratios: dict[str, list[float]] = {name: [] for name in [*float32, "torch SDPA"]}
    for s, d, causal, scale in cases:
        q, k, v = (rng.standard_normal((1, s, d)).astype(np.float32) for _ in range(3))
        q = (q * np.float32(scale)).astype(np.float32)
        reference, _ = attention.reference(q, k, v, causal)
        bound, _ = attention_error.error_bound(q, k, v, causal)
        results = {variant: attention.forward(q, k, v, causal, variant)[0]
                   for variant in float32}
        results["torch SDPA"] = torch.nn.functional.scaled_dot_product_attention(
            *(torch.from_numpy(x) for x in (q, k, v)), is_causal=causal).numpy()
        for name, o in results.items():
            ratios[name].append(float(np.max(np.abs(o - reference) / bound)))
    return ratios


def attention_errors(labels: Sequence[str], ratios: dict[str, Sequence[float]],
                     title: str) -> Figure:
    """The largest error over the bound (:func:`observed_errors`) of each implementation
    (one marker each) in each case (``labels``, one per case), on a log scale with the
    bound at 1, the largest of all written beside its marker."""
    if (isinstance(labels, str) or not isinstance(labels, Sequence)
            or not all(isinstance(label, str) for label in labels)):
        raise TypeError(f"labels must be a list of str, got {labels!r}")
    if not labels:
        raise ValueError("labels must hold at least one label")
    check_instance("ratios", ratios, dict)
    for name, values in ratios.items():
        if len(check_reals(f"ratios[{name!r}]", values, 0)) != len(labels):
            raise ValueError(f"ratios[{name!r}] must hold one value per label "
                             f"({len(labels)}), got {len(values)}")
    check_instance("title", title, str)
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    x = np.arange(len(labels))
    markers = ["o", "s", "^", "D"]
    for i, (name, values) in enumerate(ratios.items()):
        offset = (i - (len(ratios) - 1) / 2) * 0.12
        ax.semilogy(x + offset, values, markers[i % len(markers)], label=name, markersize=7)
    ax.axhline(1.0, color="#d7301f", lw=1.5, label="the bound")
    worst = max((v, name, j) for name, values in ratios.items() for j, v in enumerate(values))
    column = list(ratios).index(worst[1])
    ax.annotate(f"{worst[0]:.2g}", xy=(worst[2] + (column - (len(ratios) - 1) / 2) * 0.12,
                                       worst[0]),
                xytext=(10, 8), textcoords="offset points")
    ax.set(xticks=x, ylim=(1e-4, 3), ylabel="largest |error| / bound", title=title)
    ax.set_xticklabels(labels, fontsize=10)
    ax.legend(loc="lower left", ncol=2, fontsize=10)
    return finish(fig)
