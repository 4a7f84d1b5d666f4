"""gpudl.kernels.divergence: the paths each warp takes, the kernel against its reference, and
bad input."""

import math

import numpy as np
import pytest

from gpudl.kernels import divergence


@pytest.mark.parametrize(("mode", "paths"), [("parity", 2), ("warp", 1)])
@pytest.mark.parametrize(("n_threads", "threads_per_block"), [(256, 128), (100, 64), (64, 32)])
def test_divergence_paths_per_warp(mode, paths, n_threads, threads_per_block):
    per_warp = divergence.divergence_paths(mode, n_threads, threads_per_block)
    assert per_warp.shape == (math.ceil(n_threads / 32),)
    assert (per_warp == paths).all()


@pytest.mark.parametrize("mode", divergence.MODES)
@pytest.mark.parametrize(("n", "threads_per_block"), [(1, 32), (300, 64), (517, 256)])
def test_divergence_matches_reference(mode, n, threads_per_block):
    out = divergence.divergence(n, mode, work=8, threads_per_block=threads_per_block)
    assert out.dtype == np.int64 and (out >= 0).all()
    expected = divergence.reference_divergence(n, mode, 8, threads_per_block)
    np.testing.assert_array_equal(out, expected)


def test_the_two_modes_take_different_paths_for_the_same_thread():
    # Same work, different assignment of paths: threads 1 (odd lane, warp 0) and 32 (even
    # lane, warp 1) swap paths between the modes, so the outputs differ there and only there.
    parity, warp = (divergence.divergence(64, mode, work=4, threads_per_block=64)
                    for mode in divergence.MODES)
    lane = np.arange(64)
    swapped = (lane % 2) != (lane // 32) % 2
    np.testing.assert_array_equal(parity != warp, swapped)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n": 10, "mode": "lanes"}, r"mode must be one of \['parity', 'warp'\], got 'lanes'"),
        ({"n": 0, "mode": "warp"}, "n must be >= 1, got 0"),
        ({"n": 10, "mode": "warp", "work": 0}, "work must be >= 1"),
        ({"n": 10, "mode": "warp", "threads_per_block": 33}, "multiple of 32"),
    ],
)
def test_divergence_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        divergence.divergence(**kwargs)
