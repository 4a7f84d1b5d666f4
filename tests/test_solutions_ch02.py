"""Chapter 2's exercises: the warp-shuffle stage, a bank conflict, Adam on the roofline."""

import numpy as np
import pytest
from conftest import EPS32

from gpudl.solutions import ch02


def per_warp_reference(x: np.ndarray) -> np.ndarray:
    padded = np.zeros(-(-x.size // 32) * 32)
    padded[: x.size] = x
    return padded.reshape(-1, 32).sum(axis=1)


@pytest.mark.parametrize("n", [1, 31, 32, 33, 100, 257])
def test_warp_sums_match_numpy(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    got = ch02.warp_sums(x)
    assert got.dtype == np.float32 and got.shape == (-(-n // 32),)
    # Five butterfly levels: each element meets at most 5 float32 roundings.
    bound = 5 * EPS32 * per_warp_reference(np.abs(x))
    assert (np.abs(got - per_warp_reference(x)) <= bound).all()


def test_every_lane_ends_with_its_warps_total():
    x = np.arange(70, dtype=np.float32)  # small integers: every sum is exact
    lanes = ch02.warp_sums(x, every_lane=True)
    assert lanes.shape == (3, 32)
    expected = per_warp_reference(x)
    np.testing.assert_array_equal(lanes, np.repeat(expected[:, None], 32, axis=1))


def test_nan_stays_in_its_warp():
    x = np.ones(96, dtype=np.float32)
    x[40] = np.nan
    got = ch02.warp_sums(x)
    assert np.isnan(got[1]) and (got[[0, 2]] == 32).all()


def test_empty_and_bad_input():
    assert ch02.warp_sums(np.empty(0, np.float32)).shape == (0,)
    with pytest.raises(TypeError, match="float32"):
        ch02.warp_sums(np.ones(4))
    with pytest.raises(ValueError, match="1-D"):
        ch02.warp_sums(np.ones((2, 2), np.float32))


@pytest.mark.simulator_only
@pytest.mark.parametrize(("width", "degree"), [(32, 32), (33, 1), (64, 32), (34, 2), (31, 1)])
def test_column_read_conflicts_match_the_bank_arithmetic(width, degree):
    # word k * width sits in bank (k * width) % 32: count the lanes per bank by hand
    by_hand = max(np.bincount([(k * width) % 32 for k in range(32)], minlength=32))
    assert by_hand == degree
    assert ch02.column_read_conflicts(width) == degree


def test_column_read_conflicts_rejects_bad_width():
    with pytest.raises(ValueError):
        ch02.column_read_conflicts(0)


def test_exercise_roofline_a100():
    ridge, adam = ch02.exercise_roofline_a100()
    assert ridge == pytest.approx(19.5e12 / 2039e9)  # about 9.6 flop/byte
    assert adam == pytest.approx(12 / 28 * 2039e9)  # memory-bound: about 0.87 TFLOP/s
    assert adam < 0.05 * 19.5e12
