"""gpudl.estimate: the roofline model, its ridge point, and the all-reduce fit."""

import math

import numpy as np
import pytest

from gpudl.estimate import allreduce_time, fit_allreduce, ridge_point, roofline
from gpudl.hardware import SPECS

H100 = SPECS["H100 SXM"]
H100_FLOPS = H100.fp32_tflops * 1e12  # 67 TFLOP/s FP32
H100_BYTES = H100.memory_bandwidth_gbs * 1e9  # 3.35 TB/s


def test_ridge_point_of_h100():
    assert ridge_point(H100_FLOPS, H100_BYTES) == pytest.approx(20.0)  # 67 / 3.35


def test_roofline_below_at_and_above_the_ridge():
    # Below: memory-bound, bandwidth x intensity. SAXPY, 2 flops per 12 bytes: 0.558 TFLOP/s.
    assert roofline(2 / 12, H100_FLOPS, H100_BYTES) == pytest.approx(3.35e12 / 6)
    assert roofline(10, H100_FLOPS, H100_BYTES) == pytest.approx(33.5e12)
    assert roofline(20, H100_FLOPS, H100_BYTES) == pytest.approx(67e12)  # the ridge
    # Above: compute-bound, the peak whatever the intensity.
    assert roofline(100, H100_FLOPS, H100_BYTES) == 67e12
    assert roofline(math.inf, H100_FLOPS, H100_BYTES) == 67e12
    assert roofline(0, H100_FLOPS, H100_BYTES) == 0.0
    assert isinstance(roofline(1, 2, 3), float)


def test_roofline_on_arrays():
    intensity = np.array([0.0, 1.0, 2.0, 4.0, 8.0])
    got = roofline(intensity, 10.0, 3.0)  # ridge at 10/3 flop/byte
    np.testing.assert_array_equal(got, [0.0, 3.0, 6.0, 10.0, 10.0])
    assert isinstance(got, np.ndarray) and got.shape == intensity.shape
    np.testing.assert_array_equal(roofline(np.arange(3), 10.0, 3.0), [0.0, 3.0, 6.0])
    grid = np.array([[1.0, 100.0]])
    assert roofline(grid, H100_FLOPS, H100_BYTES).shape == (1, 2)


@pytest.mark.parametrize(
    "args, error",
    [
        ((-1.0, 1e12, 1e12), ValueError),
        ((math.nan, 1e12, 1e12), ValueError),
        ((np.array([1.0, -1.0]), 1e12, 1e12), ValueError),
        ((np.array([1.0, np.nan]), 1e12, 1e12), ValueError),
        ((1.0, -1e12, 1e12), ValueError),
        ((1.0, 0.0, 1e12), ValueError),
        ((1.0, math.nan, 1e12), ValueError),
        ((1.0, math.inf, 1e12), ValueError),
        ((1.0, 1e12, -1.0), ValueError),
        ((1.0, 1e12, math.nan), ValueError),
        (("1", 1e12, 1e12), TypeError),
        (([1.0, 2.0], 1e12, 1e12), TypeError),
        ((np.array(["a"]), 1e12, 1e12), TypeError),
        ((np.array([True]), 1e12, 1e12), TypeError),
        ((1.0, "67e12", 1e12), TypeError),
        ((1.0, 1e12, None), TypeError),
        ((True, 1e12, 1e12), TypeError),
    ],
)
def test_roofline_bad_input(args, error):
    with pytest.raises(error):
        roofline(*args)


@pytest.mark.parametrize(
    "args, error",
    [((0.0, 1.0), ValueError), ((1.0, -1.0), ValueError), ((1.0, math.nan), ValueError),
     ((1.0, math.inf), ValueError), (("1", 1.0), TypeError)],
)
def test_ridge_point_bad_input(args, error):
    with pytest.raises(error):
        ridge_point(*args)


def test_fit_allreduce_recovers_the_model_parameters():
    sizes = [4096 * 4**k for k in range(6)]
    for n in (2, 4, 8):
        times = [allreduce_time(s, n, 3e9, 20e-6) for s in sizes]
        latency, bandwidth = fit_allreduce(sizes, times, n)
        assert latency == pytest.approx(20e-6, rel=1e-6)
        assert bandwidth == pytest.approx(3e9, rel=1e-6)


def test_fit_allreduce_clamps_negative_latency_and_rejects_bad_data():
    # times exactly proportional to size, minus a little: the free fit's latency is < 0
    sizes = [1e3, 1e6, 2e6]
    latency, bandwidth = fit_allreduce(sizes, [s / 1e9 - 1e-7 for s in sizes], 2)
    assert latency == 0.0 and bandwidth > 0
    with pytest.raises(ValueError):
        fit_allreduce([1e3, 1e3], [1e-3, 2e-3], 2)  # one distinct size
    with pytest.raises(ValueError):
        fit_allreduce([1e3, 1e6], [1e-3, 1e-3], 1)  # one rank
    with pytest.raises(ValueError):
        fit_allreduce([1e3, 1e6], [2e-3, 1e-3], 2)  # slower for smaller messages: no bandwidth
    with pytest.raises(ValueError):
        fit_allreduce([1e3, 1e6], [1e-3], 2)
