"""gpudl.bench.attention and gpudl.bench.tensorcores (Chapter 8): their rows and bars (on the
simulator: tiny sizes, every bar without a ratio), the device-name lookup in the datasheet table,
the attention flop count; on a GPU, the chapter's speed bars."""

import math

import pytest

from gpudl import backend  # first: chooses GPU or simulator before numba is imported

# isort: split
from gpudl.bench import attention as attention_bench
from gpudl.bench import find_bar, load_or_run
from gpudl.bench import tensorcores as tensorcore_bench
from gpudl.hardware import peak_flops
from gpudl.kernels import attention

ROW_KEYS = {"name", "median_s", "min_s", "max_s", "runs", "method", "meaningful", "bytes",
            "gbps", "flops", "tflops"}
BAR_KEYS = {"name", "what", "numerator", "denominator", "rate", "ratio", "compare",
            "threshold", "verdict"}


def check_shape(body: dict, bar_names: list[str]) -> None:
    names = [r["name"] for r in body["rows"]]
    assert len(set(names)) == len(names)
    for row in body["rows"]:
        assert ROW_KEYS <= set(row) and row["median_s"] > 0
    assert [b["name"] for b in body["bars"]] == bar_names
    for bar in body["bars"]:
        assert set(bar) == BAR_KEYS
        assert bar["numerator"] in names
        if backend.is_simulator():  # a GPU-only row (torch's CUDA backends) may be missing
            assert bar["ratio"] is None and bar["verdict"] is None
        else:
            assert bar["denominator"] in names


@pytest.mark.simulator_only
def test_attention_rows_and_bars_on_the_simulator():
    body = attention_bench.run()
    check_shape(body, [b["name"] for b in attention_bench.BARS])
    rows = {r["name"]: r for r in body["rows"]}
    assert set(rows) == {*(f"attention_{v} s=20" for v in attention.VARIANTS),
                         "torch sdpa cpu s=20"}
    assert rows["attention_v2_fused s=20"]["flops"] == attention_bench.attention_flops(1, 20, 64)
    assert rows["attention_v1_three_kernels s=20"]["bytes"] > rows[
        "attention_v2_fused s=20"]["bytes"]
    # a simulated kernel's time means nothing
    assert rows["attention_v2_fused s=20"]["tflops"] is None


@pytest.mark.simulator_only
def test_tensorcore_rows_and_bars_on_the_simulator():
    body = tensorcore_bench.run()
    check_shape(body, [b["name"] for b in tensorcore_bench.BARS])
    names = [r["name"] for r in body["rows"]]
    assert names[:4] == [f"torch {d} n=64" for d in tensorcore_bench.TORCH_DTYPES]
    assert names[4:] == ["tensor_core_v1_warp_tiles n=32", "tensor_core_v2_shared_tiles n=32",
                         "matmul_v4_register_1d n=32", "matmul_v5_register_2d n=32"]
    assert body["datasheet"] is None and body["rows"][0]["fraction_of_peak"] is None


def test_attention_flops_by_hand():
    assert attention_bench.attention_flops(1, 3, 2) == 4 * 2 * 9  # QK^T and PV: 2 d per pair each
    assert attention_bench.attention_flops(2, 3, 2, causal=True) == 2 * 4 * 2 * 6  # 6 pairs i >= j
    assert attention_bench.attention_flops(8, 4096, 64) == 4 * 8 * 64 * 4096**2


@pytest.mark.parametrize(("device", "memory", "expected"), [
    ("NVIDIA H100 80GB HBM3", 80e9, "H100 SXM"),
    ("NVIDIA H200", 141e9, "H200 SXM"),
    ("NVIDIA A100-SXM4-40GB", 40e9, "A100 40GB SXM"),
    ("NVIDIA A100-SXM4-80GB", 80e9, "A100 80GB SXM"),
    ("NVIDIA GeForce RTX 4090", 24e9, "RTX 4090"),
    ("NVIDIA RTX A6000", 48e9, "RTX A6000"),
    ("Tesla V100-SXM2-32GB", 32e9, "V100 SXM2 32GB"),
    ("NVIDIA T4", 16e9, None),
    ("", None, None),
])
def test_datasheet_lookup_by_device_name(device, memory, expected):
    spec = tensorcore_bench.datasheet_spec(device, memory)
    assert (spec and spec.name) == expected


def test_tf32_peaks_are_half_the_sparse_datasheet_figures():
    # the datasheets quote TF32 with sparsity: 312 (A100) and 989 (H100, H200) TFLOPS
    assert peak_flops("A100 80GB SXM", "tf32") == 156e12
    assert peak_flops("H100 SXM", "tf32") == peak_flops("H200 SXM", "tf32") == 494.5e12
    assert math.isclose(peak_flops("H100 SXM", "bf16") / peak_flops("H100 SXM", "tf32"), 2,
                        rel_tol=1e-3)
    with pytest.raises(ValueError, match="V100 SXM2 32GB has no tf32"):
        peak_flops("V100 SXM2 32GB", "tf32")


# ------------------------------------------------------------------------------------------
# On a GPU only: the speed bars
# ------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_attention_bars_hold_on_the_gpu():
    stored = load_or_run("attention")
    check_shape(stored, [b["name"] for b in attention_bench.BARS])
    assert all(b["verdict"] for b in stored["bars"]), stored["bars"]


@pytest.mark.gpu
def test_tensor_core_matmul_beats_the_best_simt_kernel():
    stored = load_or_run("tensorcores")
    assert find_bar(stored, "tensor_core_faster_than_best_simt")["verdict"], stored["bars"]
