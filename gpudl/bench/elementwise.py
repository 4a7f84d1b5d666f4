"""Chapter 1's measurements: vector add and SAXPY against a copy, CPU against GPU, divergence.

Book section: Chapter 1, the "Measured on a GPU" boxes of "Threads, blocks, grids and warps",
"Divergence" and "CPU and GPU on the same problem".

``python -m gpudl bench elementwise`` runs :func:`run` and stores
``results/elementwise-<backend>.json``. Every kernel's output is checked against its reference
before its time is reported.
"""

from __future__ import annotations

import os

from gpudl import backend, registry

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import time_cpu, time_cuda
from gpudl.checks import check_int
from gpudl.kernels import arrays, divergence
from gpudl.kernels import elementwise as elementwise_kernels

__all__ = ["BARS", "GROUPS", "REFERENCE", "VIEWS", "GPU_N", "run"]

#: The row every streaming kernel's bandwidth is compared with, a torch device-to-device copy.
REFERENCE = "torch copy"
#: The rows' groups (the kernels against the copy, SAXPY on the CPU and the GPU, divergence).
GROUPS = ("bandwidth", "cpu_vs_gpu", "divergence")
_VECTOR_ADD = registry.variant_records("vector_add")
#: Elements of each vector timed on a GPU (the simulator's are tiny).
GPU_N = 1 << 26

#: The speed goals of the issue on GPU speed, a streaming kernel near a device copy's bandwidth,
#: and parity divergence costing both paths.
BARS = (
    {"name": "vector_add_v2_vs_torch_copy",
     "what": "vector_add v2's bandwidth over a torch device-to-device copy's, same run",
     "numerator": _VECTOR_ADD["v2_grid_stride"].name, "denominator": REFERENCE,
     "threshold": 0.90},
    {"name": "vector_add_in_flight_vs_torch_copy",
     "what": "the faster vector_add with bytes in flight (v3: K loads per thread, v4: 16-byte "
             "loads) over a torch device-to-device copy's bandwidth, same run",
     "numerator": [_VECTOR_ADD["v3_k_loads"].name, _VECTOR_ADD["v4_vector4"].name],
     "denominator": REFERENCE,
     "threshold": 0.90},
    {"name": "triton_vector_add_vs_torch_copy",
     "what": "vector_add v5's bandwidth (Triton: a program per block of 1,024 elements) over a "
             "torch device-to-device copy's, same run",
     "numerator": "vector_add_v5_triton_block", "denominator": REFERENCE, "threshold": 0.90},
    {"name": "parity_divergence_over_warp",
     "what": "time of the parity-divergent kernel over the warp-uniform one (both paths: ~2)",
     "numerator": "divergence parity", "denominator": "divergence warp", "threshold": 1.5,
     "rate": "median_s"},
)
#: The book's boxes of this topic (``{gpudl-measured} elementwise <view>``): each view, one
#: group of rows, and the bars it is held to.
VIEWS = {"bandwidth": ("vector_add_v2_vs_torch_copy", "vector_add_in_flight_vs_torch_copy",
                       "triton_vector_add_vs_torch_copy"),
         "divergence": ("parity_divergence_over_warp",), "cpu_vs_gpu": ()}


def run(n: int | None = None, repeats: int | None = None) -> dict:
    """Time vector add and SAXPY (every variant) and a torch copy of the same bytes (``group``
    ``"bandwidth"``); SAXPY on the CPU (NumPy, Numba parallel) and on the GPU, kernel alone and
    with its transfers (``"cpu_vs_gpu"``); the divergence demo in both modes
    (``"divergence"``)."""
    n = backend.pick(gpu=GPU_N, sim=4096) if n is None else n
    # on a GPU, samples until the median is stable (gpudl.bench.timing.POLICY)
    repeats = backend.pick(gpu=None, sim=2) if repeats is None else repeats
    check_int("n", n, 1)
    # Ten launches per pair of events on a GPU hide Python's launch overhead (timing.time_cuda).
    timed = {"warmup": backend.pick(gpu=3, sim=1), "repeats": repeats}
    batched = timed | {"inner": backend.pick(gpu=10, sim=1)}
    tpb, alpha = 256, 2.5
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y = cuda.to_device(x_host), cuda.to_device(y_host)
    how = "samples until stable" if repeats is None else f"{repeats} repeats"
    print(f"[elementwise] n = {n:,} float32, {how}, {backend.name()}", flush=True)

    rows = []
    inputs = {"float32": (x_host, y_host, x, y)}  # each format's inputs, made once
    # the variants declared now (a variant added at run time is timed too)
    for v in registry.variant_records("vector_add").values():
        if v.precision not in inputs:
            a, b = (arrays.from_float32(h, v.precision) for h in (x_host, y_host))
            inputs[v.precision] = (a, b, cuda.to_device(a), cuda.to_device(b))
        a, b, a_d, b_d = inputs[v.precision]
        out_v = arrays.poisoned(n, v.precision)  # each variant's own: NaN until it writes
        timing = time_cuda(v.launch, a_d, b_d, out_v, tpb, **batched)
        # one rounding of the exact sum to the variant's format
        exact = elementwise_kernels.reference_vector_add(
            *(arrays.to_float64(h, v.precision) for h in (a, b)))
        got = arrays.to_float64(out_v.copy_to_host(), v.precision)
        if not np.all(np.abs(got - exact) <= arrays.rounding_bound(exact, v.precision)):
            raise RuntimeError(f"{v.name}: a sum is off the exact one by more than one rounding "
                               f"to {v.precision}")
        rows.append(row(v.name, timing, v.bytes_per_element * n, v.flops_per_element * n,
                        group="bandwidth", n=n, precision=v.precision))
    saxpy_expected = elementwise_kernels.reference_saxpy(alpha, x_host, y_host)
    saxpy_timings = {}
    for v in registry.variant_records("saxpy").values():
        out = arrays.poisoned(n)
        timing = time_cuda(v.launch, alpha, x, y, out, tpb, **batched)
        np.testing.assert_allclose(out.copy_to_host(), saxpy_expected, rtol=1e-6, atol=1e-5)
        rows.append(row(v.name, timing, v.bytes_per_element * n, v.flops_per_element * n,
                        group="bandwidth", n=n))
        saxpy_timings[v.key] = timing
    on_gpu = backend.name() == "cuda"
    src = torch.as_tensor(x_host, device="cuda" if on_gpu else "cpu")
    dst = torch.empty_like(src)
    # on the simulator this is a real copy in host memory, timed as CPU code
    timing = time_cuda(dst.copy_, src, **batched) if on_gpu else time_cpu(dst.copy_, src, **timed)
    rows.append(row(REFERENCE, timing, 2 * n * 4, group="bandwidth", n=n,
                    memory="device" if on_gpu else "host"))

    # The CPU rows are real measurements on both backends, so on the simulator they use a size
    # well past the CPU's caches; the simulated kernel is not timed there at all.
    n_cpu = backend.pick(gpu=n, sim=1 << 24)
    x_cpu, y_cpu = (x_host, y_host) if n_cpu == n else (
        rng.standard_normal(n_cpu, dtype=np.float32) for _ in range(2))
    print(f"[elementwise] saxpy, CPU vs GPU, n = {n_cpu:,}", flush=True)
    out_cpu = np.empty_like(x_cpu)  # written in place: page faults are not arithmetic
    expected = elementwise_kernels.reference_saxpy(alpha, x_cpu, y_cpu)
    for name, fn in (("numpy", elementwise_kernels.saxpy_numpy),
                     ("numba_cpu_parallel", elementwise_kernels.saxpy_numba_cpu)):
        np.testing.assert_allclose(fn(alpha, x_cpu, y_cpu, out_cpu), expected, rtol=1e-6,
                                   atol=1e-5)
        timing = time_cpu(fn, alpha, x_cpu, y_cpu, out_cpu, warmup=1, repeats=max(repeats or 5, 5))
        rows.append(row(f"saxpy {name}", timing, 3 * n_cpu * 4, group="cpu_vs_gpu", n=n_cpu))
    if on_gpu:  # the kernel alone is the saxpy_v1_naive row above, same n
        rows.append(row("saxpy cuda_kernel", saxpy_timings["v1_naive"], 3 * n * 4,
                        group="cpu_vs_gpu", n=n))
        rows.append(row("saxpy cuda_with_transfers",
                        time_cuda(elementwise_kernels.saxpy, alpha, x_host, y_host, **timed),
                        3 * n * 4, group="cpu_vs_gpu", n=n))
    else:
        print("  saxpy cuda_kernel, cuda_with_transfers: not measured (simulator)", flush=True)

    n_div = min(n, backend.pick(gpu=1 << 22, sim=1024))
    work = divergence.DEFAULT_WORK
    print(f"[elementwise] divergence, {n_div:,} threads x {work} steps", flush=True)
    codes = cuda.device_array(n_div, dtype=np.int64)
    n_check = min(n_div, 4096)
    for mode in divergence.MODES:
        timing = time_cuda(divergence.launch_divergence, codes, mode, work, tpb, **timed)
        got = codes.copy_to_host()[:n_check]
        expected = divergence.reference_divergence(n_check, mode, work, tpb)
        np.testing.assert_array_equal(got, expected)
        paths = divergence.divergence_paths(mode, min(n_div, 1024), tpb)
        rows.append(row(f"divergence {mode}", timing, group="divergence", n=n_div, work=work,
                        max_paths_per_warp=int(paths.max())))
    return {"n": n, "threads_per_block": tpb, "cpu_threads": os.cpu_count(), "rows": rows,
            "bars": evaluate_bars(BARS, rows)}
