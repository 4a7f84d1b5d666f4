"""gpudl.estimate.inference and .batching, and `estimate memory --inference`: the published KV
cache figures (OPT-13B in the vLLM paper, Llama 2 7B and 70B from their configurations), the
roofline of prefill and decode, the critical batch against a brute-force search, the serving
figures of Chapters 7 and 9, static against continuous batching on a seeded stream, bad
input."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpudl.__main__ import main
from gpudl.estimate import (
    MODELS,
    POLICIES,
    Request,
    StepCost,
    critical_batch,
    decode_bytes,
    decode_intensity,
    decode_step_time,
    decode_tokens_per_second,
    kv_cache_bytes,
    prefill_intensity,
    prefill_time,
    request_stream,
    simulate,
    tokens_per_price,
)
from gpudl.hardware import SPECS

KIB, MIB = 2**10, 2**20
H100, A100 = SPECS["H100 SXM"], SPECS["A100 80GB SXM"]


def rates(gpu):
    return gpu.bf16_tflops * 1e12, gpu.memory_bandwidth_gbs * 1e9


# --- the KV cache's size -----------------------------------------------------------------------


def test_published_kv_cache_figures():
    # vLLM (Kwon et al. 2023, section 3): OPT-13B, 2 x 5120 x 40 x 2 B = "800 KB" a token,
    # "as much as 1.6 GB" for 2,048 tokens (800 K x 2,048 = 1.6 M of their KB)
    opt = MODELS["OPT-13B"].kv_bytes_per_token()
    assert opt == 2 * 5120 * 40 * 2 == 800 * KIB
    assert round(opt * 2048 / KIB / 1e6, 1) == 1.6
    # Llama 2 7B: 32 layers x 32 heads x 128, fp16: 0.5 MiB; 70B with 8 KV heads: 320 KiB
    assert MODELS["Llama 2 7B"].kv_bytes_per_token() == 0.5 * MIB
    assert MODELS["Llama 2 70B"].kv_bytes_per_token() == 320 * KIB
    assert kv_cache_bytes(80, 64, 128, 1) == 8 * 320 * KIB  # without GQA: 8 times more
    assert kv_cache_bytes(80, 1, 128, 1) == 40 * KIB  # multi-query attention
    assert kv_cache_bytes(32, 32, 128, 4096) == 2 * 2**30  # a 4,096-token sequence, 7B
    assert kv_cache_bytes(32, 32, 128, 0) == 0


@pytest.mark.parametrize(("call", "error"), [
    (lambda: kv_cache_bytes(0, 1, 1, 1), ValueError),
    (lambda: kv_cache_bytes(1, 1, 1, -1), ValueError),
    (lambda: kv_cache_bytes(1, 1.5, 1, 1), TypeError),
    (lambda: kv_cache_bytes(1, 1, 1, 1, bytes_per_value=0), ValueError),
    (lambda: decode_bytes(1e9, 0), ValueError),
    (lambda: decode_bytes(1e9, 1, kv_bytes_per_token=float("nan")), ValueError),
    (lambda: prefill_intensity(1e9, 0), ValueError),
    (lambda: critical_batch(0, 1, 1), ValueError),
    (lambda: tokens_per_price(1, 0), ValueError),
    (lambda: tokens_per_price(1, 1, n_gpus=0), ValueError),
])
def test_bad_input_gets_a_clear_error(call, error):
    with pytest.raises(error):
        call()


# --- the roofline of prefill and decode -------------------------------------------------------


def test_decode_at_batch_b_does_b_flops_per_byte_of_bf16_weights():
    for batch in (1, 8, 300):
        assert decode_intensity(7e9, batch) == pytest.approx(batch)
    assert decode_intensity(7e9, 4, bytes_per_param=1) == pytest.approx(8)  # int8 weights
    # the cache's bytes come on top: 7B at batch 1 with 1,000 cached tokens, 14 GB + 0.5 GB
    assert decode_bytes(7e9, 1, 1000, 0.5 * MIB) == 14e9 + 1000 * 0.5 * MIB
    assert prefill_intensity(7e9, 512) == pytest.approx(512)


def test_the_critical_batch_of_each_gpu():
    # the ridge point rounded up: H100 SXM 989 / 3.35 = 295.2, A100 80GB 312 / 2.039 = 153.0
    assert critical_batch(*rates(H100), 7e9) == 296
    assert critical_batch(*rates(A100), 7e9) == 154
    # Llama 2 7B's 0.5 MiB a token: past 90 cached tokens a sequence, never compute-bound
    kv = MODELS["Llama 2 7B"].kv_bytes_per_token()
    assert critical_batch(*rates(H100), 7e9, 90 * kv) is not None
    assert critical_batch(*rates(H100), 7e9, 91 * kv) is None
    # Llama 2 70B's 320 KiB: at 1,024 tokens a sequence it still is, from 1,010 sequences
    assert critical_batch(*rates(H100), 70e9, 1024 * MODELS["Llama 2 70B"].kv_bytes_per_token()
                          ) == 1010


@settings(max_examples=30, deadline=None, database=None)
@given(params=st.floats(1e8, 1e11), kv=st.floats(0, 1e7), ridge=st.floats(1, 600),
       bytes_per_param=st.sampled_from([0.5, 1, 2, 4]))
def test_the_critical_batch_is_the_smallest_that_reaches_the_ridge(params, kv, ridge,
                                                                   bytes_per_param):
    batch = critical_batch(ridge * 1e12, 1e12, params, kv, bytes_per_param)

    def reaches(b):
        return 2 * params * b / (params * bytes_per_param + b * kv) >= ridge * (1 - 1e-9)

    if batch is None:
        assert not reaches(10**12)
    else:
        assert reaches(batch) and (batch == 1 or not reaches(batch - 1))


def test_step_times_and_tokens_at_the_roofline():
    peak, bandwidth = rates(H100)
    assert decode_step_time(7e9, 1, peak, bandwidth) == pytest.approx(14e9 / bandwidth)
    assert decode_step_time(7e9, 1000, peak, bandwidth) == pytest.approx(14e12 / peak)
    assert prefill_time(7e9, 2048, peak, bandwidth) == pytest.approx(2 * 7e9 * 2048 / peak)
    assert decode_tokens_per_second(7e9, 1, peak, bandwidth) == pytest.approx(bandwidth / 14e9)
    assert tokens_per_price(1000, 2.0, n_gpus=2) == 1000 * 3600 / 4


def test_chapter_7s_serving_figures():
    """The 1B model of Chapter 7 (20 layers of width 2,048, 16 heads of 128) in bf16 on an
    A100 80GB, at the roofline."""
    peak, bandwidth = rates(A100)
    kv = kv_cache_bytes(20, 16, 128, 1)
    assert kv == 160 * KIB
    one = decode_tokens_per_second(1e9, 1, peak, bandwidth)
    many = decode_tokens_per_second(1e9, 64, peak, bandwidth, 64 * 512, kv)
    assert one == pytest.approx(1019.5) and round(many) == 17709
    assert (round(one * 3600 / 1e6, 2), round(many * 3600 / 1e6, 1)) == (3.67, 63.8)
    assert round(tokens_per_price(one, 2.28) / 1e6, 2) == 1.61  # the articles' 2.28 CNY/h
    assert round(tokens_per_price(many, 2.28) / 1e6, 1) == 28.0
    assert critical_batch(peak, bandwidth, 1e9) == 154
    assert critical_batch(peak, bandwidth, 1e9, 512 * kv) is None


# --- batching ----------------------------------------------------------------------------------


def test_the_request_stream_is_seeded():
    a, b = request_stream(50, 4.0, seed=3), request_stream(50, 4.0, seed=3)
    assert a == b and a != request_stream(50, 4.0, seed=4)
    arrivals = [r.arrival_s for r in a]
    assert arrivals == sorted(arrivals) and 50 / arrivals[-1] == pytest.approx(4, rel=0.4)
    assert all(16 <= r.prompt <= 512 and 16 <= r.output <= 512 for r in a)
    with pytest.raises(ValueError, match="low <= high"):
        request_stream(5, 1.0, seed=0, prompt=(9, 3))


COST = StepCost(7e9, *rates(H100), MODELS["Llama 2 7B"].kv_bytes_per_token())


def test_both_policies_by_hand():
    # two requests at t = 0 and a third once the first two are running; batches of 2
    reqs = [Request(0.0, 10, 3), Request(0.0, 10, 1), Request(1e-3, 10, 2)]
    static = simulate(reqs, COST, 2, "static")
    continuous = simulate(reqs, COST, 2, "continuous")
    prefill2, prefill1 = COST.prefill(20), COST.prefill(10)
    # static: prefill both (1 token each; request 1 is done), 2 decode steps for request 0
    # with request 1's slot computing padding, then request 2 alone
    assert static.first_token_s[1] == static.finish_s[1] == prefill2
    assert static.computing.tolist()[:3] == [2, 2, 2] and static.running.tolist()[:3] == [
        2, 1, 1]
    assert static.first_token_s[2] > static.finish_s[0]
    # continuous: request 2 takes request 1's slot at the next step
    assert continuous.first_token_s[2] == pytest.approx(
        prefill2 + COST.decode(1, 11) + prefill1)
    assert continuous.finish_s[2] < static.finish_s[2]


@pytest.fixture(scope="module")
def served():
    requests = request_stream(200, 32.0, seed=0)
    return {policy: simulate(requests, COST, 32, policy) for policy in POLICIES}


def test_every_request_gets_all_its_tokens(served):
    for run in served.values():
        assert not np.isnan(run.finish_s).any()
        arrivals = np.array([r.arrival_s for r in run.requests])
        assert (run.first_token_s > arrivals).all() and (run.finish_s >= run.first_token_s).all()
        assert run.running.max() <= 32 and run.computing.max() <= 32


def test_continuous_batching_serves_more_tokens_sooner(served):
    static, continuous = served["static"], served["continuous"]
    assert continuous.throughput > 1.4 * static.throughput
    assert np.median(continuous.latency_s) < 0.6 * np.median(static.latency_s)
    assert (static.computing >= static.running).all()
    assert (continuous.computing == continuous.running).all()


def test_bad_simulations_are_refused():
    reqs = request_stream(3, 1.0, seed=0)
    with pytest.raises(ValueError, match="one of"):
        simulate(reqs, COST, 2, "greedy")
    with pytest.raises(ValueError, match="sorted by arrival"):
        simulate(reqs[::-1], COST, 2)
    with pytest.raises(ValueError, match="max_batch must be >= 1"):
        simulate(reqs, COST, 0)


# --- the command line --------------------------------------------------------------------------


def test_estimate_memory_inference_prints_the_cache(capsys):
    main(["estimate", "memory", "--inference", "--params", "70e9", "--layers", "80",
          "--kv-heads", "8", "--head-dim", "128", "--seq-len", "4096", "--batch", "1"])
    out = capsys.readouterr().out
    assert "KV cache per token: 2 x 80 layers x 8 KV heads x 128 x 2 B = 327,680 B " \
           "(320 KiB, 0.3125 MiB)" in out
    assert "weights: 7e+10 parameters x 2 B = 140 GB" in out
    assert "total per GPU: 141.3 GB" in out and "fits on: none" in out
    main(["estimate", "memory", "--inference", "--params", "7e9", "--layers", "32",
          "--kv-heads", "32", "--head-dim", "128", "--seq-len", "4096", "--batch", "2",
          "--weight-bytes", "1"])
    out = capsys.readouterr().out
    assert "(512 KiB, 0.5 MiB)" in out and "2 sequences x 4,096 tokens = 4.295 GB (4 GiB)" in out
    assert "weights: 7e+09 parameters x 1 B = 7 GB" in out


def test_estimate_memory_inference_names_what_is_missing(capsys):
    with pytest.raises(SystemExit):
        main(["estimate", "memory", "--inference", "--params", "7e9", "--layers", "32"])
    assert "--inference needs --kv-heads, --head-dim, --seq-len, --batch" in \
        capsys.readouterr().err


@pytest.mark.parametrize(("gpu", "ridge", "prompt", "batch", "batch_70b", "cache_70b_gb",
                          "gpus_70b"), [
    ("A100 80GB SXM", 153, 154, 154, 242, 81, 3), ("H100 SXM", 295, 299, 296, 1010, 339, 6),
    ("H200 SXM", 206, 208, 207, 408, 137, 2), ("L4", 403, 410, 404, 12108, 4063, 176)])
def test_chapter_9s_table_of_critical_batches(gpu, ridge, prompt, batch, batch_70b,
                                              cache_70b_gb, gpus_70b):
    spec = SPECS[gpu]
    peak, bandwidth = rates(spec)
    kv7, kv70 = (MODELS[m].kv_bytes_per_token() for m in ("Llama 2 7B", "Llama 2 70B"))
    assert round(peak / bandwidth) == ridge
    # prefill's intensity is a decode step's with s sequences of one cached token each
    assert critical_batch(peak, bandwidth, 7e9, kv7) == prompt
    assert prefill_intensity(7e9, prompt, kv7) >= peak / bandwidth > prefill_intensity(
        7e9, prompt - 1, kv7)
    assert critical_batch(peak, bandwidth, 7e9) == batch
    assert critical_batch(peak, bandwidth, 7e9, 1024 * kv7) is None
    assert critical_batch(peak, bandwidth, 70e9, 1024 * kv70) == batch_70b
    # the cache of that batch, and how many of the GPU hold it with the 140 GB of weights
    cache = batch_70b * 1024 * kv70
    assert round(cache / 1e9) == cache_70b_gb
    assert math.ceil((70e9 * 2 + cache) / (spec.memory_gb * 1e9)) == gpus_70b


def test_chapter_9s_prefill_and_attention_figures():
    peak, bandwidth = rates(H100)
    kv7 = MODELS["Llama 2 7B"].kv_bytes_per_token()
    # a prompt below the ridge takes about one read of the weights: 4.2 ms on an H100
    assert {round(prefill_time(7e9, s, peak, bandwidth, kv7) * 1e3, 1) for s in range(1, 299)
            } == {4.2}
    # attention's 4 d flops per cached token, query head and layer match a token's 2 N at
    # about 26,700 cached tokens for Llama 2 7B
    llama = MODELS["Llama 2 7B"]
    assert round(2 * 7e9 / (4 * llama.head_dim * llama.heads * llama.layers), -2) == 26_700
