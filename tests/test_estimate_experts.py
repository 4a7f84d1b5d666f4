"""The cost models of mixture of experts and of the five parallel degrees (gpudl.estimate,
gpudl.parallel.degrees): an expert's capacity, the active parameters (Mixtral 8x7B's 47B and
13B), the all-to-all's bytes against tensor parallelism's all-reduces, model state per GPU
split by every degree, each by hand; the Llama 3 405B configurations reproduced; the
calculators' command line with the new degrees."""

import re

import pytest

from gpudl.__main__ import main
from gpudl.estimate import (
    active_parameters,
    all_to_all_bytes_per_rank,
    all_to_all_time,
    allreduce_bytes_per_rank,
    expert_capacity,
    model_state_memory,
    moe_all_to_all_bytes,
    tensor_parallel_bytes,
    training_flops,
)
from gpudl.hardware import peak_flops
from gpudl.parallel.degrees import ParallelDegrees

# --- capacity and active parameters ----------------------------------------------------------


@pytest.mark.parametrize(("tokens", "experts", "top_k", "factor", "capacity"), [
    (16, 8, 2, 1.0, 4),  # the even share: 2 x 16 / 8
    (16, 8, 2, 1.25, 5),
    (16, 8, 2, 1.1, 5),  # 4.4, rounded up
    (10, 4, 1, 1.0, 3),  # 2.5, rounded up
    (16, 8, 2, 4.0, 16),  # E / k: an expert can take every token, nothing is ever dropped
])
def test_expert_capacity_by_hand(tokens, experts, top_k, factor, capacity):
    assert expert_capacity(tokens, experts, top_k, factor) == capacity


def test_expert_capacity_refuses_what_cannot_route():
    with pytest.raises(ValueError, match=r"top_k \(3\) must be at most the number of experts"):
        expert_capacity(8, 2, 3, 1.0)
    with pytest.raises(ValueError, match="capacity_factor must be > 0"):
        expert_capacity(8, 2, 1, 0.0)


#: Mixtral 8x7B (Jiang et al. 2024, Table 1): width 4096, 32 layers, feed-forward 14336 in a
#: SwiGLU (three matrices), 32 query and 8 key-value heads of 128, vocabulary 32000, 8
#: experts, top-2; embedding and output matrices apart.
MIXTRAL = dict(dim=4096, layers=32, ffn=14336, heads=32, kv_heads=8, head_dim=128,
               vocab=32000, experts=8, top_k=2)


def test_active_parameters_reproduce_mixtrals_47b_and_13b():
    """The paper: "47B parameters, but only 13B active" per token."""
    m = MIXTRAL
    expert_params = m["layers"] * m["experts"] * 3 * m["dim"] * m["ffn"]
    attention = m["layers"] * m["dim"] * (2 * m["heads"] + 2 * m["kv_heads"]) * m["head_dim"]
    router = m["layers"] * m["dim"] * m["experts"]
    norms = (2 * m["layers"] + 1) * m["dim"]
    total = expert_params + attention + router + norms + 2 * m["vocab"] * m["dim"]
    active = active_parameters(total, expert_params, m["experts"], m["top_k"])
    assert round(total / 1e9) == 47 and round(active / 1e9) == 13
    assert round(total / 1e9, 1) == 46.7 and round(active / 1e9, 1) == 12.9
    assert active == total - expert_params * 6 / 8  # 6 of the 8 experts idle per token
    assert training_flops(active, 1) == 6 * active


def test_active_parameters_of_a_dense_model_are_all():
    assert active_parameters(1e9, 0.0, 8, 2) == 1e9
    with pytest.raises(ValueError, match="expert_params .* must be at most n_params"):
        active_parameters(1e9, 2e9, 8, 2)


# --- the all-to-all against tensor parallelism's all-reduces ---------------------------------


def test_all_to_all_bytes_and_time_by_hand():
    assert all_to_all_bytes_per_rank(800, 1) == 0  # one rank keeps everything
    assert all_to_all_bytes_per_rank(800, 4) == 600  # three quarters leave
    assert all_to_all_bytes_per_rank(800, 8) == 700
    # half a ring all-reduce's bytes, whatever N
    assert all_to_all_bytes_per_rank(800, 8) == allreduce_bytes_per_rank(800, 8) / 2
    # 7/8 of 8 MB at 100 GB/s, and 7 messages of 5 us
    assert all_to_all_time(8e6, 8, 100e9, 5e-6) == pytest.approx(7e6 / 100e9 + 7 * 5e-6)


def test_moe_layer_bytes_by_hand():
    # 4096 tokens of 4096 bf16 values, top-2 over 8 ranks: four all-to-alls (dispatch and
    # combine, forward and backward), each sending 7/8 of 2 x 4096 rows
    rows_bytes = 2 * 4096 * 4096 * 2
    assert moe_all_to_all_bytes(4096, 4096, 2, 8) == 4 * 7 / 8 * rows_bytes
    # GShard's padded buffers: capacity factor x the rows
    assert moe_all_to_all_bytes(4096, 4096, 2, 8, capacity_factor=1.25) == pytest.approx(
        1.25 * 4 * 7 / 8 * rows_bytes)
    # Megatron's tensor parallelism: four all-reduces of the 4096 x 4096 activation
    assert tensor_parallel_bytes(4096, 4096, 8) == 4 * 2 * 7 / 8 * 4096 * 4096 * 2


@pytest.mark.parametrize(("top_k", "ratio"), [(1, 0.5), (2, 1.0), (8, 4.0)])
def test_the_all_to_alls_move_k_halves_of_tensor_parallelisms_bytes(top_k, ratio):
    """Over as many ranks, a layer's all-to-alls move k/2 times what tensor parallelism's
    all-reduces move: the same for top-2 (Mixtral), half for Switch's top-1, four times for
    DeepSeek-V3's 8 routed experts."""
    moe = moe_all_to_all_bytes(8192, 7168, top_k, 8)
    assert moe / tensor_parallel_bytes(8192, 7168, 8) == pytest.approx(ratio)


# --- model state per GPU, split by every degree -----------------------------------------------


def test_model_state_with_the_default_degrees_is_unchanged():
    assert model_state_memory(7.5e9, n_gpus=64, zero_stage=2) == model_state_memory(
        7.5e9, n_gpus=64, zero_stage=2, tensor=1, pipeline=1, context=1, expert=1,
        expert_params=0.0)


def test_model_state_split_by_tensor_pipeline_and_context_by_hand():
    # 1.6e10 parameters over tensor 2 x pipeline 4: 2e9 per GPU; ZeRO-1 over data 2 x
    # context 2 = 4 GPUs holding the same shard: 2 + 2 + 12 / 4 bytes per parameter
    got = model_state_memory(1.6e10, n_gpus=2, zero_stage=1, tensor=2, pipeline=4, context=2)
    assert got == pytest.approx(2e9 * (2 + 2 + 12 / 4))


def test_model_state_of_experts_by_hand():
    # 1e9 dense + 8e9 in experts; data 8, expert 4: a GPU holds 1e9 dense and 2e9 of the
    # experts; ZeRO-3 shards the dense state 8 ways, the experts' 8 / 4 = 2 ways
    got = model_state_memory(9e9, n_gpus=8, zero_stage=3, expert=4, expert_params=8e9)
    assert got == pytest.approx(1e9 * 16 / 8 + 2e9 * 16 / 2)
    with pytest.raises(ValueError, match=r"expert degree \(3\) must divide n_gpus x context"):
        model_state_memory(9e9, n_gpus=8, expert=3, expert_params=8e9)


# --- Llama 3 405B's configurations (Grattafiori et al. 2024, "The Llama 3 Herd of Models",
# arXiv:2407.21783, Table 4; the same TP, CP, PP, tokens per batch and TFLOPs per GPU on
# P. Balaji's SC'24 slides) ------------------------------------------------------------------

#: (GPUs, TP, CP, PP, sequence length, TFLOPs per GPU, BF16 MFU %): 16M tokens per batch each.
LLAMA3_405B = [(8192, 8, 1, 16, 8192, 430, 43), (16384, 8, 1, 16, 8192, 400, 41),
               (16384, 8, 16, 16, 131072, 380, 38)]


@pytest.mark.parametrize("row", LLAMA3_405B, ids=lambda r: f"{r[0]}-cp{r[2]}")
def test_llama3_405b_configurations(row):
    gpus, tp, cp, pp, seq, tflops, percent = row
    dp = gpus // (tp * cp * pp)  # the table's DP column: 64, 128 and 8
    degrees = ParallelDegrees(data=dp, tensor=tp, pipeline=pp, context=cp)
    assert degrees.world_size == gpus
    degrees.check_divides("context", "the 128K sequence", seq)
    # Batch size/DP (32, 16, 16) sequences: 16M tokens per batch, 2**24 exactly
    per_dp = {64: 32, 128: 16, 8: 16}[dp]
    assert dp * per_dp * seq == 2**24
    # MFU: the TFLOPs per GPU (rounded to tens in the table) over the H100's 989 dense BF16
    assert abs(100 * tflops * 1e12 / peak_flops("H100 SXM", "bf16") - percent) < 1


def test_llama3_405b_compute_and_model_state():
    """6 N D: the paper's 3.8e25 FLOPs for 405B parameters on 15.6T tokens. Model state per GPU
    at 128K (TP 8 x PP 16, 16 CP x 8 DP GPUs holding each shard), with ZeRO stage 1 (our
    assumption, for the arithmetic): 405e9 / 128 parameters, 4 bytes each and 12 / 128."""
    assert float(f"{training_flops(405e9, 15.6e12):.2g}") == 3.8e25
    state = model_state_memory(405e9, n_gpus=8, zero_stage=1, tensor=8, pipeline=16, context=16)
    assert state == pytest.approx(405e9 / 128 * (2 + 2 + 12 / 128))
    assert round(state / 1e9, 2) == 12.95


# --- the calculators' command line -----------------------------------------------------------


def test_memory_takes_the_degrees(capsys):
    main(["estimate", "memory", "--params", "405e9", "--gpus", "8", "--tensor", "8",
          "--pipeline", "16", "--context", "16", "--zero-stage", "1"])
    out = capsys.readouterr().out
    assert "model state per GPU: 12.95 GB" in out
    assert "data 8 x tensor 8 x pipeline 16 x context 16 = 16,384 GPUs" in out


def test_memory_takes_the_experts(capsys):
    main(["estimate", "memory", "--params", "9e9", "--expert-params", "8e9", "--gpus", "8",
          "--expert", "4", "--zero-stage", "3"])
    out = capsys.readouterr().out
    assert "model state per GPU: 18 GB" in out  # 1e9 x 16 / 8 + 2e9 x 16 / 2 bytes
    assert "the experts spread 4 ways" in out


def test_time_counts_the_active_parameters(capsys):
    main(["estimate", "time", "--params", "9e9", "--expert-params", "8e9", "--experts", "8",
          "--top-k", "2", "--tokens", "1e12", "--gpu", "H100 SXM", "--gpus", "8",
          "--mfu", "0.5"])
    out = capsys.readouterr().out
    assert "active parameters: 3e+09 of 9e+09 (2 of 8 experts per token)" in out
    assert f"training compute: {6 * 3e9 * 1e12:.4g} flop" in out


@pytest.mark.parametrize("argv, message", [
    (["time", "--params", "9e9", "--experts", "8", "--tokens", "1e9", "--gpu", "H100 SXM",
      "--mfu", "0.5"], "missing --expert-params, --top-k"),
    (["time", "--params", "9e9", "--expert-params", "8e9", "--experts", "8", "--top-k", "9",
      "--tokens", "1e9", "--gpu", "H100 SXM", "--mfu", "0.5"], r"top_k \(9\) must be at most"),
    (["memory", "--params", "1e9", "--gpus", "3", "--expert", "2"], "must divide n_gpus"),
    (["memory", "--params", "1e9", "--tensor", "0"], "tensor must be >= 1"),
])
def test_bad_degrees_are_a_usage_error(capsys, argv, message):
    with pytest.raises(SystemExit) as err:
        main(["estimate", *argv])
    assert err.value.code == 2
    assert re.search(message, capsys.readouterr().err)
