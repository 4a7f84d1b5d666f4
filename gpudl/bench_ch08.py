"""Chapter 8's measurements: attention (the two variants against torch's SDPA) and tensor
cores (torch.matmul in FP32, TF32, BF16 and FP16 against the datasheet peaks; the tensor-core
matmul against Chapter 3's best FP32 kernel).

Book section: Chapter 8, the "Measured on a GPU" boxes of "Attention from the book's kernels"
and "Tensor cores".

:func:`run_attention` and :func:`run_tensorcores` return the body of a result file in the
team's shape (``rows``, ``bars`` and the topic's own keys; the writer adds the machine, the
commit and the date), with the speed goals declared as data in :data:`ATTENTION_BARS` and
:data:`TENSORCORE_BARS`. Every kernel's output is checked before its time is reported. On the
simulator the sizes are tiny, the timings wall clock, and every bar's ratio and verdict
``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.hardware import SPECS, GpuSpec, describe
from gpudl.kernels import attention as at
from gpudl.kernels import matmul as mm
from gpudl.kernels import tensor_core_matmul as tc
from gpudl.kernels.arrays import poisoned
from gpudl.timing import Timing, gflops, time_cpu, time_cuda

__all__ = ["ATTENTION_BARS", "TENSORCORE_BARS", "TORCH_DTYPES", "datasheet_spec",
           "attention_flops", "run_attention", "run_tensorcores"]

#: The speed goals of the attention topic (issue "Chapter 8"): time ratios at s = 4096,
#: d = 64. torch's flash backend takes no float32, so the FP32 goal is held against SDPA's
#: memory-efficient backend, the fused kernel torch runs in FP32.
ATTENTION_BARS = (
    {"name": "fused_faster_than_v1",
     "what": "v2_fused's time over v1_three_kernels's at s = 4096, d = 64, FP32, not causal "
             "(below 1: the fused kernel is faster)",
     "numerator": "v2_fused s={s}", "denominator": "v1_three_kernels s={s}",
     "threshold": 1.0, "compare": "<=", "rate": "median_s"},
    {"name": "fused_within_3x_of_torch_sdpa",
     "what": "v2_fused's time over torch SDPA's fused FP32 backend (memory-efficient) at "
             "s = 4096, d = 64, not causal",
     "numerator": "v2_fused s={s}", "denominator": "torch sdpa efficient fp32 s={s}",
     "threshold": 3.0, "compare": "<=", "rate": "median_s"},
)

#: The speed goal of the tensor-core topic: the faster tensor-core matmul's rate over the
#: faster of Chapter 3's two register-blocked FP32 kernels (v1 to v3 are slower by design).
TENSORCORE_BARS = (
    {"name": "tensor_core_faster_than_best_simt",
     "what": "the faster tensor-core matmul's TFLOP/s over the faster of v4_register_1d and "
             "v5_register_2d (FP32 SIMT) at n = 4096",
     "numerator": [f"tc {v} n={{n}}" for v in tc.VARIANTS], "denominator": "{best_simt}",
     "threshold": 1.0, "compare": ">=", "rate": "tflops"},
)

#: torch.matmul precisions measured, and the datasheet field (gpudl.hardware.PRECISIONS) each
#: is held to. "tf32" is float32 tensors with TF32 allowed.
TORCH_DTYPES = {"fp32": (torch.float32, "fp32"), "tf32": (torch.float32, "tf32"),
                "bf16": (torch.bfloat16, "bf16"), "fp16": (torch.float16, "fp16")}


# ------------------------------------------------------------------------------------------
# Rows and bars in the team's shape (gpudl.bench.row / evaluate_bars once merged)
# ------------------------------------------------------------------------------------------


def _row(name: str, timing: Timing, n_bytes: int | None = None,
         n_flops: float | None = None, **extra: Any) -> dict:
    meaningful = timing.meaningful
    out = {"name": name, "median_s": timing.median, "min_s": timing.min,
           "max_s": timing.max, "runs": len(timing.samples), "method": timing.method,
           "meaningful": meaningful, "bytes": n_bytes,
           "gbps": n_bytes / timing.median / 1e9 if meaningful and n_bytes else None,
           "flops": n_flops,
           "tflops": gflops(n_flops, timing.median) / 1e3 if meaningful and n_flops else None}
    print(f"  {name}: {timing}", flush=True)
    return out | extra


def _evaluate(specs: Sequence[dict], rows: Sequence[dict], **names: str) -> list[dict]:
    by_name = {r["name"]: r for r in rows}
    bars = []
    for spec in specs:
        rate, compare = spec["rate"], spec["compare"]
        numerator = spec["numerator"]
        if not isinstance(numerator, str):  # candidates: the fastest present
            present = [n.format(**names) for n in numerator if n.format(**names) in by_name]
            better = min if rate == "median_s" else max
            numerator = better(present, key=lambda n: by_name[n][rate] or 0.0, default="")
        numerator, denominator = numerator.format(**names), spec["denominator"].format(**names)
        num, den = by_name.get(numerator), by_name.get(denominator)
        ratio = None
        if not backend.is_simulator() and num and den and num[rate] and den[rate]:
            ratio = num[rate] / den[rate]
        verdict = None if ratio is None else bool(
            ratio >= spec["threshold"] if compare == ">=" else ratio <= spec["threshold"])
        bars.append({"name": spec["name"], "what": spec["what"], "numerator": numerator,
                     "denominator": denominator, "rate": rate, "ratio": ratio,
                     "compare": compare, "threshold": float(spec["threshold"]),
                     "verdict": verdict})
    return bars


# ------------------------------------------------------------------------------------------
# Attention
# ------------------------------------------------------------------------------------------


def attention_flops(heads: int, s: int, d: int, causal: bool = False) -> int:
    """Flops of attention's two products, ``Q K^T`` and ``P V``: ``2 d`` per (query, key)
    pair each, over all ``s^2`` pairs, or the ``s (s + 1) / 2`` a causal mask leaves."""
    pairs = s * (s + 1) // 2 if causal else s * s
    return 4 * heads * d * pairs


def _sdpa_backends() -> dict[str, tuple[Any, torch.dtype]]:
    from torch.nn.attention import SDPBackend

    return {"torch sdpa efficient fp32": (SDPBackend.EFFICIENT_ATTENTION, torch.float32),
            "torch sdpa math fp32": (SDPBackend.MATH, torch.float32),
            "torch sdpa flash bf16": (SDPBackend.FLASH_ATTENTION, torch.bfloat16)}


def run_attention(s_values: Sequence[int] | None = None, heads: int | None = None,
                  d: int = 64) -> dict:
    """Time both variants and torch's SDPA at each sequence length of ``s_values`` (default
    1024 and 4096 on a GPU, 20 on the simulator) for ``heads`` heads (16; 1) of size ``d``,
    not causal. On the simulator torch runs on the CPU with its default backend."""
    s_values = backend.pick(gpu=(1024, 4096), sim=(20,)) if s_values is None else s_values
    heads = backend.pick(gpu=16, sim=1) if heads is None else heads
    timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=10, sim=1)}
    rows = []
    for s in s_values:
        rows += _attention_rows(heads, s, d, timed)
    return {"heads": heads, "d": d, "s_values": list(s_values), "rows": rows,
            "bars": _evaluate(ATTENTION_BARS, rows, s=str(max(s_values)))}


def _attention_rows(heads: int, s: int, d: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(s)
    host = [rng.standard_normal((heads, s, d)).astype(np.float32) for _ in range(3)]
    q, k, v = (cuda.to_device(x) for x in host)
    # head 0 is checked against the float64 reference within the derived bound
    ref, bound = at.reference(*(x[:1] for x in host))[0], at.error_bound(*(x[:1] for x in host))[0]
    n_flops = attention_flops(heads, s, d)
    keys = {"s": s, "d": d, "heads": heads, "causal": False}
    rows = []
    workspace = (poisoned((heads, s, s)), poisoned((heads, s, s)))
    for variant, launch in at.VARIANTS.items():
        o, lse = poisoned((heads, s, d)), poisoned((heads, s))
        extra = {"workspace": workspace} if variant == "v1_three_kernels" else {}
        timing = time_cuda(lambda launch=launch, o=o, lse=lse, extra=extra: launch(
            q, k, v, o, lse, False, **extra), **timed)
        got = o.copy_to_host()
        if np.isnan(got).any() or not (np.abs(got[:1] - ref) <= bound).all():
            raise RuntimeError(f"{variant} at s = {s}: output outside its error bound")
        n_bytes = sum(at.traffic(variant, heads, s, d).values())
        rows.append(_row(f"{variant} s={s}", timing, n_bytes, n_flops, **keys))
    rows += _torch_attention_rows(host, ref, bound, n_flops, keys, timed)
    return rows


def _torch_attention_rows(host: list[np.ndarray], ref: np.ndarray, bound: np.ndarray,
                          n_flops: int, keys: dict, timed: dict) -> list[dict]:
    sdpa = torch.nn.functional.scaled_dot_product_attention
    if backend.is_simulator():  # torch on the CPU: its default backend, a CPU timing
        tensors = [torch.from_numpy(x) for x in host]
        timing = time_cpu(sdpa, *tensors, **timed)
        return [_row(f"torch sdpa cpu s={keys['s']}", timing, None, n_flops, **keys)]
    from torch.nn.attention import sdpa_kernel

    rows = []
    for name, (which, dtype) in _sdpa_backends().items():
        tensors = [torch.from_numpy(x).to("cuda", dtype) for x in host]
        with sdpa_kernel(which):
            timing = time_cuda(sdpa, *tensors, **timed)
            out = sdpa(*tensors)[:1].float().cpu().numpy()
        # recorded, not required: torch's kernels are not this book's to fix (a float32
        # backend that used TF32 would fail it)
        within = bool((np.abs(out - ref) <= 2 * bound).all()) if dtype == torch.float32 \
            else None
        rows.append(_row(f"{name} s={keys['s']}", timing, None, n_flops,
                         within_twice_the_bound=within, **keys))
    return rows


# ------------------------------------------------------------------------------------------
# Tensor cores
# ------------------------------------------------------------------------------------------


def datasheet_spec(device_name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The :data:`gpudl.hardware.SPECS` entry of a device called ``device_name`` by the
    driver ("NVIDIA H100 80GB HBM3" is "H100 SXM", "NVIDIA A100-SXM4-80GB" an A100): the
    entries named after its model, the one whose memory is nearest ``memory_bytes`` if
    several; None if none matches."""
    words = device_name.replace("-", " ").split()
    words = [w for w in words if w not in ("NVIDIA", "GeForce", "Tesla")]
    if not words:
        return None
    model = words[:2] if words[0] == "RTX" else words[:1]
    found = [spec for name, spec in SPECS.items() if name.split()[:len(model)] == model]
    if len(found) > 1 and memory_bytes is not None:
        found.sort(key=lambda spec: abs(spec.memory_gb * 1e9 - memory_bytes))
    return found[0] if found else None


def run_tensorcores(sizes: Sequence[int] | None = None,
                    kernel_sizes: Sequence[int] | None = None) -> dict:
    """``torch.matmul`` in each of :data:`TORCH_DTYPES` at ``sizes`` (1024 to 8192 on a GPU;
    64 on the CPU), each as a fraction of the datasheet peak where the GPU is in
    :data:`gpudl.hardware.SPECS`; then the tensor-core matmuls and Chapter 3's v4 and v5 at
    ``kernel_sizes`` (2048, 4096; 32 on the simulator)."""
    sizes = backend.pick(gpu=(1024, 2048, 4096, 8192), sim=(64,)) if sizes is None else sizes
    kernel_sizes = backend.pick(gpu=(2048, 4096), sim=(32,)) if kernel_sizes is None \
        else kernel_sizes
    info = describe()
    spec = None if backend.is_simulator() else datasheet_spec(info.name, info.memory_bytes)
    timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=5, sim=1)}
    previous = torch.backends.cuda.matmul.allow_tf32
    try:
        rows = [r for n in sizes for r in _torch_matmul_rows(n, spec, timed)]
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    for n in kernel_sizes:
        rows += _kernel_matmul_rows(n, timed)
    n = max(kernel_sizes)
    simt = [r for r in rows if r.get("variant") in mm.VARIANTS and r["size"] == n]
    best = max(simt, key=lambda r: r["tflops"] or 0.0)["name"]
    return {"gpu": info.name, "datasheet": None if spec is None else spec.name,
            "rows": rows, "bars": _evaluate(TENSORCORE_BARS, rows, n=str(n), best_simt=best)}


def _torch_matmul_rows(n: int, spec: GpuSpec | None, timed: dict) -> list[dict]:
    on_gpu = not backend.is_simulator()
    rows = []
    for name, (dtype, precision) in TORCH_DTYPES.items():
        generator = torch.Generator().manual_seed(n)
        a, b = (torch.randn(n, n, generator=generator).to(
            "cuda" if on_gpu else "cpu", dtype) for _ in range(2))
        torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        timing = (time_cuda if on_gpu else time_cpu)(torch.matmul, a, b, **timed)
        peak = None if spec is None else getattr(spec, _field(precision))
        row = _row(f"torch {name} n={n}", timing, None, 2 * n**3, size=n, dtype=name,
                   device="cuda" if on_gpu else "cpu", peak_tflops=peak)
        row["fraction_of_peak"] = (row["tflops"] / peak if row["tflops"] and peak and on_gpu
                                   else None)
        rows.append(row)
    return rows


def _field(precision: str) -> str:
    from gpudl.hardware import PRECISIONS

    return PRECISIONS[precision]


def _kernel_matmul_rows(n: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(n)
    a_host, b_host = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    a, b = cuda.to_device(a_host), cuda.to_device(b_host)
    n_flops = mm.flops(n, n, n)
    rows = []
    if not backend.is_simulator():
        tc.check_tensor_cores()
    a_words, bt_words = tc.packed(a), tc.packed(b, transpose=True)
    for variant, launch in tc.VARIANTS.items():
        c = poisoned((n, n))
        timing = time_cuda(launch, a_words, bt_words, c, **timed)
        _check(c, a_host, b_host, tc.error_bound, tc.reference, f"tc {variant}")
        rows.append(_row(f"tc {variant} n={n}", timing, None, n_flops, size=n,
                         variant=f"tc {variant}"))
    for variant in ("v4_register_1d", "v5_register_2d"):
        c = poisoned((n, n))
        timing = time_cuda(mm.VARIANTS[variant], a, b, c, **timed)
        _check(c, a_host, b_host, mm.error_bound, mm.reference, variant)
        rows.append(_row(f"{variant} n={n}", timing, None, n_flops, size=n, variant=variant))
    return rows


def _check(c: Any, a: np.ndarray, b: np.ndarray, bound: Callable, reference: Callable,
           name: str) -> None:
    """``c`` within ``bound`` of ``reference`` on its first 64 rows (a full float64 check at
    n = 4096 would cost the host minutes)."""
    rows = min(64, a.shape[0])
    got = c.copy_to_host()[:rows]
    if not (np.abs(got - reference(a[:rows], b)) <= bound(a[:rows], b)).all():
        raise RuntimeError(f"{name}: output outside its error bound")
