"""gpudl.bench.timing: the Timing type, device/wall-clock timers, and bandwidth and flop rates."""

import time

import pytest

from gpudl import backend
from gpudl.bench import timing
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
    ("warmup", "repeats", "error", "match"),
    [
        (-1, 3, ValueError, "warmup must be >= 0, got -1"),
        (0, 0, ValueError, "repeats must be >= 1, got 0"),
        (1.5, 3, TypeError, "warmup must be an int"),
        (0, True, TypeError, "repeats must be an int"),
    ],
)
def test_timers_reject_bad_counts(timer, warmup, repeats, error, match):
    with pytest.raises(error, match=match):
        timer(print, warmup=warmup, repeats=repeats)


def test_inner_must_be_positive():
    with pytest.raises(ValueError, match="inner must be >= 1, got 0"):
        time_cuda(print, inner=0)


# ------------------------------------------------------------------------------------------
# Fair timing: the policy, interleaved samples, latency rows
# ------------------------------------------------------------------------------------------


class FakeClock:
    """A clock that each call of a timed function advances by that function's duration."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def call(self, seconds: float, log: list, name: str):
        def run():
            self.now += seconds
            log.append(name)

        return run


def test_choose_inner_fills_a_millisecond_with_at_least_three_calls():
    assert timing.choose_inner(2e-3) == 3  # a long step: still three per sample
    assert timing.choose_inner(1e-3) == 3
    assert timing.choose_inner(1e-4) == 10
    assert timing.choose_inner(3e-4) == 4
    assert timing.choose_inner(1e-9) == 1000  # capped
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="call_s must be"):
            timing.choose_inner(bad)
    for bad in ("1", True):
        with pytest.raises(TypeError, match="call_s must be a real number"):
            timing.choose_inner(bad)


@pytest.mark.simulator_only
def test_time_interleaved_takes_turns_and_times_each_call_alone():
    clock, log = FakeClock(), []
    fns = {"a": clock.call(1e-4, log, "a"), "b": clock.call(5e-4, log, "b"),
           "c": clock.call(2e-3, log, "c")}
    result = timing.time_interleaved(fns, clock=clock)
    assert log[:9] == ["a"] * 3 + ["b"] * 3 + ["c"] * 3  # warm-up, one after another
    timed = log[9:]
    inners = {"a": 10, "b": 3, "c": 3}  # choose_inner of each warm-up time
    # the fake clock gives every sample the same time: stable after the least, 5 rounds
    rounds_taken = timing.POLICY["min_repeats"]
    assert len(timed) == rounds_taken * sum(inners.values())
    # round r starts with the r-th name (rotated), and each sample is `inner` calls in a row
    rounds, i = [], 0
    for _ in range(rounds_taken):
        order = []
        for _ in fns:
            name = timed[i]
            assert timed[i:i + inners[name]] == [name] * inners[name]
            order.append(name)
            i += inners[name]
        rounds.append(order)
    assert rounds[0] == ["a", "b", "c"] and rounds[1] == ["b", "c", "a"]
    assert rounds[2] == ["c", "a", "b"] and rounds[3] == rounds[0]
    for name, seconds in (("a", 1e-4), ("b", 5e-4), ("c", 2e-3)):
        assert len(result[name].samples) == rounds_taken
        assert result[name].median == pytest.approx(seconds)
        assert (result[name].method, result[name].meaningful) == ("wall-clock", False)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"warmup": 2}, "warmup must be >= 3"), ({"repeats": 4}, "repeats must be >= 5"),
    ({"inner": 2}, "inner must be >= 3"), ({"repeats": 0}, "repeats must be >= 1"),
])
def test_time_interleaved_refuses_less_than_the_policy(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.time_interleaved({"a": lambda: None}, **kwargs)
    with pytest.raises(ValueError, match="at least one"):
        timing.time_interleaved({})


def test_rows_that_fit_in_the_l2_are_latency_rows():
    l2 = 60 * 2**20  # an H200's
    assert timing.row_kind(8 * 2**20, l2) == "latency"  # a copy of 1M float32
    assert timing.row_kind(28 * 10**6, l2) == "latency"  # an Adam step of 1M parameters
    assert timing.row_kind(l2, l2) == "latency"
    assert timing.row_kind(l2 + 1, l2) == "bandwidth"
    assert timing.row_kind(512 * 2**20, l2) == "bandwidth"  # a copy of 64M float32
    expected = None if backend.is_simulator() else "latency"  # the device's own L2
    assert timing.row_kind(1024) == expected
    with pytest.raises(ValueError, match="n_bytes must be >= 0"):
        timing.row_kind(-1, l2)


@pytest.mark.gpu
def test_the_first_launch_s_host_delay_is_outside_the_window():
    import numpy as np
    from numba import cuda

    from gpudl.kernels import memory

    x = cuda.to_device(np.ones(32, np.float32))
    out = cuda.device_array_like(x)
    one = timing.time_cuda(memory.launch_copy_v1_naive, x, out, inner=1)
    assert one.median < 10e-6  # an empty-sized kernel, not a numba launch (tens of us)


def test_sampling_stops_once_the_median_is_stable_or_the_call_is_slow():
    steady = [1e-3] * 5
    assert timing.spread(steady) == 0 and timing.stable(steady, 5e-3)
    assert not timing.stable(steady[:4], 4e-3)  # fewer than the least
    noisy = [1e-3, 2e-3] * 10  # the middle half spans 100 % of the median
    assert timing.spread(noisy) > timing.POLICY["spread"]
    assert not timing.stable(noisy, 0.03)
    assert timing.stable(noisy * 3, 0.09)  # at most 50 samples
    slow = [0.118, 0.125, 0.13, 0.118, 0.14]  # reduction v1 at 2**26 on an H200
    assert timing.stable(slow, sum(slow))  # half a second of samples says it
    assert timing.spread([1e-3]) == float("inf")
    for bad in ([float("nan")] * 5, [1e-3, -1e-3]):  # no timing is NaN or negative
        with pytest.raises(ValueError, match=r"samples\[\d\] must be"):
            timing.stable(bad, 5e-3)


@pytest.mark.simulator_only
def test_time_interleaved_keeps_sampling_until_every_call_is_stable():
    clock, log = FakeClock(), []
    durations = iter([1e-3, 3e-3] * 100)  # "b" jitters from sample to sample

    def jittery():
        clock.now += next(durations)
        log.append("b")

    result = timing.time_interleaved({"a": clock.call(2e-3, log, "a"), "b": jittery},
                                     clock=clock)
    # "a" is stable at once, "b" never (while its samples take under half a second)
    assert len(result["a"].samples) == len(result["b"].samples) > timing.POLICY["min_repeats"]
    assert sum(result["b"].samples) * 3 >= timing.POLICY["row_s"] or (
        len(result["b"].samples) == timing.POLICY["max_repeats"])


@pytest.mark.parametrize("precision", ["ieee", "tf32"])
def test_fp32_matmuls_sets_the_switch_and_restores_it(precision):
    import torch

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    with timing.fp32_matmuls(precision):
        assert matmul.fp32_precision == precision
    assert matmul.fp32_precision == before
    with pytest.raises(RuntimeError, match="inside"), timing.fp32_matmuls(precision):
        raise RuntimeError("an error inside the block")
    assert matmul.fp32_precision == before


def test_fp32_matmuls_refuses_an_unknown_precision():
    wanted = r"precision must be one of \['ieee', 'tf32'\], got 'fp16'"
    with pytest.raises(ValueError, match=wanted):
        with timing.fp32_matmuls("fp16"):
            pass
