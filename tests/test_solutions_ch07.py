"""Chapter 7's exercises: each solution against the calculator it inverts, and against the
values worked by hand in the chapter."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.estimate import activation_memory, model_state_memory, training_time
from gpudl.hardware import peak_flops
from gpudl.solutions import ch07

A100 = "A100 80GB SXM"


def test_exercise_1_tokens_in_the_articles_budgets():
    """At 50% MFU, the 4 A100s in 18 h train a 1B model on 6.74B tokens; the 8 V100s in 72 h
    on 21.6B: the V100 run could have done more than three times the A100 run's work."""
    on_a100 = ch07.tokens_in_budget(1e9, 18 * 3600, 4, peak_flops(A100, "fp16"), 0.5)
    on_v100 = ch07.tokens_in_budget(1e9, 72 * 3600, 8, peak_flops("V100 SXM2 32GB", "fp16"),
                                    0.5)
    assert on_a100 == pytest.approx(4 * 312e12 * 0.5 * 64800 / 6e9)
    assert round(on_a100 / 1e9, 2) == 6.74 and round(on_v100 / 1e9, 1) == 21.6
    assert on_v100 / on_a100 == pytest.approx(1 / 0.312)


@settings(max_examples=30, deadline=None)
@given(params=st.floats(1e6, 1e12), seconds=st.floats(1.0, 1e8), gpus=st.integers(1, 1024),
       fraction=st.floats(0.01, 1.0))
def test_exercise_1_inverts_training_time(params, seconds, gpus, fraction):
    tokens = ch07.tokens_in_budget(params, seconds, gpus, 312e12, fraction)
    assert training_time(6 * params * tokens, gpus, 312e12, fraction) == pytest.approx(
        seconds, rel=1e-9)


def test_exercise_2_largest_model_on_eight_a100s():
    """80 GB each, 20 GB kept for activations: 3.75B parameters without sharding, then 10.9B,
    16B and 30B under ZeRO stages 1, 2 and 3."""
    got = [ch07.largest_model(80e9, 8, stage, reserve_bytes=20e9) / 1e9 for stage in range(4)]
    assert got == pytest.approx([3.75, 60 / 5.5, 16.0, 30.0])
    for stage, params in enumerate(got):  # the model state of that size fills the room exactly
        assert model_state_memory(params * 1e9, n_gpus=8, zero_stage=stage) == pytest.approx(
            60e9)
    fp32_sgd = ch07.largest_model(80e9, 1, 0, optimizer="sgd", precision="fp32")
    assert fp32_sgd == pytest.approx(80e9 / 12)


def test_exercise_2_rejects_a_reserve_larger_than_the_memory():
    with pytest.raises(ValueError, match="reserve_bytes"):
        ch07.largest_model(80e9, 8, 3, reserve_bytes=80e9)


def test_exercise_3_longest_sequence_by_hand():
    """The 1B shape (20 layers of 2048, 16 heads), 64 GB left on an A100 80GB after 16 GB of
    model state, batch 1: 5,904 tokens without recomputation, 45,955 with selective, 781,250
    with full."""
    got = {r: ch07.longest_sequence(64e9, 2048, 16, 20, 1, r)
           for r in ("none", "selective", "full")}
    assert got == {"none": 5904, "selective": 45955, "full": 781250}


@settings(max_examples=40, deadline=None)
@given(memory=st.floats(1e6, 1e12), heads=st.integers(1, 64), head_dim=st.integers(1, 128),
       layers=st.integers(1, 96), batch=st.integers(1, 16),
       recompute=st.sampled_from(["none", "selective", "full"]))
def test_exercise_3_is_the_longest_that_fits(memory, heads, head_dim, layers, batch, recompute):
    hidden = heads * head_dim
    s = ch07.longest_sequence(memory, hidden, heads, layers, batch, recompute)

    def need(length: int) -> float:
        return layers * activation_memory(length, batch, hidden, heads, recompute=recompute)

    assert s == 0 or need(s) <= memory
    assert need(s + 1) > memory


def test_exercise_3_bad_input():
    with pytest.raises(ValueError, match="recompute"):
        ch07.longest_sequence(64e9, 2048, 16, 20, 1, "partial")
    with pytest.raises(ValueError, match="memory_bytes"):
        ch07.longest_sequence(math.inf, 2048, 16, 20)
    with pytest.raises(ValueError, match="n_layers"):
        ch07.longest_sequence(64e9, 2048, 16, 0)


def test_exercise_4_energy_in_bf16_and_fp32():
    """The 1B model on 20.2B tokens (1.212e20 flops) at 40% MFU on A100s: 108 kWh at the
    board power in BF16, 16 times as much (312 / 19.5) if FP32 reached the same MFU."""
    bf16 = ch07.energy_per_job(1.212e20, A100, "bf16", 0.4)
    fp32 = ch07.energy_per_job(1.212e20, A100, "fp32", 0.4)
    assert bf16 == pytest.approx(1.212e20 / (312e12 * 0.4) * 400)
    assert round(bf16 / 3.6e6) == 108
    assert fp32 / bf16 == pytest.approx(16.0)
    with pytest.raises(ValueError, match="name must be one of"):
        ch07.energy_per_job(1e20, "A100", "bf16", 0.4)


def test_exercise_3_with_fused_attention():
    """With a fused attention kernel (Chapter 8) the same GPU trains 45,913 tokens at a time
    without recomputation: the square term is gone, and 4 a = 64 bytes per token and layer of
    log-sum-exp are all that replaces it (selective recomputation: 45,955)."""
    got = ch07.longest_sequence(64e9, 2048, 16, 20, 1, "none", fused_attention=True)
    assert got == 45913
    assert 20 * activation_memory(got, 1, 2048, 16, fused_attention=True) <= 64e9
    assert 20 * activation_memory(got + 1, 1, 2048, 16, fused_attention=True) > 64e9
    assert ch07.longest_sequence(64e9, 2048, 16, 20, 1, "selective",
                                 fused_attention=True) == 45955
