"""The exercises' worked solutions give the answers the book derives by hand."""

import numpy as np
import pytest

from gpudl.hardware import SPECS
from gpudl.solutions import ch01


@pytest.mark.parametrize("n", [1, 127, 129, 1000])
def test_ch01_fma_matches_numpy(n):
    rng = np.random.default_rng(n)
    a, b, c = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    expected = a.astype(np.float64) * b + c
    np.testing.assert_allclose(ch01.fused_multiply_add(a, b, c), expected, rtol=1e-6, atol=1e-6)


def test_ch01_fma_rejects_bad_input():
    x = np.zeros(4, dtype=np.float32)
    with pytest.raises(TypeError):
        ch01.fused_multiply_add(x, x, x.astype(np.float64))
    with pytest.raises(ValueError):
        ch01.fused_multiply_add(x, x, np.zeros(5, dtype=np.float32))


def test_ch01_exercise2_matches_the_hand_derivation():
    occ = ch01.exercise2_occupancy()
    assert (occ.blocks_per_sm, occ.warps_per_sm, occ.limit) == (5, 20, "registers")
    assert occ.occupancy == pytest.approx(0.3125)
    assert occ.blocks_by_shared_memory == 9 and occ.blocks_by_warps == 16


def test_ch01_exercise3_h100_clock():
    h100 = SPECS["H100 SXM"]
    clock = ch01.implied_clock_ghz(h100.fp32_tflops, h100.sm_count, h100.fp32_cores_per_sm)
    assert clock == pytest.approx(1.98, abs=0.005)

