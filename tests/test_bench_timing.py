"""gpudl.bench.timing: the Timing type, device/wall-clock timers, and bandwidth and flop rates."""

import time

import pytest

from gpudl import backend
from gpudl.bench.timing import Timing, gbps, gflops, time_cpu, time_cuda


def test_rates_by_hand():
    assert gbps(3e9, 1.5) == pytest.approx(2.0)
    assert gbps(12 * 2**20, 1e-3) == pytest.approx(12.582912)
    assert gflops(2e9, 0.5) == pytest.approx(4.0)
    assert gflops(0, 1.0) == 0.0


@pytest.mark.parametrize("rate", [gbps, gflops])
@pytest.mark.parametrize(
    ("amount", "seconds", "error", "match"),
    [
        (-1, 1.0, ValueError, ">= 0"),
        (1, 0.0, ValueError, "> 0"),
        (1, -2.0, ValueError, "> 0"),
        (1, float("nan"), ValueError, "finite"),
        (float("inf"), 1.0, ValueError, "finite"),
        ("1", 1.0, TypeError, "real number, got str"),
        (1, None, TypeError, "real number, got NoneType"),
        (True, 1.0, TypeError, "real number, got bool"),
    ],
)
def test_rates_reject_bad_input(rate, amount, seconds, error, match):
    with pytest.raises(error, match=match):
        rate(amount, seconds)


def test_timing_statistics_and_text():
    timing = Timing((0.003, 0.001, 0.002), "cuda-events", True)
    assert (timing.median, timing.min, timing.max) == (0.002, 0.001, 0.003)
    assert str(timing) == "median 2.000 ms (min 1.000, max 3.000, 3 runs, cuda-events)"
    sim = Timing((0.002,), "wall-clock", False)
    assert str(sim).endswith("(simulator: wall clock, meaningless for GPU speed)")


def test_time_cuda_calls_and_marks_the_backend():
    calls = []
    timing = time_cuda(calls.append, 1, warmup=2, repeats=4)
    assert len(calls) == 6
    assert len(timing.samples) == 4
    assert all(s >= 0 for s in timing.samples)
    calls.clear()
    assert len(time_cuda(calls.append, 1, warmup=0, repeats=2, inner=3).samples) == 2
    assert len(calls) == 6
    if backend.is_simulator():
        assert (timing.method, timing.meaningful) == ("wall-clock", False)
        assert "meaningless for GPU speed" in str(timing)
    else:
        assert (timing.method, timing.meaningful) == ("cuda-events", True)


def test_time_cpu_is_a_meaningful_wall_clock():
    timing = time_cpu(time.sleep, 0.01, warmup=0, repeats=3)
    assert (timing.method, timing.meaningful) == ("wall-clock", True)
    assert 0.01 <= timing.min <= timing.median <= timing.max < 1.0
    assert "simulator" not in str(timing)


@pytest.mark.parametrize("timer", [time_cuda, time_cpu])
@pytest.mark.parametrize(
    ("warmup", "repeats", "match"),
    [
        (-1, 3, "warmup must be an integer >= 0, got -1"),
        (0, 0, "repeats must be an integer >= 1, got 0"),
        (1.5, 3, "warmup"),
        (0, True, "repeats"),
    ],
)
def test_timers_reject_bad_counts(timer, warmup, repeats, match):
    with pytest.raises(ValueError, match=match):
        timer(print, warmup=warmup, repeats=repeats)


def test_inner_must_be_positive():
    with pytest.raises(ValueError, match="inner must be an integer >= 1, got 0"):
        time_cuda(print, inner=0)
