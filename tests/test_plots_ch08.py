"""Chapter 8's figures (gpudl.plots): what each one draws is checked against the model or the
layout it comes from."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gpudl import plots  # noqa: E402
from gpudl.estimate import roofline  # noqa: E402
from gpudl.kernels import attention, mma  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_roofline_precisions_draws_one_roof_per_precision_and_places_points_on_it():
    peaks, bandwidth = {"FP32": 67e12, "BF16": 989e12}, 3.35e12
    fig = plots.roofline_precisions(peaks, bandwidth, {"k": (10.0, "FP32"),
                                                       "t": (500.0, "BF16")}, "t")
    lines = fig.axes[0].get_lines()
    roofs = [ln for ln in lines if len(ln.get_xdata()) == 300]
    assert len(roofs) == 2
    for roof, peak in zip(roofs, peaks.values(), strict=True):
        x = np.asarray(roof.get_xdata())
        np.testing.assert_allclose(roof.get_ydata(), roofline(x, peak, bandwidth))
    markers = {ln.get_label().split(" (")[0]: ln.get_ydata()[0] for ln in lines
               if ln.get_marker() == "o"}
    assert markers == {"k": 10 * bandwidth, "t": 989e12}  # memory-bound, and at the BF16 peak


def test_roofline_precisions_keeps_its_legend_off_the_axes_and_their_label():
    points = {f"kernel {k}": (10.0 ** (k / 2), "FP32") for k in range(7)}
    fig = plots.roofline_precisions({"FP32": 67e12, "TF32": 494.5e12, "BF16": 989e12},
                                    3.35e12, points, "t")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    (legend,) = fig.legends
    box = legend.get_window_extent(renderer)
    ax = fig.axes[0]
    for artist in (ax, ax.xaxis.label):
        assert not box.overlaps(artist.get_window_extent(renderer)), artist
    assert box.y0 >= 0  # and inside the figure


@pytest.mark.parametrize("causal", [False, True])
def test_online_softmax_tiles_shows_the_tiles_a_kernel_visits(causal):
    image = plots.online_softmax_tiles(100, 16, causal).axes[0].get_images()[0].get_array()
    assert image.shape == (7, 7)
    expected = np.tril(np.ones((7, 7))) if causal else np.ones((7, 7))
    np.testing.assert_array_equal(np.asarray(image), expected)


def test_mma_fragments_shows_each_matrix_by_lane():
    owners = {name: mma.lanes(name) for name in "abc"}
    fig = plots.mma_fragments(owners)
    assert len(fig.axes) == 3
    for ax, lanes in zip(fig.axes, owners.values(), strict=True):
        np.testing.assert_array_equal(np.asarray(ax.get_images()[0].get_array()), lanes // 4)
        assert len(ax.texts) == lanes.size
    # every lane holds 8 elements of A, 4 of B and 4 of C, none twice
    for name, per_lane in (("a", 8), ("b", 4), ("c", 4)):
        assert (np.bincount(owners[name].ravel(), minlength=32) == per_lane).all()


def test_attention_bytes_plots_the_formula_and_traced_points():
    s_values = [32, 64]
    formula = {v: [sum(attention.traffic(v, 1, s, 8).values()) for s in s_values]
               for v in attention.VARIANTS}
    fig = plots.attention_bytes(s_values, formula, {"v2_fused": ([32], [formula["v2_fused"][0]])})
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == [
        *(f"{v} (formula)" for v in attention.VARIANTS), "v2_fused (traced)"]
    np.testing.assert_array_equal(lines[0].get_ydata(), formula["v1_three_kernels"])
