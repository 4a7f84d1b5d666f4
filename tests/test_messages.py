"""gpudl.parallel.messages (messages and checks), their bandwidth benchmark in
gpudl.bench.allreduce (the all-reduce, and the all-to-all with its bar), and the ring
all-reduce model in gpudl.estimate."""

from pathlib import Path

import pytest
import torch

import gpudl.bench as bench
from gpudl.bench import allreduce
from gpudl.bench.allreduce import (
    allreduce_bandwidth,
    collective_bandwidth_worker,
    format_table,
    main,
)
from gpudl.bench.message_sizes import default_sizes
from gpudl.bench.timing import Timing
from gpudl.estimate import allreduce_bytes_per_rank, allreduce_time
from gpudl.parallel.messages import (
    check_all_to_all,
    check_allreduce,
    expected_all_to_all,
    expected_sum,
    rank_input,
)
from gpudl.parallel.spawn import default_backend, run_under_torchrun

ROOT = Path(__file__).resolve().parents[1]


# --- the cost model --------------------------------------------------------------------------

def test_allreduce_bytes_per_rank_by_hand():
    assert allreduce_bytes_per_rank(1000, 1) == 0  # nothing to exchange
    assert allreduce_bytes_per_rank(1000, 2) == 1000  # 2 * 1/2
    assert allreduce_bytes_per_rank(1000, 4) == 1500  # 2 * 3/4
    assert allreduce_bytes_per_rank(0, 8) == 0


def test_allreduce_time_by_hand():
    assert allreduce_time(1e9, 4, 1e9) == pytest.approx(1.5)
    # 2 * 3 = 6 steps of 10 us each on top
    assert allreduce_time(1e9, 4, 1e9, latency=1e-5) == pytest.approx(1.5 + 6e-5)
    # 1 GiB over 8 ranks at 100 GB/s: 1.75 * 1073741824 / 1e11 s
    assert allreduce_time(2**30, 8, 100e9) == pytest.approx(0.01879048192)
    assert allreduce_time(2**30, 1, 100e9, latency=1.0) == 0


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(n_bytes=1, world_size=0, bandwidth=1), ValueError),
        (dict(n_bytes=1, world_size=2.0, bandwidth=1), TypeError),
        (dict(n_bytes=-1, world_size=2, bandwidth=1), ValueError),
        (dict(n_bytes="1", world_size=2, bandwidth=1), TypeError),
        (dict(n_bytes=1, world_size=2, bandwidth=0), ValueError),
        (dict(n_bytes=1, world_size=2, bandwidth=float("nan")), ValueError),
        (dict(n_bytes=1, world_size=2, bandwidth=1, latency=-1e-6), ValueError),
    ],
)
def test_allreduce_time_rejects_bad_input(kwargs, error):
    with pytest.raises(error):
        allreduce_time(**kwargs)


# --- the correctness check the worker applies ------------------------------------------------

@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_expected_sum_is_the_sum_of_the_inputs(world_size):
    numel = 3000  # not a multiple of 1024
    total = sum(rank_input(rank, numel).double() for rank in range(world_size))
    assert torch.equal(expected_sum(world_size, numel).double(), total)
    check_allreduce(total.float(), world_size)


def test_check_allreduce_catches_wrong_results():
    good = expected_sum(4, 5000)
    check_allreduce(good, 4)
    wrong_element = good.clone()
    wrong_element[1234] += 1
    with_nan = good.clone()
    with_nan[0] = float("nan")
    missing_a_rank = expected_sum(3, 5000)
    not_reduced = rank_input(2, 5000)
    for bad in (wrong_element, with_nan, missing_a_rank, not_reduced):
        with pytest.raises(RuntimeError, match="all-reduce over 4 ranks is wrong"):
            check_allreduce(bad, 4)


# --- the benchmark ---------------------------------------------------------------------------

def test_default_sizes_fit_the_backend():
    sizes = default_sizes()
    assert sizes[0] == 4096 and all(size % 4 == 0 for size in sizes)
    assert sizes[-1] == (256 << 20 if default_backend(2) == "nccl" else 4 << 20)
    assert default_sizes(10**6)[-1] == 4 << 20  # never a GPU per rank: gloo sizes


@pytest.mark.parametrize(
    "kwargs",
    [dict(sizes_bytes=[]), dict(sizes_bytes=[6]), dict(sizes_bytes=[0]), dict(repeats=0),
     dict(warmup=-1)],
)
def test_allreduce_bandwidth_rejects_bad_plans_before_spawning(kwargs):
    with pytest.raises(ValueError):
        allreduce_bandwidth(**kwargs)


@pytest.mark.distributed
@pytest.mark.timeout(120)
@pytest.mark.parametrize("world_size", [2, 4])
def test_allreduce_bandwidth(world_size):
    sizes = [4096, 1 << 16, 1 << 20]
    rows = allreduce_bandwidth(world_size, sizes, repeats=2, warmup=1)
    assert [row["size_bytes"] for row in rows] == sizes
    for row in rows:
        assert row["world_size"] == world_size
        assert row["time_s"] == row["median_s"] > 0 and row["runs"] == 2
        assert row["algbw_gbs"] == pytest.approx(row["size_bytes"] / row["time_s"] / 1e9)
        assert row["busbw_gbs"] == pytest.approx(
            row["algbw_gbs"] * 2 * (world_size - 1) / world_size
        )
    assert len(format_table(rows).splitlines()) == len(sizes) + 1


def test_main_runs_as_a_single_process(monkeypatch, capsys):
    monkeypatch.delenv("RANK", raising=False)
    main(["--repeats", "1", "--warmup", "0"])
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if "busbw (GB/s)" in line)
    assert len(lines) - header == len(default_sizes()) + 1  # the table comes last


@pytest.mark.distributed
@pytest.mark.timeout(120)
def test_torchrun_runs_the_benchmark_and_only_rank_0_prints(torchrun):
    done = torchrun("gpudl.bench.allreduce", "--repeats", "1", "--warmup", "0", timeout=90)
    lines = done.stdout.splitlines()
    assert sum("busbw (GB/s)" in line for line in lines) == 1  # one table: rank 0's
    rows = [line.split() for line in lines if line.split()[2:3] == ["2"]]
    assert len(rows) == len(default_sizes())


# --- the all-to-all (Chapter 11) ---------------------------------------------------------------

def test_expected_all_to_all_holds_each_ranks_part_for_this_rank():
    numel, world_size = 12, 3
    for rank in range(world_size):
        parts = [rank_input(sender, numel)[4 * rank:4 * (rank + 1)] for sender in range(3)]
        assert torch.equal(expected_all_to_all(rank, world_size, numel), torch.cat(parts))
    with pytest.raises(ValueError, match=r"numel \(12\) must be divisible by the world size"):
        expected_all_to_all(0, 5, 12)
    wrong = expected_all_to_all(1, 3, 12).clone()
    wrong[5] += 1
    with pytest.raises(RuntimeError, match="all-to-all over 3 ranks, rank 1 is wrong at 1 of "
                                           "12 elements; the first is index 5"):
        check_all_to_all(wrong, 1, 3)
    with pytest.raises(RuntimeError, match="is wrong"):
        check_all_to_all(rank_input(1, 12), 1, 3)  # not exchanged at all


def test_one_process_times_and_checks_both_collectives(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    measured = run_under_torchrun(collective_bandwidth_worker, [4096, 1 << 14], 1, 0)
    assert [(m["collective"], m["size_bytes"]) for m in measured] == [
        ("all_reduce", 4096), ("all_to_all", 4096), ("all_reduce", 1 << 14),
        ("all_to_all", 1 << 14)]
    with pytest.raises(ValueError, match="an all-to-all sends each of the 3 ranks an equal "
                                         "part: 4100 is not a multiple of 12 bytes"):
        collective_bandwidth_worker(0, 3, [4100], 1, 0)


def test_the_all_to_all_bar_holds_its_bus_bandwidth_to_0_7_of_the_all_reduces(monkeypatch):
    """The bar compares times at one size: the all-reduce sends 2 (N - 1) / N of the message
    per rank, the all-to-all (N - 1) / N, so a bus bandwidth ratio of 0.7 is a time ratio of
    1 / 1.4."""
    monkeypatch.setattr(bench.backend, "is_simulator", lambda: False)

    def rows(all_to_all_s):
        def one(name, seconds):
            return bench.row(name, Timing((seconds,), "cuda-events", True), 64 << 20)
        return [one("all_reduce 64 MiB x4", 1.0), one("all_to_all 64 MiB x4", all_to_all_s)]

    for seconds, verdict in ((0.7, True), (1 / 1.4, True), (0.75, False)):
        [bar] = bench.evaluate_bars(allreduce.BARS, rows(seconds), ws=4)
        busbw = 3 / 4 * (64 << 20) / seconds / (2 * 3 / 4 * (64 << 20) / 1.0)
        assert bar["verdict"] is verdict and (busbw >= 0.7 - 1e-12) is verdict
