"""Chapter 4's exercises: bytes per parameter against the tracer's counts, the time bound and
roofline figures against hand values, shared-memory capacity, and the launch-and-bytes time
model against the launches the optimizers make."""

import numpy as np
import pytest
import torch

# isort: split
from gpudl import optim
from gpudl.kernels import optim as optim_kernels
from gpudl.solutions import ch04

N = 24
# The tracer that counts bytes and launches runs kernels on the simulator only.


def traced_bytes(fn, *args, **kwargs) -> float:
    with optim_kernels.traffic() as t:
        fn(*args, **kwargs)
    return t.total("global") / N


@pytest.mark.simulator_only
def test_step_bytes_match_what_the_kernels_access():
    rng = np.random.default_rng(0)
    p, g, m = (rng.standard_normal(N, dtype=np.float32) for _ in range(3))
    v = np.abs(rng.standard_normal(N, dtype=np.float32))
    counts = ch04.step_bytes_per_param()
    assert traced_bytes(optim_kernels.sgd_step, p, g, None, first=True, lr=0.1) == counts["sgd"]
    assert traced_bytes(optim_kernels.sgd_step, p, g, m, first=False, lr=0.1,
                        momentum=0.9) == counts["sgd_momentum"]
    for variant in ("v2_fused", "v1_unfused"):
        assert traced_bytes(optim_kernels.adam_step, p, g, m, v, step=1,
                            variant=variant) == counts[f"adam_{variant}"]
    half = p.astype(np.float16)
    assert traced_bytes(optim_kernels.adam_step_mixed, half, g.astype(np.float16), p, m, v,
                        step=1) == counts["adam_mixed"]
    # no kernel here keeps bfloat16 moments: half the bytes of fp32's seven values
    assert counts["adam_bf16_no_master"] == counts["adam_v2_fused"] // 2 == 14


def test_adam_time_bound_by_hand():
    h100 = ch04.adam_time_bound(10**9)
    assert h100["time_s"] == pytest.approx(28e9 / 3.35e12)  # 8.36 ms
    assert h100["intensity"] == pytest.approx(12 / 28)
    assert h100["attainable_flops"] == pytest.approx(12 / 28 * 3.35e12)  # 1.44 TFLOP/s
    assert h100["fraction_of_peak"] == pytest.approx(0.0214, abs=5e-4)
    unfused = ch04.adam_time_bound(10**9, bytes_per_param=72)
    assert unfused["time_s"] / h100["time_s"] == pytest.approx(72 / 28)
    assert ch04.adam_time_bound(10**9, "A100 80GB SXM")["time_s"] == pytest.approx(28e9 / 2.039e12)


def test_shared_memory_capacity_by_hand():
    assert ch04.shared_memory_adam_capacity("H100 SXM") == 132 * 228 * 1024 // 8 == 3_852_288
    assert ch04.shared_memory_adam_capacity("A100 80GB SXM") == 108 * 164 * 1024 // 8
    assert ch04.shared_memory_adam_capacity() / 1e9 < 0.004  # under 0.4% of a 1B model


@pytest.mark.simulator_only
def test_step_time_model_launches_are_the_optimizers():
    sizes = [30, 7, 11]
    rows = {r["variant"]: r for r in optim.traffic_table(sizes=tuple(sizes))}
    for variant in optim.TRACEABLE:  # the variants the tracer counts: the Numba ones
        model = ch04.step_time_model(sizes, variant, launch_s=5e-6, bandwidth=3.35e12)
        assert model["launches"] == rows[variant]["launches"]
        assert model["bytes"] == rows[variant]["global_bytes"]


def test_step_time_model_by_hand():
    sizes = [10_000] * 1_000
    fused = ch04.step_time_model(sizes, "v2_fused", 5e-6, 3.35e12)
    multi = ch04.step_time_model(sizes, "v4_multi_tensor", 5e-6, 3.35e12)
    assert fused["time_s"] == pytest.approx(1000 * 5e-6 + 28e7 / 3.35e12)  # 5.08 ms
    assert multi["time_s"] == pytest.approx(5e-6 + 28e7 / 3.35e12)  # 0.089 ms
    assert ch04.break_even_size(5e-6, 3.35e12) == pytest.approx(598_214, rel=1e-5)
    with pytest.raises(ValueError, match="variant"):
        ch04.step_time_model(sizes, "fastest", 5e-6, 3.35e12)


def test_master_weights_keep_updates_that_bfloat16_would_round_away():
    # the chapter's example: 100 updates of -1e-3 to a weight of 1.0
    low = torch.tensor([1.0], dtype=torch.bfloat16)
    master = torch.tensor([1.0])
    for _ in range(100):
        low -= 1e-3
        master -= 1e-3
    assert low.item() == 1.0  # each update is under half of bfloat16's spacing at 1.0
    assert master.to(torch.bfloat16).item() == pytest.approx(0.8984375)
