"""The point-to-point benchmark in gpudl.bench.allreduce, and its message check in
gpudl.parallel.messages."""

import pytest
import torch

from gpudl.bench.allreduce import format_table
from gpudl.bench.p2p import p2p_bandwidth, p2p_bandwidth_worker
from gpudl.parallel.messages import check_p2p, rank_input
from gpudl.parallel.spawn import default_backend, spawn


def test_check_p2p_catches_wrong_messages():
    good = rank_input(0, 5000)
    check_p2p(good, sender=0)
    wrong_element = good.clone()
    wrong_element[4321] += 1
    with_nan = good.clone()
    with_nan[0] = float("nan")
    for bad in (wrong_element, with_nan, rank_input(1, 5000), torch.zeros(5000)):
        with pytest.raises(RuntimeError, match="message from rank 0 is wrong"):
            check_p2p(bad, sender=0)


@pytest.mark.parametrize(
    "kwargs",
    [dict(sizes_bytes=[]), dict(sizes_bytes=[6]), dict(sizes_bytes=[-4]), dict(repeats=0),
     dict(warmup=-1)],
)
def test_p2p_bandwidth_rejects_bad_plans_before_spawning(kwargs):
    with pytest.raises(ValueError):
        p2p_bandwidth(**kwargs)


def test_p2p_needs_two_ranks():
    with pytest.raises(ValueError, match="at least 2 ranks"):
        p2p_bandwidth_worker(0, 1, [4096], 1, 0)  # raises before touching a process group


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_p2p_bandwidth():
    sizes = [4096, 1 << 16, (1 << 20) + 12]  # the last is not a power of 2
    rows = p2p_bandwidth(sizes, repeats=2, warmup=1)
    assert [row["size_bytes"] for row in rows] == sizes
    for row in rows:
        assert row["backend"] == default_backend(2)
        assert row["time_s"] > 0
        assert row["gbps"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
        assert row["best_gbps"] == pytest.approx(row["size_bytes"] / row["min_s"] / 1e9)
        assert row["best_gbps"] >= row["gbps"]
    table = format_table(rows).splitlines()
    assert table[0].split() == ["size", "backend", "time", "(us)", "bw", "(GB/s)", "fastest",
                                "(GB/s)"]
    assert len(table) == len(sizes) + 1


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_ranks_past_1_wait_and_return_nothing():
    rows, *others = spawn(p2p_bandwidth_worker, 3, [4096], 1, 0)
    assert len(rows) == 1 and others == [[], []]


@pytest.mark.distributed
@pytest.mark.timeout(180)
def test_the_allreduce_topic_measures_send_and_receive_too():
    from gpudl.bench import allreduce

    body = allreduce.run(world_sizes=(2,), sizes_bytes=[4096], repeats=1)
    assert [r["size_bytes"] for r in body["rows"]] == [4096]
    assert body["p2p_skipped"] is None and [r["size_bytes"] for r in body["p2p"]] == [4096]
    assert "p2p" not in allreduce.run(world_sizes=(2,), sizes_bytes=[4096], repeats=1,
                                      p2p=False)
