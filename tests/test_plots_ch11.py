"""Chapter 11's figures (gpudl.plots.ch11, ch11_context, and the ones the book draws when it
is built): each draws what its model decides (the router's counts and capacity, the rows the
all-to-alls carry in the order the expert-parallel layer computes them, the ring's chunks, the
cost model's step times, the layouts' work, the mesh's groups), and every book figure is
readable, fits the page and is shown by the chapter."""

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from gpudl import plots  # noqa: E402
from gpudl.estimate import ring_step_time  # noqa: E402
from gpudl.parallel.degrees import ParallelDegrees  # noqa: E402
from gpudl.parallel.experts import MOE_CONFIG, MoEConfig, MoELayer, moe_batch  # noqa: E402
from gpudl.plots.style import MAX_WIDTH_IN, MIN_FONT_PT, font_sizes  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _gid(fig, prefix):
    return [p for ax in fig.axes for p in ax.patches if (p.get_gid() or "").startswith(prefix)]


def test_the_routings_are_the_one_process_layers_groups():
    config = MoEConfig(experts=4)
    with torch.no_grad():
        out = MoELayer(config)(moe_batch(config, 8)[0], groups=2)
    routings = plots.rank_routings(config, 4, 2)
    for got, want in zip(routings, out.routings, strict=True):
        assert torch.equal(got.slots, want.slots) and torch.equal(got.counts, want.counts)


def test_expert_loads_draws_the_kept_and_the_dropped():
    counts, capacity = plots.router_counts(MOE_CONFIG, 64)
    assert sum(counts) == 128 and capacity == 16
    fig = plots.expert_loads({"skewed": counts}, capacity)
    kept = [b.get_height() for b in _gid(fig, "kept:")]
    dropped = [b.get_height() for b in _gid(fig, "dropped:")]
    assert kept == [min(n, 16) for n in counts]
    assert dropped == [max(n - 16, 0) for n in counts]
    assert counts[-3:] == [0, 0, 0]  # the skewed router starves the last experts


def test_moe_all_to_alls_draws_every_kept_row_at_its_experts_rank():
    config = MoEConfig(experts=4)
    routings = plots.rank_routings(config, 4, 2)
    fig = plots.moe_all_to_alls(config, 4, 2)
    rows = sum(len(r.sources) for r in routings)
    assert len(_gid(fig, "sent:")) == len(_gid(fig, "back:")) == len(_gid(fig, "experts:"))
    assert len(_gid(fig, "experts:")) == rows
    # rank q computes the rows of experts 2q and 2q + 1: as many as the ranks kept for them
    for q in range(2):
        held = sum(int(r.kept_counts[2 * q:2 * q + 2].sum()) for r in routings)
        assert len(_gid(fig, f"experts:{q}:")) == held
    crossing = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_gid() == "dispatch"]
    sent_away = sum(int(r.kept_counts[2 * (1 - q):2 * (2 - q)].sum())
                    for q, r in enumerate(routings))
    assert len(crossing) == 2 * sent_away  # each row that changes rank: there and back


def test_ring_attention_steps_holds_each_chunk_once_per_rank():
    fig = plots.ring_attention_steps(4)
    held = {}
    for p in _gid(fig, "held:"):
        _, r, t = p.get_gid().split(":")
        held[int(r), int(t)] = p.get_facecolor()
    for r in range(4):
        assert len({held[r, t] for t in range(4)}) == 4  # every chunk, once
    assert held[1, 1] == held[0, 0]  # rank 1 holds at step 1 what rank 0 held at step 0


def test_ring_timelines_overlap_takes_the_longer_and_waiting_the_sum():
    step = ring_step_time(512, 16, 128, 450e9, 989e12)
    fig = plots.ring_timelines({"short": step}, 4)
    ends = {}
    for p in fig.axes[0].patches:
        y = round(p.get_y() + p.get_height() / 2)
        ends[y] = max(ends.get(y, 0), p.get_x() + p.get_width())
    compute, transfer = step["compute_s"] * 1e6, step["transfer_s"] * 1e6
    assert ends[0] == pytest.approx(3 * max(compute, transfer) + compute)
    assert ends[1] == pytest.approx(3 * (compute + transfer) + compute)


def test_causal_balance_counts_each_ranks_scores():
    fig = plots.causal_balance(16, 4)
    contiguous = [b.get_height() for b in _gid(fig, "scores:contiguous")]
    balanced = [b.get_height() for b in _gid(fig, "scores:balanced")]
    assert contiguous == [10, 26, 42, 58]  # r c^2 + c (c + 1) / 2, c = 4
    assert balanced == [34] * 4 and sum(balanced) == sum(contiguous) == 16 * 17 // 2
    np.testing.assert_array_equal(plots.query_owners(8, 2, "balanced"),
                                  [0, 0, 1, 1, 1, 1, 0, 0])


def test_mesh_groups_are_the_row_major_meshes_groups():
    degrees = ParallelDegrees(data=2, tensor=2, pipeline=2, context=2, expert=4)
    groups = plots.mesh_groups(degrees)
    ranks = np.arange(16).reshape(2, 2, 2, 2)  # data, pipeline, context, tensor
    for axis, dim in enumerate(("data", "pipeline", "context", "tensor")):
        lines = np.moveaxis(ranks, axis, -1).reshape(-1, 2)  # the groups init_device_mesh makes
        for line in lines:
            assert len({groups[dim][r][0] for r in line}) == 1
            assert [groups[dim][r][1] for r in line] == [0, 1]
    # the experts: the 4 data x context ranks of each tensor and pipeline coordinate
    for t in range(2):
        for p in range(2):
            line = ranks[:, p, :, t].reshape(-1)
            assert len({groups["expert"][r][0] for r in line}) == 1
            assert [groups["expert"][r][1] for r in line] == [0, 1, 2, 3]
    fig = plots.parallel_mesh(degrees)
    assert len(_gid(fig, "expert:")) == 16


def test_every_chapter_11_figure_is_readable_fits_the_page_and_is_shown():
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "book" / "_ext"))
    import gpudl_figures

    figures = gpudl_figures._ch11_figures()
    text = next((root / "book").glob("ch11-*.md")).read_text()
    assert all(f"_generated/{name}" in text for name in figures)
    for name, draw in figures.items():
        fig = draw()
        assert fig.get_size_inches()[0] <= MAX_WIDTH_IN, name
        assert min(font_sizes(fig)) >= MIN_FONT_PT, name
        plt.close(fig)
