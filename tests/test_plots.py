"""The figures plot the numbers the package computes (nbval never compares images)."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from gpudl import plots  # noqa: E402
from gpudl.estimate import allreduce_time  # noqa: E402
from gpudl.hardware import occupancy  # noqa: E402
from gpudl.kernels import access_patterns  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    import matplotlib.pyplot as plt

    plt.close("all")


def test_occupancy_curves_plot_the_calculator():
    regs = [32, 64, 72, 128]
    fig = plots.occupancy_curves((8, 0), block_sizes=(256, 1024), registers=regs)
    lines = fig.axes[0].get_lines()
    assert [ln.get_label() for ln in lines] == ["256 threads/block", "1024 threads/block"]
    assert list(lines[0].get_ydata()) == [occupancy(256, r, 0, (8, 0)).occupancy for r in regs]
    # 1024 threads x 72 registers cannot launch: plotted as zero, not skipped
    assert list(lines[1].get_ydata()) == [1.0, 0.5, 0.0, 0.0]


def test_ring_model_plots_the_cost_model():
    fig = plots.ring_allreduce_model(1e9, 400, 10e-6, [2, 4, 8])
    bandwidth, with_latency, limit = fig.axes[0].get_lines()
    expected = [allreduce_time(1e9, n, 400e9) * 1e3 for n in (2, 4, 8)]
    np.testing.assert_allclose(bandwidth.get_ydata(), expected)
    assert (np.asarray(with_latency.get_ydata()) > expected).all()
    assert limit.get_ydata()[0] == pytest.approx(5.0)  # 2 S / B = 2 GB / 400 GB/s = 5 ms


def test_allreduce_plot_uses_the_rows():
    rows = [
        {"size_bytes": s, "world_size": 4, "backend": "gloo", "algbw_gbs": a, "busbw_gbs": a * 1.5}
        for s, a in ((1024, 0.1), (4096, 0.3))
    ]
    fig = plots.allreduce_bandwidth(rows, model=(0.0, 1.5e9))
    alg, bus, model = fig.axes[0].get_lines()
    np.testing.assert_allclose(alg.get_ydata(), [0.1, 0.3])
    np.testing.assert_allclose(bus.get_ydata(), [0.15, 0.45])
    # ring model without latency: algbw = B * N / (2 (N - 1)) = 1.5 * 4 / 6 = 1.0 GB/s
    np.testing.assert_allclose(model.get_ydata(), [1.0, 1.0])
    # with latency, small messages fall well below the bandwidth limit
    fig = plots.allreduce_bandwidth(rows, model=(1e-3, 1.5e9))
    small = fig.axes[0].get_lines()[2].get_ydata()[0]
    assert small == pytest.approx(1024 / allreduce_time(1024, 4, 1.5e9, 1e-3) / 1e9)


def test_time_bars_in_milliseconds():
    fig = plots.time_bars({"a": 1e-3, "b": 2e-3}, "t")
    assert [p.get_width() for p in fig.axes[0].patches] == pytest.approx([1.0, 2.0])


def test_sectors_plot_uses_the_report_rows():
    rows = [{"pattern": "stride 1", "sectors": 4.0, "ideal": 4.0},
            {"pattern": "stride 2", "sectors": 8.0, "ideal": 4.0}]
    fig = plots.sectors_per_request(rows)
    assert [p.get_height() for p in fig.axes[0].patches] == [4.0, 8.0]


def test_roofline_plot_places_points_on_the_roof_or_where_measured():
    fig = plots.roofline(10e12, 1e12, {"sum": (0.25, None), "copy": (0.0625, 3e10)}, "t")
    roof, _, on_roof, measured = fig.axes[0].get_lines()
    assert on_roof.get_ydata()[0] == pytest.approx(0.25e12)  # 0.25 flop/B x 1 TB/s
    assert measured.get_ydata()[0] == pytest.approx(3e10)
    assert max(roof.get_ydata()) == pytest.approx(10e12)


def test_state_bytes_plot_stacks_the_three_kinds():
    rows = [{"strategy": "replicated", "world_size": 2, "param_bytes": 4000, "grad_bytes": 4000,
             "adam_bytes": 8000},
            {"strategy": "fsdp2", "world_size": 2, "param_bytes": 2000, "grad_bytes": 2000,
             "adam_bytes": 4000}]
    fig = plots.state_bytes(rows)
    heights = [p.get_height() for p in fig.axes[0].patches]
    assert heights == [4.0, 2.0, 4.0, 2.0, 8.0, 4.0]  # kB: params, grads, Adam per bar


def test_hierarchy_plot_shows_each_level():
    levels = {
        "latency": {"shared": {"ns_per_hop": 20.0}, "HBM": {"ns_per_hop": 400.0}},
        "bandwidth": {"shared": {"gbs": 20000.0}, "HBM": {"gbs": 2000.0}},
        "register_file_gbs": 100000.0,
    }
    fig = plots.hierarchy(levels)
    left, right = fig.axes
    assert [p.get_height() for p in left.patches] == [20.0, 400.0]
    assert [p.get_height() for p in right.patches] == [20000.0, 2000.0, 100000.0]


def test_training_time_and_cost_draws_the_estimator_and_the_claim():
    from gpudl.estimate import training_time

    fig = plots.training_time_and_cost(1e20, 312e12, "A100", gpus=(1, 4), mfus=(0.5,),
                                       claimed=(4, 18))
    left, right = fig.get_axes()
    line, star = left.get_lines()
    assert list(line.get_ydata()) == [training_time(1e20, n, 312e12, 0.5) / 3600 for n in (1, 4)]
    assert list(star.get_xdata()) == [4] and list(star.get_ydata()) == [18]
    fractions, gpu_hours = right.get_lines()[0].get_data()
    assert gpu_hours[0] == training_time(1e20, 1, 312e12, fractions[0] / 100) / 3600


def test_memory_by_zero_stage_draws_one_bar_per_stage_and_case():
    fig = plots.memory_by_zero_stage({"a": [16, 7, 5.5, 4], "b": [120, 31.4, 16.6, 1.9]},
                                     {"A100": 80})
    ax = fig.get_axes()[0]
    assert [p.get_height() for p in ax.patches] == [16, 7, 5.5, 4, 120, 31.4, 16.6, 1.9]
    assert [line.get_ydata()[0] for line in ax.get_lines()] == [80]


# ------------------------------------------------------------------------------------------
# The figures the book draws when it is built (book/_ext/gpudl_sphinx.py)
# ------------------------------------------------------------------------------------------


def test_every_book_figure_has_readable_text_and_fits_the_page():
    import sys
    from pathlib import Path

    import matplotlib.pyplot as plt

    from gpudl.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, font_sizes

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
    import gpudl_figures

    figures = gpudl_figures._model_figures()
    assert len(figures) >= 17
    for name, draw in figures.items():
        fig = draw()
        assert fig.get_size_inches()[0] <= MAX_WIDTH_IN, name
        assert min(font_sizes(fig)) >= MIN_FONT_PT, name
        plt.close(fig)


def test_finish_raises_small_text():
    import matplotlib.pyplot as plt

    from gpudl.plots.style import MIN_FONT_PT, finish, font_sizes

    fig, ax = plt.subplots()
    ax.text(0, 0, "tiny", fontsize=5)
    ax.set_xlabel("x", fontsize=6)
    assert min(font_sizes(fig)) == 5
    assert min(font_sizes(finish(fig))) >= MIN_FONT_PT


def test_sm_diagram_draws_the_sm_limits():
    from gpudl.hardware import FP32_CORES_PER_SM, SM_LIMITS

    for cc in ((8, 0), (9, 0)):
        fig = plots.sm_diagram(cc)
        ax = fig.axes[0]
        lanes = [p for p in ax.patches if p.get_gid() == "fp32-lane"]
        assert len(lanes) == FP32_CORES_PER_SM[cc]
        texts = " ".join(t.get_text() for t in ax.texts)
        regs = SM_LIMITS[cc].registers // SM_LIMITS[cc].register_partitions
        assert f"{regs:,}" in texts and f"{SM_LIMITS[cc].shared_memory // 1024} KB" in texts


def test_memory_levels_come_from_the_spec_table():
    from gpudl.hardware import SPECS

    h100 = SPECS["H100 SXM"]
    fig = plots.memory_levels("H100 SXM", l2_mb=50)
    sizes = [p.get_width() for p in fig.axes[0].patches]
    bandwidths = [p.get_width() for p in fig.axes[1].patches]
    assert sizes == pytest.approx([132 * 65536 * 4, 132 * 228 * 1024, 50e6, 80e9])
    clock = h100.fp32_tflops * 1e12 / (2 * h100.cuda_cores)
    assert bandwidths[0] == pytest.approx(h100.cuda_cores * 12 * clock / 1e9)
    assert bandwidths[1] == pytest.approx(132 * 128 * clock / 1e9)  # 33.5 TB/s, as Ch. 2
    assert bandwidths[1] == pytest.approx(33.5e3, rel=0.01)
    assert bandwidths[2] == 0 and bandwidths[3] == h100.memory_bandwidth_gbs


def test_warp_sectors_draw_the_tracers_requests():
    rows = access_patterns.copy_requests(
        (("stride", 1), ("stride", 2), ("offset", 1), ("stride", 32)))
    assert [r["sectors"] for r in rows] == [4, 8, 5, 32]
    assert rows[1]["addresses"] == [8 * k for k in range(32)]
    fig = plots.warp_sectors(rows)
    for ax, row in zip(fig.axes, rows, strict=True):
        assert len(ax.patches) == row["sectors"]  # one shaded span per touched sector
        assert ax.get_title(loc="right") == f"{row['sectors']} sectors"


def test_bank_conflicts_draw_the_traced_tile_reads():
    words = access_patterns.tile_load_requests()
    assert sorted(w % 32 for w in words["padded"]) == list(range(32))
    assert {w % 32 for w in words["shared"]} == {words["shared"][0] % 32}
    fig = plots.bank_conflicts(words)
    shared, padded = fig.axes
    assert len(shared.patches) == 32 and max(p.get_y() for p in shared.patches) == 31
    assert {p.get_x() + p.get_width() / 2 for p in padded.patches} == set(range(32))
    assert shared.get_title() == "shared: 32-way conflict"


def test_matmul_tiling_draws_each_variants_tiles():
    from gpudl.kernels import matmul

    assert plots.tile_geometry("v5_register_2d")["rows"] == matmul.V5_BM
    fig = plots.matmul_tiling()
    for ax, variant in zip(fig.axes, ("v3_tiled", "v4_register_1d", "v5_register_2d"),
                           strict=True):
        g = plots.tile_geometry(variant)
        tile = next(p for p in ax.patches if p.get_gid() == "c-tile")
        a = next(p for p in ax.patches if p.get_gid() == "a-slab")
        assert (tile.get_width(), tile.get_height()) == (g["cols"], g["rows"])
        assert a.get_width() == g["depth"]
        dots = next(ln for ln in ax.get_lines() if ln.get_gid() == "thread-outputs")
        assert len(dots.get_xdata()) * g["threads"] == g["rows"] * g["cols"]
    with pytest.raises(ValueError, match="variant"):
        plots.tile_geometry("v1_naive")


def test_linear_dataflow_prints_the_layers_flops():
    from gpudl.kernels.nn import linear_backward_flops, linear_forward_flops

    texts = " ".join(t.get_text() for t in plots.linear_dataflow(32, 64, 32).axes[0].texts)
    assert f"forward: {linear_forward_flops(32, 64, 32):,} flops" in texts
    assert f"backward: {linear_backward_flops(32, 64, 32):,} flops" in texts


def test_optimizer_traffic_plots_the_counted_bytes():
    rows = [{"variant": "v1_unfused", "launches": 14, "global_bytes_per_param": 72.0,
             "shared_bytes_per_param": 0.0},
            {"variant": "v3_shared", "launches": 2, "global_bytes_per_param": 28.0,
             "shared_bytes_per_param": 56.0},
            {"variant": "v4_multi_tensor", "launches": 1, "global_bytes_per_param": 28.0,
             "shared_bytes_per_param": 0.0}]
    fig = plots.optimizer_traffic(rows)
    assert [p.get_height() for p in fig.axes[0].patches] == [72.0, 28.0, 28.0, 0.0, 56.0, 0.0]
    labels = {t.get_text() for t in fig.axes[0].texts}
    assert {"14 launches", "2 launches", "1 launch"} <= labels


def test_zero_partition_totals_are_the_zero_accounting():
    from gpudl.estimate import model_state_memory
    from gpudl.plots.ch06 import held_bytes

    fig = plots.zero_partition(4)
    held = held_bytes(fig)
    for stage in range(4):
        expected = model_state_memory(1000, n_gpus=4, zero_stage=stage) / 1000
        assert [held[(stage, r)] for r in range(4)] == pytest.approx([expected] * 4)


def test_the_master_weight_keeps_the_updates_bfloat16_rounds_away():
    from gpudl.plots.ch04 import weight_after_updates

    w = weight_after_updates(100, -1e-3)
    assert all(len(v) == 101 for v in w.values())
    assert set(w["bfloat16"]) == {1.0}  # each update is below half the spacing below 1
    assert w["float32"][-1] == pytest.approx(0.9, abs=1e-5)
    assert w["float32, read as bfloat16"][-1] == 0.8984375
    fig = plots.master_weight_updates()
    lines = {line.get_gid(): list(line.get_ydata()) for line in fig.axes[0].lines}
    assert lines == w


def test_ring_steps_label_sits_just_below_its_panels():
    fig = plots.ring_steps(4)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = min(ax.get_tightbbox(renderer).y0 for ax in fig.axes)  # with their tick labels
    label = fig._supxlabel.get_window_extent(renderer)
    assert label.y1 < panels  # below them
    assert panels - label.y1 < 0.3 * fig.dpi  # and not floating far below


def test_ring_schedule_follows_the_ring_rule():
    for n in (2, 3, 4, 5):
        states = plots.ring_schedule(n)
        assert len(states) == 2 * (n - 1) + 1
        after_rs = states[n - 1]
        # after the reduce-scatter rank r holds the complete sum of chunk r + 1
        assert all(after_rs[r, (r + 1) % n] == n for r in range(n))
        assert (states[-1] == n).all()
    fig = plots.ring_steps(4)
    assert [ax.get_title() for ax in fig.axes] == ["start", "RS 1", "RS 2", "RS 3", "AG 1",
                                                   "AG 2", "AG 3"]


def test_bucket_timeline_is_the_step_time_model():
    from gpudl.estimate import data_parallel_step_time

    for n in (1, 3, 10):
        rows = plots.bucket_timeline(0.15, 100e6, 4, 2e9, 50e-6, n_buckets=n)
        backward = 2 / 3 * 0.15
        step = 0.15 + max(0.0, rows[-1][2] - backward)
        assert step == pytest.approx(data_parallel_step_time(0.15, 100e6, 4, 2e9, 50e-6,
                                                             n_buckets=n))
        assert all(start >= ready for ready, start, _ in rows)
    fig = plots.ddp_overlap(bucket_counts=(1, 4))
    bars = [p for p in fig.axes[0].patches if p.get_gid() == "allreduce:4"]
    assert len(bars) == 4


def test_tensor_parallel_split_is_drawn_to_scale():
    fig = plots.tensor_parallel_split(hidden=32, ffn=64, degree=4)
    ax = fig.axes[0]
    a = [p for p in ax.patches if (p.get_gid() or "").startswith("A:")]
    b = [p for p in ax.patches if (p.get_gid() or "").startswith("B:")]
    assert len(a) == len(b) == 4
    assert {round(p.get_width() / p.get_height(), 6) for p in a} == {round(16 / 32, 6)}
    assert {round(p.get_height() / p.get_width(), 6) for p in b} == {round(16 / 32, 6)}
    assert sum(1 for p in ax.patches if (p.get_gid() or "").startswith("allreduce")) == 2
    with pytest.raises(ValueError, match="divide"):
        plots.tensor_parallel_split(32, 64, 3)


def test_time_bars_are_linear_and_labelled_with_speed_ups():
    fig = plots.time_bars({"slow": 4e-3, "fast": 1e-3}, "t")
    ax = fig.axes[0]
    assert ax.get_xscale() == "linear"
    assert [t.get_text().strip() for t in ax.texts] == ["4 ms (1.0x)", "1 ms (4.0x)"]


def _gids(fig, prefix=""):
    return [p.get_gid() for p in fig.axes[0].patches
            if p.get_gid() and p.get_gid().startswith(prefix)]


def test_gradient_buckets_draw_each_gradient_where_its_view_lies():
    from gpudl.parallel.data import GradientBuckets, Setup, expected_buckets
    from gpudl.parallel.one_process import make_mlp

    fig = plots.gradient_buckets(Setup.dims, Setup.bucket_cap_mb)
    model = make_mlp(Setup.dims)
    names = {id(p): n for n, p in model.named_parameters()}
    buckets = GradientBuckets(model.parameters(), Setup.bucket_cap_mb, world_size=1)
    expected = [f"{names[id(p)]}:{buckets.slot_of[id(p)].storage_offset()}:{p.numel()}"
                for bucket in buckets.buckets for p in bucket]
    assert _gids(fig) == expected
    # the lab's MLP: the last two layers' 4 tensors, then the first layer's 2 (Chapter 5)
    assert [g.split(":")[0] for g in expected] == ["4.bias", "4.weight", "2.bias", "2.weight",
                                                   "0.bias", "0.weight"]
    sizes = [p.numel() * 4 for p in model.parameters()][::-1]
    assert [len(b) for b in buckets.buckets] == [
        len(b) for b in expected_buckets(sizes, Setup.bucket_cap_mb)] == [4, 2]
    widths = {p.get_gid(): p.get_width() for p in fig.axes[0].patches if p.get_gid()}
    assert widths["2.weight:164:1024"] == 1024  # to scale, in elements


def test_zero_shards_cut_the_padded_buffer_into_equal_shards():
    from gpudl.parallel.one_process import ZERO_DIMS
    from gpudl.parallel.zero import shard_range

    fig = plots.zero_shards(ZERO_DIMS, 4)
    assert _gids(fig, "shard:") == [f"shard:{r}:{a}:{b}" for r in range(4)
                                    for a, b in [shard_range(6_859, 4, r)]]
    assert _gids(fig, "shard:")[-1] == "shard:3:5145:6860"
    assert _gids(fig, "padding:") == ["padding:6859:1"]
    tensors = [g for g in _gids(fig) if not g.startswith(("shard:", "padding:"))]
    assert sum(int(g.split(":")[2]) for g in tensors) == 6_859
    with pytest.raises(ValueError, match="only padding"):
        plots.zero_shards((2, 1), 4)  # 3 parameters: rank 3 of 4 would hold padding only

def test_warp_footprints_are_the_traced_words_and_sectors():
    from gpudl.trace import on_simulator

    naive, coalesced = (on_simulator(plots.warp_footprint, v, 32, 8, 32)
                        for v in ("v1_naive", "v2_coalesced"))
    assert naive["sector_count"] == {"a": 32, "b": 1, "c": 32}  # as Chapter 3 counts them
    assert coalesced["sector_count"] == {"a": 1, "b": 4, "c": 4}
    assert naive["words"]["a"] == [8 * r for r in range(32)]  # a column of A, rows 8 apart
    assert naive["words"]["c"] == [32 * r for r in range(32)]  # a column of C
    assert coalesced["words"]["c"] == list(range(32)) and set(coalesced["words"]["a"]) == {0}
    assert len(naive["sectors"]["a"]) == 32 * 8  # every row of A (8 floats) is one sector
    fig = plots.warp_footprints([naive, coalesced])
    for ax in fig.axes:
        assert {p.get_gid() for p in ax.patches} == {"a", "b", "c"}
    assert "32 sectors" in " ".join(t.get_text() for t in fig.axes[0].texts)


def test_register_tile_draws_each_thread_s_strided_outputs_and_loads():
    from gpudl.kernels import matmul
    from gpudl.trace import on_simulator

    tile = on_simulator(plots.thread_registers, (0, 89))
    rows, cols = matmul.V5_THREAD_ROWS, matmul.V5_THREAD_COLS
    for thread in (0, 89):
        tr, tc = divmod(thread, cols)
        f = tile["threads"][thread]
        assert f["c"] == sorted((tr + rows * i) * matmul.V5_BN + tc + cols * j
                                for i in range(matmul.V5_TM) for j in range(matmul.V5_TN))
        assert f["a_first"] == [(tr + rows * i) * matmul.V5_BK for i in range(matmul.V5_TM)]
        assert f["b_first"] == [tc + cols * j for j in range(matmul.V5_TN)]
    fig = plots.register_tile(tile)
    dots = {ln.get_gid(): ln for ln in fig.axes[0].get_lines()}
    assert len(dots["outputs-0"].get_xdata()) == matmul.V5_TM * matmul.V5_TN
    assert sum(p.get_gid() == "accumulator" for p in fig.axes[1].patches) == 64


def test_every_adam_variant_is_inside_its_bound_and_the_wrong_steps_outside():
    from gpudl.kernels.optim import VARIANTS
    from gpudl.plots.ch04 import WRONG_STEPS

    ratios = plots.adam_error_ratios(64)
    for name in (*VARIANTS, "torch.optim.Adam"):
        assert 0 < max(ratios[name].values()) < 1, name
    assert ratios[WRONG_STEPS[0]]["p"] > 1 and ratios[WRONG_STEPS[1]]["m"] > 1
    fig = plots.error_within_bound(ratios)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert labels == list(ratios)
    assert [t.get_text() for t in fig.axes[0].texts] == [
        f"{max(r.values()):.2g}" for r in ratios.values()]


def test_adam_thread_work_shows_the_traced_accesses_of_one_thread():
    from gpudl.trace import on_simulator

    fused, shared = (on_simulator(plots.adam_thread_footprint, v, 64, 37)
                     for v in ("v2_fused", "v3_shared"))
    assert sorted(a[1:] for a in fused["accesses"]) == sorted(
        [(x, "load", 37) for x in "pgmv"] + [(x, "store", 37) for x in "pmv"])
    kinds = [a[0] for a in shared["accesses"]]
    assert kinds.count("global") == 7 and kinds.count("shared") == 14
    assert {a[3] for a in shared["accesses"] if a[0] == "shared"} == {
        37 % shared["threads_per_block"]}
    assert (fused["barriers"], shared["barriers"]) == (0, 2)
    fig = plots.adam_thread_work([fused, shared])
    marked = {p.get_gid() for p in fig.axes[1].patches if p.get_gid()}
    assert marked == {"g:load", *(f"{x}:load+store" for x in ("p", "m", "v", "sp", "sg", "sm",
                                                              "sv"))}


def test_the_multi_tensor_launch_walks_the_flat_buffer_in_passes_of_the_grid():
    from gpudl.trace import on_simulator

    layout = on_simulator(plots.grid_stride_layout, [(64, 32), (32,), (32, 10), (10,)])
    assert layout["offsets"] == [0, 2048, 2080, 2400]
    width = layout["blocks"] * layout["threads_per_block"]
    assert layout["pass"] == [e // width for e in range(2410)]
    assert layout["thread"] == [e % width for e in range(2410)]
    fig = plots.multi_tensor_layout(layout, ["w0", "b0", "w1", "b1"])
    image = fig.axes[0].get_images()[0].get_array()
    assert image.shape == (max(layout["pass"]) + 1, width) and image[0, 0] == 1
    with pytest.raises(ValueError, match="names"):
        plots.multi_tensor_layout(layout, ["w0"])


def test_bf16_bits_are_the_kernel_s_rounding_and_torch_s():
    import torch

    from gpudl.trace import on_simulator

    for value in (0.9000012874603271, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -3.5):
        r = on_simulator(plots.bf16_rounding, value)
        expected = torch.tensor([value]).to(torch.bfloat16)
        assert r["bf16_value"] == expected.item()
        assert r["bf16_bits"] == expected.view(torch.int16).item() & 0xFFFF
    fig = plots.bf16_bits(on_simulator(plots.bf16_rounding, 0.9000012874603271))
    texts = " ".join(t.get_text() for t in fig.axes[0].texts)
    assert "0x667C" in texts and "rounded down" in texts

def _book_figures_module():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
    import gpudl_figures

    return gpudl_figures


def test_tile_banks_colour_each_word_by_bank_and_outline_the_traced_column_read():
    from gpudl.kernels import transpose

    tiles = _book_figures_module().tile_reads()
    assert [t["width"] for t in tiles.values()] == [transpose.TILE, transpose.PADDED]
    fig = plots.tile_banks(tiles)
    shared, padded = fig.axes[:2]
    banks = [ax.images[0].get_array() for ax in (shared, padded)]
    assert (banks[0][:, 0] == 0).all() and sorted(banks[1][:, 0]) == list(range(32))
    for ax, tile in zip((shared, padded), tiles.values(), strict=True):
        read = [p for p in ax.patches if p.get_gid() == "read"]
        # the outlined words are the traced ones: column 0, rows 0 to 31
        assert sorted((round(p.get_y() + 0.5), round(p.get_x() + 0.5)) for p in read) == [
            divmod(w, tile["width"]) for w in sorted(tile["read"])] == [(r, 0) for r in range(32)]
        assert len([p for p in ax.patches if p.get_gid() == "padding"]) == tile["width"] - 32
    assert "32-way conflict" in shared.get_title() and "conflict-free" in padded.get_title()


def test_reduction_stages_follow_the_kernel_s_loops():
    from gpudl.kernels import reduction

    fig = plots.reduction_stages(reduction.THREADS_PER_BLOCK, reduction.WARP)
    top, bottom = fig.axes
    assert [p.get_width() for p in top.patches if p.get_gid() == "shared"] == [256, 128, 64]
    counting = [0] * 6
    for p in bottom.patches:
        if p.get_gid() == "counts":
            counting[round(p.get_y() + 0.3)] += 1
    assert counting == [32, 16, 8, 4, 2, 1]  # words t, t + 32, then shfl_down 16, 8, 4, 2, 1
    assert [t.get_text() for t in bottom.get_yticklabels()][1:] == [
        f"+ shfl_down {o}" for o in (16, 8, 4, 2, 1)]
    with pytest.raises(ValueError, match="power of two"):
        plots.reduction_stages(96, 32)
    with pytest.raises(ValueError, match="at least 2 \\* warp"):
        plots.reduction_stages(32, 32)


def test_block_loads_draw_the_traced_elements_of_each_thread():
    from gpudl.kernels import memory

    loads = _book_figures_module().traced_block_loads()
    k_loads, vector4 = loads["copy_v2_k_loads"], loads["copy_v3_vector4"]
    assert len(k_loads) == len(vector4) == memory.THREADS_PER_BLOCK
    # thread t: K loads of one element, a block's width apart; two vectors of four floats
    assert k_loads[5] == [[5 + 256 * k] for k in range(memory.K)]
    assert vector4[5] == [[20, 21, 22, 23], [1044, 1045, 1046, 1047]]
    fig = plots.block_loads(loads)
    for ax, threads in zip(fig.axes, loads.values(), strict=True):
        cells = ax.images[0].get_array()  # a row per warp, NaN (masked) where it loads nothing
        assert cells.shape == (8, 2048)
        assert ((~np.ma.getmaskarray(cells)).sum(axis=0) == 1).all()  # every element, once
        # element 808: thread 40 (warp 1), load 3 of copy_v2_k_loads; vector 202, so thread
        # 202 (warp 6), load 0 of copy_v3_vector4
        warp, load = (1, 3) if threads is k_loads else (6, 0)
        assert cells[warp, 808] == load
        marked = [p for p in ax.patches if p.get_gid() == "thread 0"]
        assert [round(p.get_x() + 0.5) for p in marked] == [load[0] for load in threads[0]]
    with pytest.raises(ValueError, match="thread 1 has 1 loads"):
        plots.block_loads({"k": [[[0], [1]], [[2]]]})
