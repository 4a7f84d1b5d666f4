"""The figures plot the numbers the package computes (nbval never compares images)."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from gpudl import plots  # noqa: E402
from gpudl.estimate import allreduce_time  # noqa: E402
from gpudl.hardware import occupancy  # noqa: E402


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
