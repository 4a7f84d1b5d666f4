"""Chapter 9's figures (gpudl.plots and the ones the book draws when it is built): what each
draws is the model it comes from, and every book figure is readable and fits the page."""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gpudl import plots  # noqa: E402
from gpudl.estimate import MODELS, POLICIES, StepCost, request_stream, simulate  # noqa: E402
from gpudl.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, font_sizes  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_kv_cache_growth_draws_gigabytes_and_the_limits():
    fig = plots.kv_cache_growth([1, 10], {"m": [2e9, 20e9]}, {"80 GB": 80e9}, "t")
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), [2, 20])
    assert ax.get_lines()[1].get_ydata()[0] == 80


def test_the_decode_layout_is_what_v1_does():
    """The figure's picture of v1 (thread t holds and reads columns t, t + 32, ... of a key
    row, one aligned 128-byte load per row; the 32 x 33 tile's columns in 32 banks) is what
    the kernel's traced accesses show, and the figure draws the tiles it names."""
    from gpudl.kernels import decode, decode_tile
    from gpudl.trace import BANKS, trace

    tile, d = decode_tile.TILE, decode.MAX_HEAD_DIM
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 1, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, 1, tile, d)).astype(np.float32) for _ in range(2))
    runs = []
    decode.decode_attention(q, k, v, np.array([tile], np.int32), "v1_one_block_per_head",
                            launch=lambda kernel, *args: runs.append(trace(kernel, *args)))
    (run,) = runs
    base = (run.parameters.index("k_cache") + 1) << 32
    held = {t: set() for t in range(tile)}
    for a in run.accesses:
        if a.array == "k_cache":
            held[a.thread].add((a.address - base) // a.size % d)
    assert held == {t: {t + r * tile for r in range(decode_tile.COLUMNS)} for t in range(tile)}
    keys = run.sectors_per_request("k_cache")
    assert keys.max == keys.ideal == tile * 4 // 32  # 128 contiguous, aligned bytes a load
    for op in ("store", "load"):  # a key's row stored by the lanes; a column read by the sums
        assert run.bank_conflict_degree("partial", op).max == 1
    fig = plots.decode_layout(tile, decode_tile.COLUMNS, decode_tile.TILE_PADDED, BANKS, 4)
    padded, unpadded = (ax.get_images()[0].get_array() for ax in fig.axes[1:3])
    np.testing.assert_array_equal(padded[:, :tile], plots.word_banks(tile, tile + 1, BANKS)[
        :, :tile])
    assert len(set(padded[:, 0].tolist())) == tile and len(set(unpadded[:, 0].tolist())) == 1


def test_decode_blocks_draws_each_variant_and_the_sms():
    fig = plots.decode_blocks([128, 256], {"v1": [32, 32], "v2": [32, 64]}, 132, "t")
    lines = fig.axes[0].get_lines()
    assert [list(ln.get_ydata()) for ln in lines[:2]] == [[32, 32], [32, 64]]
    assert lines[2].get_ydata()[0] == 132


def test_paged_waste_draws_one_bar_per_policy():
    fig = plots.paged_waste([8, 16], [0.01, 0.02], 0.78, "t")
    heights = [bar.get_height() for bar in fig.axes[0].patches]
    assert heights == pytest.approx([78, 1, 2])


def test_batching_timeline_draws_the_simulation():
    cost = StepCost(7e9, 989e12, 3.35e12, MODELS["Llama 2 7B"].kv_bytes_per_token())
    runs = [simulate(request_stream(20, 8.0, seed=1), cost, 4, p) for p in POLICIES]
    fig = plots.batching_timeline(runs, 4, "t")
    left, right = fig.axes
    static = left.get_lines()[0]
    np.testing.assert_array_equal(static.get_ydata()[:len(runs[0].running)], runs[0].running)
    latencies = right.get_lines()[1].get_xdata()
    np.testing.assert_array_equal(latencies, np.sort(runs[1].latency_s))


def test_every_chapter_9_figure_is_readable_fits_the_page_and_is_shown():
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "book" / "_ext"))
    import gpudl_figures

    figures = gpudl_figures._ch09_figures()
    text = (root / "book" / "ch09-inference.md").read_text()
    assert text.count("```{figure}") >= 3
    assert all(f"_generated/{name}" in text for name in figures)
    for name, draw in figures.items():
        fig = draw()
        assert fig.get_size_inches()[0] <= MAX_WIDTH_IN, name
        assert min(font_sizes(fig)) >= MIN_FONT_PT, name
        plt.close(fig)

