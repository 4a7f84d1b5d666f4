"""Chapter 3's measurements: every matmul variant against ``torch.matmul`` (cuBLAS, float32 with
TF32 off; float16 for a float16 variant), and the kernel MLP's backward pass against its forward
pass.

Book section: *Chapter 3*, the "Measured on a GPU" boxes of "Matrix multiply, step by step"
and "Counting flops: backward is twice the forward"; the grouped products of a mixture of
experts' layer against their loop (:mod:`gpudl.bench.experts`), *Chapter 11, "Grouped
products"*.

``python -m gpudl bench matmul`` runs :func:`run` and stores ``results/matmul-<backend>.json``.
Every output is checked against torch's before its time is reported.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend, registry

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.bench import evaluate_bars, row
from gpudl.bench.experts import grouped_experts
from gpudl.bench.timing import fp32_matmuls, time_cuda
from gpudl.checks import check_bool, check_ints
from gpudl.kernels import matmul as matmul_kernels
from gpudl.kernels.arrays import EPS32, poisoned

__all__ = ["BARS", "VIEWS", "GPU_SIZES", "MLP_SIZES", "MLP_BATCH", "bench_matmul", "bench_mlp",
           "run"]

#: The variants by the format of their factors: float32 (compared with cuBLAS's SGEMM) and
#: float16 (with its HGEMM).
_BY_FORMAT = {f: [v for v in registry.variant_records("matmul").values() if v.precision == f]
              for f in ("float32", "float16")}
#: The row of torch's float16 product, cuBLAS on the tensor cores.
TORCH_FLOAT16 = "torch float16 n={n}"

#: The speed goals, half of cuBLAS at the largest size (0.7 the aim) for the best float32
#: variant and 0.8 of cuBLAS's float16 product for Triton's float16 kernel at 4096 x 4096 x 4096.
BARS = (
    {"name": "best_matmul_vs_torch",
     "what": "the fastest variant's TFLOP/s over torch.matmul's (float32, TF32 off) at the "
             "largest size",
     "numerator": [f"{v.name} n={{n}}" for v in _BY_FORMAT["float32"]],
     "denominator": "torch n={n}",
     "threshold": 0.50, "rate": "tflops"},
    {"name": "triton_float16_vs_cublas",
     "what": "matmul_v7_triton_float16's TFLOP/s over torch.matmul's in float16 (cuBLAS, "
             "float32 accumulation) at the largest size",
     "numerator": "matmul_v7_triton_float16 n={n}", "denominator": TORCH_FLOAT16,
     "threshold": 0.80, "rate": "tflops"},
)
#: The book's boxes of this topic (``{gpudl-measured} matmul <view>``: Chapter 3's ``gflops``
#: and ``mlp``, Chapter 11's ``experts``) and the bars (of :data:`BARS`) each is held to.
VIEWS = {"gflops": ("best_matmul_vs_torch", "triton_float16_vs_cublas"), "mlp": (),
         "experts": ()}

#: The sizes of the square matrices timed on a GPU.
GPU_SIZES = (1024, 2048, 4096)
#: The larger MLP the backward-over-forward measurement uses, and its batch (on a GPU only).
MLP_SIZES, MLP_BATCH = (1024, 2048, 2048, 10), 8192


def bench_matmul(sizes: tuple[int, ...] | None = None) -> list[dict]:
    """Time every variant and ``torch.matmul`` in float32 (TF32 off) on square matrices.

    ``sizes`` defaults to (1024, 2048, 4096) on a GPU and (48,) on the simulator. One row per
    size and kernel, named ``"<variant> n=<size>"`` (``"torch n=<size>"`` for torch.matmul),
    with ``size``, ``variant``, ``tflops``, ``fraction_of_torch`` (of torch's rate) and
    ``error_over_bound`` (the largest ``|C - C_torch|`` over its bound: at most 1). Every
    output is checked against torch's before its time is reported.
    """
    sizes = backend.pick(gpu=GPU_SIZES, sim=(48,)) if sizes is None else sizes
    check_ints("sizes", sizes, 1)
    with fp32_matmuls("ieee"):  # TF32 would round the inputs to 10-bit mantissas
        return [r for size in sizes for r in _bench_size(size)]


def _bench_size(size: int) -> list[dict]:
    timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=None, sim=1),
             "inner": backend.pick(gpu=3, sim=1)}
    rng = np.random.default_rng(size)
    a_host, b_host = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    device = "cpu" if backend.is_simulator() else "cuda"
    ta, tb = (torch.from_numpy(x).to(device) for x in (a_host, b_host))
    tc = torch.empty_like(ta)
    torch_time = time_cuda(lambda: torch.mm(ta, tb, out=tc), **timed)
    # Both tc and each kernel's output are within error_bound of the exact product: twice it.
    bound = 2 * size * EPS32 * torch.mm(ta.abs(), tb.abs())
    a, b = cuda.to_device(a_host), cuda.to_device(b_host)
    n_flops = matmul_kernels.flops(size, size, size)
    rows = [row(f"torch n={size}", torch_time, n_flops=n_flops, size=size, variant="torch",
                fraction_of_torch=1.0 if torch_time.meaningful else None,
                error_over_bound=0.0)]
    for variant, launch in matmul_kernels.VARIANTS.items():
        if variant in {v.key for v in _BY_FORMAT["float16"]}:
            continue  # timed below, against cuBLAS's float16 product
        c = poisoned((size, size))
        timing = time_cuda(launch, a, b, c, **timed)
        ratio = float(((torch.as_tensor(c, device=device) - tc).abs() / bound).max())
        if not ratio <= 1:  # also catches NaN
            raise RuntimeError(f"{variant} at {size}: |C - C_torch| is {ratio:.3g} times its "
                               "error bound")
        rows.append(row(f"matmul_{variant} n={size}", timing, n_flops=n_flops, size=size,
                        variant=variant, error_over_bound=ratio,
                        fraction_of_torch=(torch_time.median / timing.median
                                           if timing.meaningful else None)))
    if _BY_FORMAT["float16"]:
        rows += _float16_rows(a_host, b_host, timed)
    return rows


def _float16_rows(a_host: np.ndarray, b_host: np.ndarray, timed: dict) -> list[dict]:
    """torch's float16 product and each float16 variant's on the factors rounded to float16,
    each checked against the float64 product of those factors within the float16 bound (the
    first 256 rows: a float64 product of the whole would cost the GPU run seconds)."""
    size = a_host.shape[0]
    a16, b16 = (x.astype(np.float16) for x in (a_host, b_host))
    checked = [x.astype(np.float64) for x in (a16[:256], b16)]
    exact = matmul_kernels.reference(*checked)
    bound = matmul_kernels.error_bound(*checked, "float16")
    device = "cpu" if backend.is_simulator() else "cuda"
    ta, tb = (torch.from_numpy(x).to(device) for x in (a16, b16))
    tc = torch.empty_like(ta)
    torch_time = time_cuda(lambda: torch.mm(ta, tb, out=tc), **timed)
    n_flops = matmul_kernels.flops(size, size, size)
    rows = [row(TORCH_FLOAT16.format(n=size), torch_time, n_flops=n_flops, size=size,
                variant="torch float16", precision="float16",
                fraction_of_torch=1.0 if torch_time.meaningful else None,
                error_over_bound=_over_bound(tc[:256].float().cpu().numpy(), exact, 2 * bound))]
    a, b = cuda.to_device(a16), cuda.to_device(b16)
    for v in _BY_FORMAT["float16"]:
        c = poisoned((size, size), "float16")
        timing = time_cuda(v.launch, a, b, c, **timed)
        ratio = _over_bound(c.copy_to_host()[:256], exact, bound)
        if not ratio <= 1:
            raise RuntimeError(f"{v.key} at {size}: |C - C_exact| is {ratio:.3g} times its "
                               "float16 error bound")
        rows.append(row(f"{v.name} n={size}", timing, n_flops=n_flops, size=size,
                        variant=v.key, precision="float16", error_over_bound=ratio,
                        fraction_of_torch=(torch_time.median / timing.median
                                           if timing.meaningful else None)))
    return rows


def _over_bound(got: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> float:
    """The largest ``|got - exact| / bound`` (NaN if any element of ``got`` is NaN)."""
    return float((np.abs(got.astype(np.float64) - exact) / bound).max())


def bench_mlp() -> list[dict]:
    """The forward pass of the kernel MLP :data:`MLP_SIZES` on a batch of :data:`MLP_BATCH`,
    and its forward plus backward pass (``loss_and_grads``), the data already on the device.
    On a GPU only: the simulator would take hours."""
    from gpudl.models import KernelMLP

    if backend.is_simulator():
        print("  mlp: not measured (simulator)", flush=True)
        return []
    model = KernelMLP(MLP_SIZES, seed=0)
    rng = np.random.default_rng(0)
    # device arrays in, outputs poisoned on the device: no host copies of the large tensors
    xb = cuda.to_device(rng.random((MLP_BATCH, MLP_SIZES[0]), dtype=np.float32))
    yb = cuda.to_device(rng.integers(0, MLP_SIZES[-1], MLP_BATCH))
    weights = sum(a * b for a, b in zip(MLP_SIZES[:-1], MLP_SIZES[1:], strict=False))
    keys: dict[str, Any] = {"sizes": list(MLP_SIZES), "batch": MLP_BATCH}
    forward = time_cuda(model.forward, xb, warmup=2, repeats=10)
    step = time_cuda(model.loss_and_grads, xb, yb, warmup=2, repeats=10)
    return [row("mlp forward", forward, n_flops=2 * weights * MLP_BATCH, **keys),
            row("mlp forward+backward", step, n_flops=6 * weights * MLP_BATCH, **keys)]


def run(sizes: tuple[int, ...] | None = None, mlp: bool = True, experts: bool = True) -> dict:
    """:func:`bench_matmul` and (unless switched off) :func:`bench_mlp`, with the speed goal
    at the largest size and ``backward_over_forward`` (the backward pass's time over the
    forward's; ``None`` where not measured); then, unless switched off, the grouped expert
    products against their loop (:func:`gpudl.bench.experts.grouped_experts`, rows of group
    ``"experts"``)."""
    check_bool("mlp", mlp)
    check_bool("experts", experts)
    rows = bench_matmul(sizes)
    largest = max(r["size"] for r in rows)
    mlp_rows = bench_mlp() if mlp else []
    ratio = None
    if mlp_rows:
        forward, step = (r["median_s"] for r in mlp_rows)
        ratio = (step - forward) / forward
    expert_rows = grouped_experts() if experts else []
    return {"sizes": sorted({r["size"] for r in rows}), "rows": rows + mlp_rows + expert_rows,
            "bars": evaluate_bars(BARS, rows, n=largest), "backward_over_forward": ratio}
