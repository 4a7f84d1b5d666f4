"""Chapter 7's calculators (gpudl.estimate and the GPU comparison of gpudl.hardware): the
published figures they reproduce, hand-worked cases, the articles' case, and bad input."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.bench.precision import measured_matmul_flops
from gpudl.estimate import (
    activation_memory,
    mfu,
    model_state_memory,
    training_cost,
    training_energy,
    training_flops,
    training_time,
)
from gpudl.hardware import SPECS, compare_gpus, peak_flops

A100 = peak_flops("A100 80GB SXM", "bf16")  # 312e12, dense
DAY = 86400.0


# --- published figures -------------------------------------------------------------------------


@pytest.mark.parametrize("params, tokens, flops", [
    (400e6, 8.0e9, 1.92e19), (1e9, 20.2e9, 1.21e20), (10e9, 205.1e9, 1.23e22),
])
def test_6nd_reproduces_chinchilla_table_3(params, tokens, flops):
    """Hoffmann et al. 2022, Table 3 (compute-optimal FLOPs and tokens), to its 3 digits. The
    larger rows print their token counts rounded to 2 digits, too coarse for 3-digit FLOPs."""
    assert float(f"{training_flops(params, tokens):.3g}") == flops


PALM = dict(n_layers=118, n_heads=48, head_dim=256, seq_len=2048)  # PaLM 540B, T = 2048


def test_palm_540b_mfu():
    """Chowdhery et al. 2022, Section 4.1 and Appendix B: 238.3K tokens/s on 6144 TPU v4 chips
    of 275 peak TFLOP/s is an MFU of 45.7% without the attention term and 46.2% with it."""
    without = mfu(238.3e3, training_flops(540e9, 1), 6144, 275e12)
    with_attention = mfu(238.3e3, training_flops(540e9, 1, **PALM), 6144, 275e12)
    assert round(100 * without, 1) == 45.7
    assert round(100 * with_attention, 1) == 46.2


def test_palm_flops_per_token_and_total_table_22():
    """Appendix B, Table 22: PaLM 540B (540.35B parameters, Table 1) takes 3.28 TFLOPs per
    token, attention included; over its 780B training tokens, 2.56e24 FLOPs."""
    per_token = training_flops(540.35e9, 1, **PALM)
    assert round(per_token / 1e12, 2) == 3.28
    assert float(f"{training_flops(540.35e9, 780e9, **PALM):.3g}") == 2.56e24
    # the attention term is about 1% of the total at this size
    assert 0.01 < per_token / training_flops(540.35e9, 1) - 1 < 0.012


def test_megatron_turing_mfu_from_the_palm_appendix():
    """PaLM Appendix B: Megatron-Turing NLG 530B, 65.43K tokens/s on 2240 A100s of 312
    TFLOP/s, MFU 29.7% without attention. The exact quotient is 29.77%: the paper's 29.7 is
    truncated, not rounded."""
    value = mfu(65.43e3, training_flops(530e9, 1), 2240, A100)
    assert 0.297 <= value < 0.298


# Narayanan et al. 2021, Table 1: (params in B, heads, hidden, layers, GPUs, batch, achieved
# TFLOP/s per GPU, % of peak, aggregate PFLOP/s). Vocabulary 51,200, sequence 2,048.
MEGATRON = [
    (1.7, 24, 2304, 24, 32, 512, 137, 44, 4.4),
    (3.6, 32, 3072, 30, 64, 512, 138, 44, 8.8),
    (7.5, 32, 4096, 36, 128, 512, 142, 46, 18.2),
    (18.4, 48, 6144, 40, 256, 1024, 135, 43, 34.6),
    (39.1, 64, 8192, 48, 512, 1536, 138, 44, 70.8),
    (76.1, 80, 10240, 60, 1024, 1792, 140, 45, 143.8),
    (145.6, 96, 12288, 80, 1536, 2304, 148, 47, 227.1),
    (310.1, 128, 16384, 96, 1920, 2160, 155, 50, 297.4),
    (529.6, 128, 20480, 105, 2520, 2520, 163, 52, 410.2),
    (1008.0, 160, 25600, 128, 3072, 3072, 163, 52, 502.0),
]
V, S = 51200, 2048


def megatron_params(layers: int, hidden: int) -> float:
    """Their equation (2)."""
    return 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (V + S) / (12 * layers * hidden))


def megatron_flops_per_token(layers: int, hidden: int) -> float:
    """Their equation (3), F / (B s): it counts the forward pass twice (recomputation)."""
    return 96 * layers * hidden**2 * (1 + S / (6 * hidden) + V / (16 * layers * hidden))


@pytest.mark.parametrize("row", MEGATRON, ids=lambda r: f"{r[0]}B")
def test_megatron_table_1_percent_of_peak(row):
    """Every row's "percentage of theoretical peak" is its per-GPU rate over the A100's 312
    TFLOP/s, and so is its aggregate rate over all GPUs; equation (2) gives its size."""
    billions, heads, hidden, layers, gpus, _, per_gpu, percent, aggregate = row
    assert round(100 * per_gpu * 1e12 / A100) == percent
    assert round(100 * aggregate * 1e15 / (gpus * A100)) == percent
    assert round(megatron_params(layers, hidden) / 1e9, 1) == billions


def test_megatron_52_percent_is_hardware_flops_and_39_percent_model_flops():
    """The 1T model's 52% counts the recomputed forward pass. Our model flops per token
    (6N + 12LHQT) are 3/4 of their equation (3) to 0.1% (the logit layer is not recomputed),
    so the same run's MFU is 39%."""
    _, heads, hidden, layers, gpus, _, per_gpu, percent, _ = MEGATRON[-1]
    n = megatron_params(layers, hidden)
    ours = training_flops(n, 1, n_layers=layers, n_heads=heads, head_dim=hidden // heads,
                          seq_len=S)
    theirs = megatron_flops_per_token(layers, hidden)
    assert ours / (0.75 * theirs) == pytest.approx(1, abs=1e-3)
    tokens_per_second = per_gpu * 1e12 * gpus / theirs
    assert round(100 * mfu(tokens_per_second, theirs, gpus, A100)) == percent == 52
    assert round(100 * mfu(tokens_per_second, ours, gpus, A100)) == 39


@pytest.mark.parametrize("params, tokens, gpus, per_gpu, days", [
    (175e9, 300e9, 1024, 140, 34),  # GPT-3
    (1008e9, 450e9, 3072, 163, 84),  # the 1T model of Table 1
])
def test_megatron_training_time_estimates(params, tokens, gpus, per_gpu, days):
    """Section 5.1, equation (4): time = 8 T P / (n X), X their achieved rate, which counts
    8 flops per parameter and token (6, plus 2 for the recomputed forward)."""
    seconds = training_time(8 * tokens * params, gpus, A100, per_gpu * 1e12 / A100)
    assert round(seconds / DAY) == days


def test_zero_paper_figure_1():
    """Rajbhandari et al. 2020, Figure 1: 7.5B parameters, 64 GPUs, mixed-precision Adam."""
    printed = {0: 120.0, 1: 31.4, 2: 16.6, 3: 1.9}
    for stage, gb in printed.items():
        assert round(model_state_memory(7.5e9, n_gpus=64, zero_stage=stage) / 1e9, 1) == gb


# --- hand-worked cases -------------------------------------------------------------------------


def test_training_flops_by_hand():
    assert training_flops(2, 3) == 36
    # 6 * 10 + 12 * 2 layers * 3 heads * 4 dims * 5 tokens = 60 + 1440 per token
    assert training_flops(10, 7, n_layers=2, n_heads=3, head_dim=4, seq_len=5) == 1500 * 7


def test_time_cost_energy_by_hand():
    seconds = training_time(1.2e20, 4, 312e12, 0.5)
    assert seconds == pytest.approx(1.2e20 / 6.24e14)
    assert training_time(100.0, 1, 10.0, 1.0) == 10.0
    assert training_cost(36000.0, 8, 2.5) == pytest.approx(200.0)  # 10 h x 8 GPUs x 2.5
    assert training_energy(3600.0, 4, 400.0) == pytest.approx(4 * 400 * 3600)  # 1.6 kWh


@settings(max_examples=50, deadline=None)
@given(params=st.floats(1e6, 1e12), tokens=st.floats(1e6, 1e13), gpus=st.integers(1, 4096),
       peak=st.floats(1e12, 1e16), fraction=st.floats(0.01, 1.0))
def test_mfu_inverts_training_time(params, tokens, gpus, peak, fraction):
    flops = training_flops(params, tokens)
    seconds = training_time(flops, gpus, peak, fraction)
    assert mfu(tokens / seconds, flops / tokens, gpus, peak) == pytest.approx(fraction, rel=1e-9)


def test_activation_memory_by_hand():
    # s = 4, b = 2, h = 8, a = 2: 34 s b h = 2176, 5 a s^2 b = 320, 2 s b h = 128
    assert activation_memory(4, 2, 8, 2) == 2496
    assert activation_memory(4, 2, 8, 2, recompute="selective") == 2176
    assert activation_memory(4, 2, 8, 2, recompute="full") == 128


def test_activation_memory_of_gpt3_shape():
    """GPT-3 175B's shape (a = 96, h = 12288) at s = 2048: the score term 5as/h is 80 against
    the 34 of everything else, so selective recomputation keeps 34/114, about 30%."""
    none = activation_memory(2048, 1, 12288, 96)
    assert none == 2048 * 12288 * (34 + 80)
    assert activation_memory(2048, 1, 12288, 96, recompute="selective") / none == 34 / 114


@settings(max_examples=40, deadline=None)
@given(s=st.integers(1, 8192), b=st.integers(1, 64), heads=st.integers(1, 128),
       head_dim=st.integers(1, 256))
def test_activation_memory_orders_and_scales(s, b, heads, head_dim):
    h = heads * head_dim
    none, selective, full = (activation_memory(s, b, h, heads, recompute=r)
                             for r in ("none", "selective", "full"))
    assert full < selective < none
    assert none - selective == 5 * heads * s * s * b  # the score matrices
    assert activation_memory(s, 2 * b, h, heads) == 2 * none  # linear in the batch


# --- the articles' case (claim C7) ----------------------------------------------------------


def test_articles_case_implies_an_impossible_ratio_of_mfus():
    """8 V100s for 72 h against 4 A100s for 18 h on the same job, FP16 tensor peaks: whatever
    the token count, the A100 run needs 3.2 times the V100 run's MFU, and above 13.5B tokens
    of a 1B model, more than 100%."""
    v100, a100 = peak_flops("V100 SXM2 32GB", "fp16"), peak_flops("A100 80GB SXM", "fp16")
    assert (4 * a100) / (8 * v100) == pytest.approx(1.248)  # the aggregate peak
    per_token = training_flops(1e9, 1)
    for tokens in (5e9, 20.2e9, 100e9):
        on_v100 = mfu(tokens / (72 * 3600), per_token, 8, v100)
        on_a100 = mfu(tokens / (18 * 3600), per_token, 4, a100)
        assert on_a100 / on_v100 == pytest.approx(72 * 8 * 125 / (18 * 4 * 312))
    largest = 4 * a100 * 18 * 3600 / per_token  # MFU exactly 1
    assert largest == pytest.approx(1.348e10, rel=1e-3)
    assert mfu(20.2e9 / (18 * 3600), per_token, 4, a100) > 1  # Chinchilla's tokens: impossible


def test_a_1b_model_needs_no_model_parallelism():
    """Mixed-precision Adam: 16 GB of model state, which one A100 80GB holds with room for the
    activations of a 1B shape (20 layers of 2048, 16 heads) at batch 4 and s = 2048."""
    state = model_state_memory(1e9)
    acts = 20 * activation_memory(2048, 4, 2048, 16)
    assert state == 16e9
    rows = {r["name"]: r for r in compare_gpus(state + acts)}
    assert rows["A100 80GB SXM"]["fits"] and not rows["V100 SXM2 32GB"]["fits"]


# --- the GPU comparison ------------------------------------------------------------------------


def test_compare_gpus_has_every_spec_and_the_a6000_has_48_gb():
    rows = compare_gpus()
    assert [r["name"] for r in rows] == list(SPECS)
    a6000 = next(r for r in rows if r["name"] == "RTX A6000")
    assert a6000["memory_gb"] == 48.0  # claim C4: not 40
    assert all(r["fits"] is None for r in rows)
    v100 = next(r for r in rows if r["name"] == "V100 SXM2 32GB")
    assert v100["training_tflops"] == 125.0  # no BF16 on Volta: its FP16 tensor cores
    assert v100["tflop_per_joule"] == pytest.approx(125 / 300)


def test_compare_gpus_fits_at_the_boundary_and_in_the_order_asked():
    rows = compare_gpus(48e9, names=["RTX A6000", "L4"])
    assert [(r["name"], r["fits"]) for r in rows] == [("RTX A6000", True), ("L4", False)]
    assert not compare_gpus(48e9 + 1, names=["RTX A6000"])[0]["fits"]


def test_peak_flops_reads_the_datasheet_table():
    assert peak_flops("H100 SXM", "bf16") == 989e12
    assert peak_flops("H100 SXM", "fp32") == 67e12
    assert peak_flops("V100 SXM2 32GB", "fp16") == 125e12


def test_measured_matmul_flops_is_a_rate():
    for dtype in ("float32", "bfloat16"):
        rate = measured_matmul_flops(64, dtype, repeats=2)
        assert 0 < rate < math.inf


# --- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("call, error, match", [
    (lambda: training_flops(0, 1e9), ValueError, "n_params"),
    (lambda: training_flops(-1e9, 1e9), ValueError, "n_params"),
    (lambda: training_flops(1e9, math.nan), ValueError, "n_tokens"),
    (lambda: training_flops(1e9, math.inf), ValueError, "n_tokens"),
    (lambda: training_flops("1e9", 1e9), TypeError, "n_params"),
    (lambda: training_flops(True, 1e9), TypeError, "n_params"),
    (lambda: training_flops(1e9, 1e9, n_layers=2), ValueError, "missing n_heads"),
    (lambda: training_flops(1e9, 1e9, n_layers=0, n_heads=1, head_dim=1, seq_len=1),
     ValueError, "n_layers"),
    (lambda: training_flops(1e9, 1e9, n_layers=2.0, n_heads=1, head_dim=1, seq_len=1),
     TypeError, "n_layers"),
    (lambda: mfu(0, 6e9, 1, 1e12), ValueError, "tokens_per_second"),
    (lambda: mfu(1e3, 6e9, 0, 1e12), ValueError, "n_gpus"),
    (lambda: mfu(1e3, 6e9, 1.5, 1e12), TypeError, "n_gpus"),
    (lambda: mfu(1e3, 6e9, 1, -1e12), ValueError, "peak_flops_per_gpu"),
    (lambda: training_time(1e20, 4, 312e12, 0), ValueError, r"mfu must be in \(0, 1\]"),
    (lambda: training_time(1e20, 4, 312e12, 1.01), ValueError, "mfu"),
    (lambda: training_time(1e20, 4, 312e12, -0.5), ValueError, "mfu"),
    (lambda: training_time(1e20, 4, 312e12, math.nan), ValueError, "mfu"),
    (lambda: training_time(1e20, 4, 312e12, "0.4"), TypeError, "mfu"),
    (lambda: training_time(0, 4, 312e12, 0.4), ValueError, "flops"),
    (lambda: training_cost(3600, 4, 0), ValueError, "price_per_gpu_hour"),
    (lambda: training_cost(-1, 4, 2.0), ValueError, "seconds"),
    (lambda: training_energy(3600, 4, -400), ValueError, "watts_per_gpu"),
    (lambda: activation_memory(0, 1, 8, 2), ValueError, "seq_len"),
    (lambda: activation_memory(4, 1, 8, 2, recompute="some"), ValueError, "recompute"),
    (lambda: activation_memory(4, 1, 8, 2, recompute=None), TypeError, "recompute"),
    (lambda: model_state_memory(0), ValueError, "n_params"),
    (lambda: peak_flops("V100 SXM2 32GB", "bf16"), ValueError, "has fp32, fp16"),
    (lambda: peak_flops("H100 SXM", "fp8"), ValueError, "precision"),
    (lambda: compare_gpus(-1.0), ValueError, "bytes_per_gpu"),
    (lambda: compare_gpus("80e9"), TypeError, "bytes_per_gpu"),
    (lambda: compare_gpus(names="H100 SXM"), TypeError, "names"),
    (lambda: measured_matmul_flops(64, "float16"), ValueError, "dtype"),
    (lambda: measured_matmul_flops(0), ValueError, "n"),
])
def test_bad_input_is_a_clear_error(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("call", [
    lambda: peak_flops("A100"),
    lambda: compare_gpus(names=["H100 SXM", "H100 PCIe"]),
])
def test_unknown_gpu_names_list_the_known_ones(call):
    with pytest.raises(ValueError) as err:
        call()
    message = str(err.value)
    assert "must be one of" in message and all(name in message for name in SPECS)


# --- fused attention (Chapter 8) --------------------------------------------------------------


def test_fused_attention_replaces_the_score_matrices_by_one_float_per_row():
    # s = 4, b = 2, h = 8, a = 2: 34 s b h = 2176, and 4 a s b = 64 bytes of log-sum-exp
    # instead of the 5 a s^2 b = 320 bytes of scores
    assert activation_memory(4, 2, 8, 2, fused_attention=True) == 2176 + 64
    for recompute in ("selective", "full"):  # nothing of the scores was kept anyway
        assert (activation_memory(4, 2, 8, 2, recompute=recompute, fused_attention=True)
                == activation_memory(4, 2, 8, 2, recompute=recompute))
    with pytest.raises(TypeError, match="fused_attention must be a bool, got int"):
        activation_memory(4, 2, 8, 2, fused_attention=1)


@settings(max_examples=30, deadline=None)
@given(s=st.integers(1, 8192), b=st.integers(1, 64), heads=st.integers(1, 128),
       head_dim=st.integers(1, 256))
def test_fused_attention_memory_is_linear_in_the_sequence(s, b, heads, head_dim):
    h = heads * head_dim
    fused = activation_memory(s, b, h, heads, fused_attention=True)
    assert activation_memory(2 * s, b, h, heads, fused_attention=True) == 2 * fused
    assert activation_memory(s, b, h, heads) - fused == 5 * heads * s * s * b - 4 * heads * s * b
