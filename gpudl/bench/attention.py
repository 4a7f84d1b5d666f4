"""Chapter 8's attention measurements: the two attention variants against torch's SDPA.

Book section: Chapter 8, the "Measured on a GPU" box of "How accurate is float32 attention?".

``python -m gpudl bench attention`` runs :func:`run` and stores
``results/attention-<backend>.json``, with the speed goals of :data:`BARS`. Every kernel's
output is checked against the float64 reference within its derived bound before its time is
reported. On the simulator the sizes are tiny, the timings wall clock, and every bar's ratio and
verdict ``None``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import time_cpu, time_cuda
from gpudl.checks import check_bool, check_int, check_ints
from gpudl.kernels import attention as attention_kernels
from gpudl.kernels import attention_error
from gpudl.kernels.arrays import poisoned

__all__ = ["BARS", "VIEWS", "GPU_S", "GPU_HEADS", "HEAD_DIM", "attention_flops", "run"]

#: The speed goals, time ratios at s = 4096, d = 64. torch's flash backend takes no float32,
#: so the FP32 goal is held against SDPA's memory-efficient backend, the fused kernel torch
#: runs in FP32.
BARS = (
    {"name": "fused_faster_than_v1",
     "what": "v2_fused's time over v1_three_kernels's at s = 4096, d = 64, FP32, not causal "
             "(below 1: the fused kernel is faster)",
     "numerator": "attention_v2_fused s={s}",
     "denominator": "attention_v1_three_kernels s={s}",
     "threshold": 1.0, "compare": "<=", "rate": "median_s"},
    {"name": "fused_within_3x_of_torch_sdpa",
     "what": "v2_fused's time over torch SDPA's fused FP32 backend (memory-efficient) at "
             "s = 4096, d = 64, not causal",
     "numerator": "attention_v2_fused s={s}",
     "denominator": "torch sdpa efficient fp32 s={s}",
     "threshold": 3.0, "compare": "<=", "rate": "median_s"},
    {"name": "triton_flash_vs_torch_flash",
     "what": "attention_v4_triton_flash_float16's TFLOP/s (Triton, FP16) over torch SDPA's "
             "flash backend's in FP16 at s = 4096, d = 64, not causal",
     "numerator": "attention_v4_triton_flash_float16 s={s}",
     "denominator": "torch sdpa flash fp16 s={s}",
     "threshold": 0.7, "rate": "tflops"},
)
#: The book's boxes of this topic (``{gpudl-measured} attention <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"times": ("fused_faster_than_v1", "fused_within_3x_of_torch_sdpa",
                   "triton_flash_vs_torch_flash")}
#: The sequence lengths and the heads timed on a GPU, and the head size (on both backends).
GPU_S, GPU_HEADS, HEAD_DIM = (1024, 4096), 16, 64


def attention_flops(heads: int, s: int, d: int, causal: bool = False) -> int:
    """Flops of attention's two products, ``Q K^T`` and ``P V``: ``2 d`` per (query, key)
    pair each, over all ``s^2`` pairs, or the ``s (s + 1) / 2`` a causal mask leaves."""
    for name, value in (("heads", heads), ("s", s), ("d", d)):
        check_int(name, value, 1)
    check_bool("causal", causal)
    pairs = s * (s + 1) // 2 if causal else s * s
    return 4 * heads * d * pairs


def _sdpa_backends() -> dict[str, tuple[Any, torch.dtype]]:
    from torch.nn.attention import SDPBackend

    return {"torch sdpa efficient fp32": (SDPBackend.EFFICIENT_ATTENTION, torch.float32),
            "torch sdpa math fp32": (SDPBackend.MATH, torch.float32),
            "torch sdpa flash bf16": (SDPBackend.FLASH_ATTENTION, torch.bfloat16),
            "torch sdpa flash fp16": (SDPBackend.FLASH_ATTENTION, torch.float16)}


def run(s_values: Sequence[int] | None = None, heads: int | None = None,
        d: int = HEAD_DIM) -> dict:
    """Time both variants and torch's SDPA at each sequence length of ``s_values`` (default
    1024 and 4096 on a GPU, 20 on the simulator) for ``heads`` heads (16; 1) of size ``d``,
    not causal. On the simulator torch runs on the CPU with its default backend."""
    s_values = backend.pick(gpu=GPU_S, sim=(20,)) if s_values is None else s_values
    heads = backend.pick(gpu=GPU_HEADS, sim=1) if heads is None else heads
    check_ints("s_values", s_values, 1)
    check_int("heads", heads, 1)
    check_int("d", d, 1, attention_kernels.MAX_HEAD_DIM)
    timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=None, sim=1)}
    rows = []
    for s in s_values:
        rows += _attention_rows(heads, s, d, timed)
    return {"heads": heads, "d": d, "s_values": list(s_values), "rows": rows,
            "bars": evaluate_bars(BARS, rows, s=str(max(s_values)))}


def _attention_rows(heads: int, s: int, d: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(s)
    host = [rng.standard_normal((heads, s, d)).astype(np.float32) for _ in range(3)]
    q, k, v = (cuda.to_device(x) for x in host)
    # head 0 is checked against the float64 reference within the derived bound
    head0 = [x[:1] for x in host]
    ref, bound = attention_kernels.reference(*head0)[0], attention_error.error_bound(*head0)[0]
    n_flops = attention_flops(heads, s, d)
    keys = {"s": s, "d": d, "heads": heads, "causal": False}
    rows = []
    workspace = (poisoned((heads, s, s)), poisoned((heads, s, s)))
    checks = {"float32": (q, k, v, ref, bound)}  # each format's inputs, reference and bound
    for variant, launch in attention_kernels.VARIANTS.items():
        precision = attention_kernels.precision(variant)
        if precision not in checks:  # the inputs rounded to it, checked against their own
            rounded = [x.astype(precision) for x in host]
            wide = [x[:1].astype(np.float64) for x in rounded]
            checks[precision] = (*(cuda.to_device(x) for x in rounded),
                                 attention_kernels.reference(*wide)[0],
                                 attention_error.error_bound(*wide, False, precision)[0])
        q_v, k_v, v_v, ref_v, bound_v = checks[precision]
        o, lse = poisoned((heads, s, d), precision), poisoned((heads, s))
        extra = {"workspace": workspace} if variant == "v1_three_kernels" else {}
        timing = time_cuda(lambda launch=launch, o=o, lse=lse, extra=extra, x=(q_v, k_v, v_v):
                           launch(*x, o, lse, False, **extra), **timed)
        got = o.copy_to_host()
        if np.isnan(got).any() or not (np.abs(got[:1] - ref_v) <= bound_v).all():
            raise RuntimeError(f"{variant} at s = {s}: output outside its error bound")
        n_bytes = sum(attention_kernels.traffic(variant, heads, s, d).values())
        rows.append(row(f"attention_{variant} s={s}", timing, n_bytes, n_flops, **keys,
                        precision=precision))
    rows += _torch_attention_rows(host, ref, bound, n_flops, keys, timed)
    return rows


def _torch_attention_rows(host: list[np.ndarray], ref: np.ndarray, bound: np.ndarray,
                          n_flops: int, keys: dict, timed: dict) -> list[dict]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if backend.is_simulator():  # torch on the CPU: its default backend, a CPU timing
        tensors = [torch.from_numpy(x) for x in host]
        timing = time_cpu(sdpa, *tensors, **timed)
        return [row(f"torch sdpa cpu s={keys['s']}", timing, None, n_flops, **keys)]
    from torch.nn.attention import sdpa_kernel

    rows = []
    for name, (which, dtype) in _sdpa_backends().items():
        tensors = [torch.from_numpy(x).to("cuda", dtype) for x in host]
        with sdpa_kernel(which):
            timing = time_cuda(sdpa, *tensors, **timed)
            out = sdpa(*tensors)[:1].float().cpu().numpy()
        # recorded, not required: torch's kernels are not this book's to fix (a float32
        # backend that used TF32 would fail it)
        within = bool((np.abs(out - ref) <= 2 * bound).all()) if dtype == torch.float32\
            else None
        rows.append(row(f"{name} s={keys['s']}", timing, None, n_flops,
                         within_twice_the_bound=within, **keys))
    return rows
