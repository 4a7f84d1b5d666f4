"""Chapter 8's tensor-core measurements: ``torch.matmul`` in FP32, TF32, BF16 and FP16 against
the datasheet peaks, and the tensor-core matmul against Chapter 3's best FP32 kernels.

Book section: Chapter 8, the "Measured on a GPU" box of "A tensor-core matmul".

``python -m gpudl bench tensorcores`` runs :func:`run` and stores
``results/tensorcores-<backend>.json``, with the speed goal of :data:`BARS`. Every kernel's
output is checked within its error bound before its time is reported. On the simulator the
sizes are tiny, torch runs on the CPU, and every bar's ratio and verdict ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import fp32_matmuls, time_cpu, time_cuda
from gpudl.checks import check_ints, check_real
from gpudl.hardware import SPECS, GpuSpec, describe
from gpudl.kernels import matmul as matmul_kernels
from gpudl.kernels import tensor_core_matmul
from gpudl.kernels.arrays import poisoned

__all__ = ["BARS", "VIEWS", "TORCH_DTYPES", "GPU_SIZES", "GPU_KERNEL_SIZES", "datasheet_spec",
           "run"]

#: The speed goal of the tensor-core topic, the faster tensor-core matmul's rate over the
#: faster of Chapter 3's two register-blocked FP32 kernels (v1 to v3 are slower by design).
BARS = (
    {
        "name": "tensor_core_faster_than_best_simt",
        "what": "the faster tensor-core matmul's TFLOP/s over the faster of v4_register_1d and "
        "v5_register_2d (FP32 SIMT) at n = 4096",
        "numerator": [f"tensor_core_{v} n={{n}}" for v in tensor_core_matmul.VARIANTS],
        "denominator": "{best_simt}",
        "threshold": 1.0,
        "compare": ">=",
        "rate": "tflops",
    },
)
#: The book's boxes of this topic (``{gpudl-measured} tensorcores <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"torch": (), "kernels": ("tensor_core_faster_than_best_simt",)}

#: The sizes of torch.matmul's square matrices timed on a GPU, and of the kernels'.
GPU_SIZES, GPU_KERNEL_SIZES = (1024, 2048, 4096, 8192), (2048, 4096)

#: torch.matmul precisions measured, and the datasheet field (gpudl.hardware.PRECISIONS) each
#: is held to. "tf32" is float32 tensors with TF32 allowed.
TORCH_DTYPES = {"fp32": (torch.float32, "fp32"), "tf32": (torch.float32, "tf32"),
                "bf16": (torch.bfloat16, "bf16"), "fp16": (torch.float16, "fp16")}


def datasheet_spec(device_name: str, memory_bytes: int | None = None) -> GpuSpec | None:
    """The :data:`gpudl.hardware.SPECS` entry of a device called ``device_name`` by the
    driver ("NVIDIA H100 80GB HBM3" is "H100 SXM", "NVIDIA A100-SXM4-80GB" an A100): the
    entries named after its model, the one whose memory is nearest ``memory_bytes`` if
    several; None if none matches."""
    if not isinstance(device_name, str):
        raise TypeError(f"device_name must be a str, got {type(device_name).__name__}")
    if memory_bytes is not None:
        check_real("memory_bytes", memory_bytes, 0)
    words = device_name.replace("-", " ").split()
    words = [w for w in words if w not in ("NVIDIA", "GeForce", "Tesla")]
    if not words:
        return None
    model = words[:2] if words[0] == "RTX" else words[:1]
    found = [spec for name, spec in SPECS.items() if name.split()[:len(model)] == model]
    if len(found) > 1 and memory_bytes is not None:
        found.sort(key=lambda spec: abs(spec.memory_gb * 1e9 - memory_bytes))
    return found[0] if found else None


def run(sizes: Sequence[int] | None = None,
                    kernel_sizes: Sequence[int] | None = None) -> dict:
    """``torch.matmul`` in each of :data:`TORCH_DTYPES` at ``sizes`` (1024 to 8192 on a GPU;
    64 on the CPU), each as a fraction of the datasheet peak where the GPU is in
    :data:`gpudl.hardware.SPECS`; then the tensor-core matmuls and Chapter 3's v4 and v5 at
    ``kernel_sizes`` (2048, 4096; 32 on the simulator)."""
    sizes = backend.pick(gpu=GPU_SIZES, sim=(64,)) if sizes is None else sizes
    kernel_sizes = backend.pick(gpu=GPU_KERNEL_SIZES, sim=(32,)) if kernel_sizes is None\
        else kernel_sizes
    check_ints("sizes", sizes, 1)
    check_ints("kernel_sizes", kernel_sizes, 1)
    info = describe()
    spec = None if backend.is_simulator() else datasheet_spec(info.name, info.memory_bytes)
    timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=5, sim=1)}
    rows = [r for n in sizes for r in _torch_matmul_rows(n, spec, timed)]
    for n in kernel_sizes:
        rows += _kernel_matmul_rows(n, timed)
    n = max(kernel_sizes)
    simt = [r for r in rows if r.get("variant", "").removeprefix("matmul_") in
            matmul_kernels.VARIANTS and r["size"] == n]
    best = max(simt, key=lambda r: r["tflops"] or 0.0)["name"]
    return {"gpu": info.name, "datasheet": None if spec is None else spec.name,
            "rows": rows, "bars": evaluate_bars(BARS, rows, n=str(n), best_simt=best)}


def _torch_matmul_rows(n: int, spec: GpuSpec | None, timed: dict) -> list[dict]:
    on_gpu = not backend.is_simulator()
    rows = []
    for name, (dtype, precision) in TORCH_DTYPES.items():
        generator = torch.Generator().manual_seed(n)
        a, b = (torch.randn(n, n, generator=generator).to(
            "cuda" if on_gpu else "cpu", dtype) for _ in range(2))
        with fp32_matmuls("tf32" if name == "tf32" else "ieee"):
            timing = (time_cuda if on_gpu else time_cpu)(torch.matmul, a, b, **timed)
        peak = None if spec is None else getattr(spec, _field(precision))
        measured = row(f"torch {name} n={n}", timing, None, 2 * n**3, size=n, dtype=name,
                       device="cuda" if on_gpu else "cpu", peak_tflops=peak)
        measured["fraction_of_peak"] = (measured["tflops"] / peak
                                        if measured["tflops"] and peak and on_gpu else None)
        rows.append(measured)
    return rows


def _field(precision: str) -> str:
    from gpudl.hardware import PRECISIONS

    return PRECISIONS[precision]


def _kernel_matmul_rows(n: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(n)
    a_host, b_host = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    a, b = cuda.to_device(a_host), cuda.to_device(b_host)
    n_flops = matmul_kernels.flops(n, n, n)
    rows = []
    if not backend.is_simulator():
        tensor_core_matmul.check_tensor_cores()
    a_words, bt_words = tensor_core_matmul.packed(a), tensor_core_matmul.packed(b, transpose=True)
    for variant, launch in tensor_core_matmul.VARIANTS.items():
        c = poisoned((n, n))
        timing = time_cuda(launch, a_words, bt_words, c, **timed)
        _check(
            c,
            a_host,
            b_host,
            tensor_core_matmul.error_bound,
            tensor_core_matmul.reference,
            f"tensor_core_{variant}",
        )
        rows.append(row(f"tensor_core_{variant} n={n}", timing, None, n_flops, size=n,
                        variant=f"tensor_core_{variant}"))
    for variant in ("v4_register_1d", "v5_register_2d"):
        c = poisoned((n, n))
        timing = time_cuda(matmul_kernels.VARIANTS[variant], a, b, c, **timed)
        _check(c, a_host, b_host, matmul_kernels.error_bound, matmul_kernels.reference, variant)
        rows.append(row(f"matmul_{variant} n={n}", timing, None, n_flops, size=n,
                        variant=f"matmul_{variant}"))
    return rows


def _check(c: Any, a: np.ndarray, b: np.ndarray, bound: Callable, reference: Callable,
           name: str) -> None:
    """``c`` within ``bound`` of ``reference`` on its first 64 rows (a full float64 check at
    n = 4096 would cost the host minutes)."""
    rows = min(64, a.shape[0])
    got = c.copy_to_host()[:rows]
    if not (np.abs(got - reference(a[:rows], b)) <= bound(a[:rows], b)).all():
        raise RuntimeError(f"{name}: output outside its error bound")
