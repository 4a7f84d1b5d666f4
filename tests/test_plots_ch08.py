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


def test_mma_fragments_colours_each_element_by_its_register():
    owners = {name: mma.lanes(name) for name in "abc"}
    registers = {name: plots.fragment_registers(name) for name in "abc"}
    # the PTX ISA's layout: A's registers a0..a3 hold rows g, g + 8 of columns 2t.., then
    # 2t + 8..; B's b0, b1 rows 2t.. and 2t + 8..; C's c0..c3 (g, 2t), (g, 2t + 1), (g + 8, ..)
    rows, cols = np.indices((16, 16))
    np.testing.assert_array_equal(registers["a"], 2 * (cols >= 8) + (rows >= 8))
    rows, cols = np.indices((16, 8))
    np.testing.assert_array_equal(registers["b"], (rows >= 8).astype(int))
    np.testing.assert_array_equal(registers["c"], 2 * (rows >= 8) + cols % 2)
    fig = plots.mma_fragments(owners, registers)
    for ax, name in zip(fig.axes, "abc", strict=True):
        np.testing.assert_array_equal(np.asarray(ax.get_images()[0].get_array()),
                                      registers[name])
    with pytest.raises(ValueError, match="registers"):
        plots.mma_fragments(owners, {**registers, "a": registers["b"]})


@pytest.mark.simulator_only
def test_attention_footprints_are_what_each_kernel_touches():
    ty, tx = plots.ch08_layouts.MARKED
    scores, softmax, pv = plots.attention_footprints("v1_three_kernels", 36, 4)
    written = np.argwhere(scores["out"][1] == 3).tolist()
    assert written == [[ty, attention.TILE + tx]]  # block (1, 0) holds keys 16..31
    block = scores["out"][1] > 0
    assert block[:16, 16:32].all() and block.sum() == 16 * 16
    # one warp per row; lane tx reads every 32nd score of its row
    assert np.argwhere(softmax["out"][1] >= 2).tolist() == [[ty, tx], [ty, tx + 32]]
    assert (softmax["out"][1][ty] > 0).all() and softmax["out"][1].sum() > 0
    assert np.argwhere(pv["out"][1] == 3).tolist() == [[ty, tx]]
    tile, fused_scores, fused_values = 16, *plots.attention_footprints("v2_fused", 17, 20)
    q_s, k_s, x_s = (fused_scores[part][1] for part in ("left", "top", "out"))
    assert k_s.shape == (20 + 1, tile)  # the padded key tile, drawn transposed
    assert (q_s[ty] >= 2).all() and (k_s[:20, tx] >= 2).all() and (x_s[ty] >= 2).all()
    assert x_s[ty, tx] == 3 and (x_s[np.arange(tile) != ty] <= 1).all()
    v_s, o = fused_values["top"][1], fused_values["out"][1]
    assert (v_s[:, [tx, tx + tile]] >= 2).all()  # d = 20: columns tx and tx + 16
    assert np.argwhere(o == 3).tolist() == [[ty, tx], [ty, tx + tile]]


@pytest.mark.simulator_only
def test_tensor_core_footprints_give_each_warp_its_tile():
    from gpudl.kernels import tensor_core_matmul as tc

    (v1,) = plots.tensor_core_footprints("v1_warp_tiles")
    written = np.argwhere(v1["out"][1] == 3)
    # warp 1 of block (1, 1): rows 16..31, the second 8 of the block's 32 columns
    assert {tuple(x) for x in written} == {(r, c) for r in range(16, 32) for c in range(40, 48)}
    (v2,) = plots.tensor_core_footprints("v2_shared_tiles")
    assert (v2["out"][1][:tc.WM, tc.WN:] == 3).all() and (v2["out"][1] == 3).sum() == 32 * 32
    assert (v2["left"][1][:tc.WM] >= 2).all() and (v2["top"][1][:, tc.WN:] >= 2).all()


def test_kernel_footprints_draws_every_array_of_every_panel():
    levels = np.array([[0, 1], [2, 3]], np.int8)
    panels = [{"title": "a", "out": ("o", levels), "left": ("l", levels[:, :1])},
              {"title": "b", "out": ("o", levels), "top": ("t", levels[:1])}]
    fig = plots.kernel_footprints(panels, "t", unit="warp")
    assert [len(ax.get_images()) for ax in fig.axes] == [2, 2]
    np.testing.assert_array_equal(fig.axes[0].get_images()[0].get_array(), levels)
    assert "written by the warp" in [t.get_text() for t in fig.legends[0].get_texts()]


def test_online_softmax_steps_end_at_the_log_sum_exp():
    x = np.random.default_rng(1).standard_normal(40) * 3
    steps = plots.online_softmax_steps(x, 16)
    assert [(s["start"], s["stop"]) for s in steps] == [(0, 16), (16, 32), (32, 40)]
    assert steps[-1]["m"] + np.log(steps[-1]["l"]) == pytest.approx(np.log(np.exp(x).sum()))
    for before, after in zip(steps, steps[1:], strict=False):
        assert after["alpha"] == pytest.approx(np.exp(before["m"] - after["m"]))
        assert after["kept"] == pytest.approx(after["alpha"] * before["l"])
    assert steps[1]["m"] > steps[0]["m"] and steps[1]["alpha"] < 1  # the lab's rescaled tile
    fig = plots.online_softmax_row(x, 16)
    running_max = [c for c in fig.axes[0].collections if c.get_segments()]
    assert [seg[0][0][1] for seg in (c.get_segments() for c in running_max)] == [
        s["m"] for s in steps]


def test_observed_errors_stay_within_the_bound_and_are_drawn():
    cases = [(5, 3, False, 1.0), (7, 2, True, 4.0)]
    ratios = plots.observed_errors(cases)
    float32 = [v for v in attention.VARIANTS if attention.precision(v) == "float32"]
    assert list(ratios) == [*float32, "torch SDPA"]
    assert all(len(values) == 2 and max(values) < 1 for values in ratios.values())
    fig = plots.attention_errors(["a", "b"], ratios, "t")
    worst = max(max(values) for values in ratios.values())
    assert f"{worst:.2g}" in [t.get_text() for t in fig.axes[0].texts]
