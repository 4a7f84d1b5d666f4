"""Context parallelism's cost models (gpudl.estimate.context, and activation_memory's
context_parallel): the chunk at which a ring step's computation hides its transfer on each GPU
with NVLink, the bytes of ring and head-parallel attention, the activations per GPU at 128K
tokens; and the ring-step benchmark's rows and bars (gpudl.bench.context)."""

import re
from pathlib import Path

import pytest

from gpudl import estimate
from gpudl.bench import context as bench
from gpudl.estimate import activation_memory
from gpudl.parallel.context import ring_step_worker
from gpudl.parallel.spawn import run_under_torchrun

ROOT = Path(__file__).resolve().parent.parent


def test_the_chunk_that_hides_the_ring_on_each_gpu():
    # e F / (2 B) with 16-bit elements: F / B tokens (FP16 tensor peak over one direction)
    assert estimate.hiding_chunks() == {"V100 SXM2 32GB": 834, "A100 40GB SXM": 1040,
                                        "A100 80GB SXM": 1040, "H100 SXM": 2198,
                                        "H200 SXM": 2198}
    causal = estimate.hiding_chunks(causal=True)  # half the flops per step, twice the chunk
    assert causal["H100 SXM"] == 4396 and causal["A100 80GB SXM"] == 2080


@pytest.mark.parametrize("heads, head_dim", [(1, 1), (32, 128), (8, 64)])
@pytest.mark.parametrize("causal", [False, True])
def test_the_computation_hides_the_transfer_from_the_hiding_chunk_on(heads, head_dim, causal):
    bandwidth, peak = 450e9, 989e12
    chunk = estimate.hiding_chunk(bandwidth, peak, causal=causal)
    at = estimate.ring_step_time(chunk, heads, head_dim, bandwidth, peak, causal=causal)
    below = estimate.ring_step_time(chunk - 1, heads, head_dim, bandwidth, peak,
                                    causal=causal)
    assert at["hides"] and at["step_s"] == at["compute_s"]
    assert not below["hides"] and below["step_s"] == below["transfer_s"]


def test_a_ring_step_by_hand():
    # 4096 tokens, 32 heads of 128, bf16: 2 x 4096 x 32 x 128 x 2 = 64 MiB sent,
    # 4 x 4096^2 x 32 x 128 = 275 Gflop computed
    step = estimate.ring_step_time(4096, 32, 128, 450e9, 989e12)
    assert estimate.ring_step_bytes(4096, 32, 128) == 64 * 2**20
    assert step["transfer_s"] == pytest.approx(64 * 2**20 / 450e9)
    assert step["compute_s"] == pytest.approx(4 * 4096**2 * 32 * 128 / 989e12)
    assert estimate.ring_step_flops(4096, 32, 128, causal=True) == 2 * 4096**2 * 32 * 128


def test_the_nvlink_figures_cite_the_book_s_references():
    keys = set(re.findall(r"@\w+\{([^,]+),", (ROOT / "book" / "references.bib").read_text()))
    assert {source for _, source in estimate.NVLINK_BANDWIDTH.values()} <= keys
    assert set(estimate.NVLINK_BANDWIDTH) <= set(estimate.hiding_chunks())


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_ulysses_sends_w_over_2_times_less_than_the_ring(world_size):
    ring = estimate.context_bytes_per_gpu(131072, 32, 128, world_size)
    ulysses = estimate.context_bytes_per_gpu(131072, 32, 128, world_size, "ulysses")
    assert ring == (world_size - 1) * estimate.ring_step_bytes(131072 // world_size, 32, 128)
    assert ring / ulysses == pytest.approx(world_size / 2)


def test_activations_per_gpu_with_context_parallelism():
    assert activation_memory(4, 2, 8, 2, context_parallel=1) == activation_memory(4, 2, 8, 2)
    assert activation_memory(4, 2, 8, 2, context_parallel=2) == 2496 / 2
    assert activation_memory(5, 1, 8, 2, context_parallel=2) == pytest.approx(
        activation_memory(5, 1, 8, 2) * 3 / 5)  # the GPU holding 3 of the 5 tokens
    with pytest.raises(ValueError, match=r"context_parallel \(6\) must be at most seq_len"):
        activation_memory(5, 1, 8, 2, context_parallel=6)
    # 128K tokens, Chapter 7's 1B shape (20 layers of 2,048, 16 heads), fused attention:
    # 34 s h + 4 a s bytes per layer, 182.7 GB in all on one GPU, an eighth on each of 8
    s, layers = 131072, 20
    one = layers * activation_memory(s, 1, 2048, 16, fused_attention=True)
    eight = layers * activation_memory(s, 1, 2048, 16, fused_attention=True,
                                       context_parallel=8)
    assert one == layers * (34 * s * 2048 + 4 * 16 * s) and round(one / 1e9, 1) == 182.7
    assert eight == one / 8 and round(eight / 1e9, 2) == 22.84


# --- the benchmark of a ring step ------------------------------------------------------------


def test_the_benchmark_is_skipped_without_the_gpus(monkeypatch, capsys):
    monkeypatch.setattr(bench, "gpus_missing", lambda ranks: "needs 2 GPUs, this machine has 1")
    body = bench.run()
    assert body["rows"] == [] and body["skipped"] == "needs 2 GPUs, this machine has 1"
    assert [b["name"] for b in body["bars"]] == [b["name"] for b in bench.BARS]
    assert all(b["verdict"] is None for b in body["bars"])
    assert "[context] world size 2 skipped: needs 2 GPUs" in capsys.readouterr().out


def test_the_benchmark_rows_and_bars(monkeypatch):
    """Its rows and bars, with the ranks' worker run in this process (one rank)."""
    monkeypatch.setattr(bench, "spawn", lambda worker, world_size, *args, **kw: [
        run_under_torchrun(worker, *args)])
    body = bench.run(world_size=2, chunk=4, heads=1, head_dim=4, repeats=2)
    assert [r["name"] for r in body["rows"]] == [
        "compute alone chunk=4", "ring overlapped chunk=4", "ring waiting chunk=4"]
    assert body["rows"][1]["bytes"] == estimate.ring_step_bytes(4, 1, 4, 4)
    assert [b["name"] for b in body["bars"]] == [b["name"] for b in bench.BARS]
    assert bench.GPU_CHUNK == 4096 >= max(estimate.hiding_chunks().values())


def test_the_step_worker_times_each_way_of_running_a_step():
    times = run_under_torchrun(ring_step_worker, 3, 1, 4, 2)
    assert set(times) == {"compute", "overlapped", "waiting"}
    assert all(len(samples) == 2 and min(samples) > 0 for samples in times.values())
