"""The backward pass across ranks (gpudl.parallel.data.timeline): gradients ready last layer
first, DDP's buckets and their all-reduces, DDP's gradients equal to one process's, and the
figure that draws the timeline."""

import matplotlib
import numpy as np
import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

matplotlib.use("Agg")

from gpudl import plots  # noqa: E402
from gpudl.parallel.data.timeline import expected_buckets, gradient_timeline  # noqa: E402
from gpudl.parallel.one_process import (  # noqa: E402
    TIMELINE_BATCH_PER_RANK,
    TIMELINE_DIMS,
    make_batch,
    make_mlp,
    mlp_gradients,
)

KIB, MIB = 1024, 1024 * 1024

# --- DDP's bucket assignment -----------------------------------------------------------------


def test_expected_buckets_by_hand():
    quarter = MIB // 4
    # a bucket closes once it holds at least the cap; a gradient above the cap is alone
    assert expected_buckets([100 * KIB, 100 * KIB, 100 * KIB, 10], 0.25) == [[0, 1, 2], [3]]
    assert expected_buckets([quarter, 1, MIB, 1], 0.25) == [[0], [1, 2], [3]]
    assert expected_buckets([quarter - 1], 0.25) == [[0]]
    # DDP's default: the first bucket closes at 1 MiB, the next ones at 25 MiB
    assert expected_buckets([MIB // 2, MIB // 2, 10 * MIB, 10 * MIB], None) == [[0, 1], [2, 3]]
    assert expected_buckets([MIB // 2, MIB // 2, 10 * MIB, 10 * MIB], 25) == [[0, 1, 2, 3]]


@settings(max_examples=50, deadline=None)
@given(
    numels=st.lists(st.integers(1, 300_000), min_size=1, max_size=12),
    cap_mb=st.sampled_from([None, 0.1, 0.25, 1.0]),
)
def test_expected_buckets_is_ddps_assignment(numels, cap_mb):
    """The C++ function DDP rebuilds its buckets with, on fp32 gradients in ready order."""
    tensors = [torch.empty(n) for n in numels]
    limits = ([dist._DEFAULT_FIRST_BUCKET_BYTES, 25 * MIB] if cap_mb is None
              else [int(cap_mb * MIB)])
    ddp, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [],
                                                      list(range(len(tensors))))
    assert expected_buckets([4 * n for n in numels], cap_mb) == ddp


@pytest.mark.parametrize(
    "sizes, cap, error",
    [([], 0.25, ValueError), ([10], 0, ValueError), ([10], -1.0, ValueError),
     ([10], float("inf"), ValueError), ([10], "0.25", TypeError), ([10], True, TypeError)],
)
def test_expected_buckets_rejects_bad_input(sizes, cap, error):
    with pytest.raises(error):
        expected_buckets(sizes, cap)


@pytest.mark.parametrize(
    "kwargs, error",
    [(dict(bucket_cap_mb=0), ValueError), (dict(bucket_cap_mb="1"), TypeError),
     (dict(dims=(8,)), ValueError), (dict(batch_per_rank=0), ValueError),
     (dict(batch_per_rank=2.0), TypeError)],
)
def test_gradient_timeline_rejects_bad_input_before_spawning(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        gradient_timeline(**kwargs)


def test_reference_gradients_depend_on_the_whole_batch():
    """What the DDP check can catch: one rank's samples alone give other gradients."""
    whole = mlp_gradients(2)
    assert all(torch.equal(whole[k], g) for k, g in mlp_gradients(2, ranks=[0, 1]).items())
    scale = max(g.abs().max().item() for g in whole.values())
    mine = mlp_gradients(2, ranks=[0])
    assert max((mine[k] - whole[k]).abs().max().item() for k in whole) > 1e-2 * scale
    assert make_batch(2, TIMELINE_DIMS, TIMELINE_BATCH_PER_RANK)[0].shape == (128, TIMELINE_DIMS[0])


# --- one backward pass, timed ----------------------------------------------------------------


def _sizes() -> dict[str, int]:
    return {name: p.numel() * 4 for name, p in make_mlp(TIMELINE_DIMS).named_parameters()}


@pytest.fixture(scope="module")
def quarter_mib():
    return gradient_timeline(world_size=2, bucket_cap_mb=0.25)


def _ready(result: dict) -> list[dict]:
    return [e for e in result["events"] if e["kind"] == "grad_ready"]


def _buckets(result: dict) -> list[dict]:
    return [e for e in result["events"] if e["kind"] == "allreduce"]


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_gradients_are_ready_last_layer_first(quarter_mib):
    for result in quarter_mib:
        ready = _ready(result)
        assert sorted(e["name"] for e in ready) == sorted(_sizes())  # each one, once
        layers = [e["layer"] for e in ready]
        assert layers == sorted(layers, reverse=True)
        assert layers[0] == len(TIMELINE_DIMS) - 2 and layers[-1] == 0
        times = [e["time_s"] for e in ready]
        assert times == sorted(times) and times[0] > 0


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_buckets_are_what_the_cap_implies(quarter_mib):
    sizes = _sizes()
    for result in quarter_mib:
        order = [e["name"] for e in _ready(result)]
        expected = [[order[i] for i in bucket]
                    for bucket in expected_buckets([sizes[n] for n in order], 0.25)]
        buckets = _buckets(result)
        assert [e["bucket"] for e in buckets] == list(range(len(expected)))
        assert [e["params"] for e in buckets] == expected
        assert [e["n_params"] for e in buckets] == [len(b) for b in expected]
        assert [e["bytes"] for e in buckets] == [sum(sizes[n] for n in b) for b in expected]
        # layers 6 to 3 (0.47 MiB) fill the first quarter MiB; layers 2, 1, 0 (0.5, 1 and
        # 2 MiB of weights) are a bucket each
        assert len(buckets) == 4
    rank0, rank1 = ([(e["bucket"], e["params"]) for e in _buckets(r)] for r in quarter_mib)
    assert rank0 == rank1


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_allreduces_start_when_their_bucket_is_ready_and_overlap_the_backward(quarter_mib):
    for result in quarter_mib:
        ready_at = {e["name"]: e["time_s"] for e in _ready(result)}
        buckets = _buckets(result)
        for e in buckets:
            assert e["start_s"] >= max(ready_at[n] for n in e["params"])
            assert e["start_s"] < e["end_s"] <= result["backward_s"]
        starts = [e["start_s"] for e in buckets]
        assert starts == sorted(starts)
        # overlap: the first bucket's all-reduce is under way while the first layers'
        # gradients are still being computed
        assert starts[0] < max(ready_at.values())


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_ddp_gradients_are_one_process_gradients(quarter_mib):
    for rank, result in enumerate(quarter_mib):
        assert (result["rank"], result["world_size"], result["backend"]) == (rank, 2, "gloo")
        assert result["grad_error"] < 1e-6


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_default_cap_has_a_small_first_bucket():
    """DDP's default: a first bucket of 1 MiB (layers 6 to 2), then 25 MiB (layers 1 and 0):
    two buckets, where one 25 MiB cap would give one."""
    result = gradient_timeline(world_size=2, bucket_cap_mb=None)[0]
    sizes = _sizes()
    order = [e["name"] for e in _ready(result)]
    expected = [[order[i] for i in bucket]
                for bucket in expected_buckets([sizes[n] for n in order], None)]
    assert [e["params"] for e in _buckets(result)] == expected
    assert len(expected) == 2 and sum(sizes[n] for n in expected[0]) >= MIB
    assert result["grad_error"] < 1e-6


# --- the figure ------------------------------------------------------------------------------


def test_timeline_plot_draws_the_events():
    events = [
        {"kind": "grad_ready", "name": "2.bias", "layer": 1, "numel": 4, "bytes": 16,
         "time_s": 0.001},
        {"kind": "grad_ready", "name": "2.weight", "layer": 1, "numel": 8, "bytes": 32,
         "time_s": 0.002},
        {"kind": "allreduce", "bucket": 0, "params": ["2.bias", "2.weight"], "n_params": 2,
         "bytes": 48_000, "start_s": 0.0025, "end_s": 0.006},
        {"kind": "grad_ready", "name": "0.weight", "layer": 0, "numel": 8, "bytes": 32,
         "time_s": 0.004},
        {"kind": "allreduce", "bucket": 1, "params": ["0.weight"], "n_params": 1, "bytes": 32_000,
         "start_s": 0.0045, "end_s": 0.007},
    ]
    ax = plots.gradient_timeline(events).axes[0]
    markers, last = ax.get_lines()
    np.testing.assert_allclose(markers.get_xdata(), [1.0, 2.0, 4.0])  # ms
    assert list(markers.get_ydata()) == [0, 1, 2]
    assert list(last.get_xdata()) == pytest.approx([4.0, 4.0])
    bars = ax.patches
    assert [b.get_x() for b in bars] == pytest.approx([2.5, 4.5])
    assert [b.get_width() for b in bars] == pytest.approx([3.5, 2.5])
    assert [b.get_y() + b.get_height() / 2 for b in bars] == pytest.approx([3, 4])
    assert [t.get_text() for t in ax.get_yticklabels()] == [
        "layer 1 bias", "layer 1 weight", "layer 0 weight",
        "bucket 0 (2 tensors, 48 kB)", "bucket 1 (1 tensor, 32 kB)",
    ]
