"""Chapter 3's exercises: a linear layer's gradients by loops against the kernel and autograd,
the flops of a training step against the FlopCounter, tile intensities against hand values,
and the naive and coalesced matmuls' sectors per request."""

import numpy as np
import pytest
import torch

# isort: split
from conftest import EPS32

from gpudl.kernels import matmul as matmul_kernels
from gpudl.kernels import nn
from gpudl.models import KernelMLP, load_digits_split
from gpudl.solutions import ch03


def test_linear_grads_by_loops_match_the_kernel_and_autograd():
    rng = np.random.default_rng(3)
    x, w, b, dy = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4, 2), (2,),
                                                                        (3, 2)])
    dx, dw, db = ch03.linear_grads_by_loops(x, w, dy)
    # Hand value: dw[1, 0] is a sum of three products, one per sample of the batch.
    assert dw[1, 0] == pytest.approx(sum(float(x[n, 1]) * float(dy[n, 0]) for n in range(3)))
    # autograd in float64 on y = x @ w + b with upstream gradient dy
    xt, wt, bt = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (x, w, b))
    (xt @ wt + bt).backward(torch.tensor(dy, dtype=torch.float64))
    for ours, theirs in ((dx, xt.grad), (dw, wt.grad), (db, bt.grad)):
        np.testing.assert_allclose(ours, theirs.numpy(), rtol=1e-12, atol=1e-12)
    # the float32 kernels, within their error bounds (batch terms for dw and db, out for dx)
    kdx, kdw, kdb = nn.linear_backward(x, w, dy)
    ax, aw, ady = (np.abs(v.astype(np.float64)) for v in (x, w, dy))
    assert (np.abs(kdx - dx) <= 2 * EPS32 * (ady @ aw.T)).all()
    assert (np.abs(kdw - dw) <= 3 * EPS32 * (ax.T @ ady)).all()
    assert (np.abs(kdb - db) <= 3 * EPS32 * ady.sum(axis=0)).all()


def test_linear_grads_by_loops_are_the_two_products():
    rng = np.random.default_rng(5)
    x, w, dy = rng.standard_normal((5, 3)), rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    dx, dw, db = ch03.linear_grads_by_loops(x, w, dy)
    np.testing.assert_allclose(dx, dy @ w.T, rtol=1e-13)
    np.testing.assert_allclose(dw, x.T @ dy, rtol=1e-13)
    np.testing.assert_allclose(db, dy.sum(axis=0), rtol=1e-13)


def test_training_step_flops_by_hand():
    flops = ch03.training_step_flops((64, 32, 10), 32)
    assert flops["forward"] == {"matmul": 151_552, "bias": 1_344, "relu": 1_024}
    assert flops["backward"] == {"matmul": 303_104, "bias": 1_344, "relu": 1_024}
    assert flops["loss"] == {"softmax_xent": 2_080}
    assert flops["update"] == {"sgd": 4_820}
    assert sum(sum(v.values()) for v in flops.values()) == 466_292
    assert flops["backward"]["matmul"] == 2 * flops["forward"]["matmul"]
    # no hidden layer: no ReLU
    assert "relu" not in ch03.training_step_flops((5, 3), 2)["forward"]


def test_training_step_flops_match_the_flop_counter():
    # One step of the kernel model on the simulator takes a few seconds.
    x, y = load_digits_split(seed=0)[:2]
    model = KernelMLP((64, 32, 10), seed=0)
    model.loss_and_grads(x[:32], y[:32])
    model.sgd_step(0.1)
    assert model.count_flops() == ch03.training_step_flops((64, 32, 10), 32)


def test_tile_intensity_and_shared_loads_by_hand():
    assert ch03.tile_intensity(1, 1) == 0.25  # naive: 2 flops per 8 bytes
    assert ch03.tile_intensity(matmul_kernels.TILE, matmul_kernels.TILE) == 4.0
    assert ch03.tile_intensity(matmul_kernels.V4_BM, matmul_kernels.V4_BN) == 16.0
    assert ch03.tile_intensity(matmul_kernels.V5_BM, matmul_kernels.V5_BN) == 32.0
    assert ch03.tile_intensity(128, 64) == pytest.approx(128 * 64 / (2 * 192))
    assert ch03.shared_loads_per_fma(1, 1) == 2.0  # v3
    assert ch03.shared_loads_per_fma(matmul_kernels.V4_TM, 1) == 9 / 8  # v4
    assert ch03.shared_loads_per_fma(matmul_kernels.V5_TM, matmul_kernels.V5_TN) == 0.25  # v5


@pytest.mark.simulator_only
def test_naive_and_coalesced_sectors():
    sectors = ch03.naive_and_coalesced_sectors()
    assert sectors["v1_naive"] == {"load a": 32.0, "load b": 1.0, "store c": 32.0}
    assert sectors["v2_coalesced"] == {"load a": 1.0, "load b": 4.0, "store c": 4.0}
