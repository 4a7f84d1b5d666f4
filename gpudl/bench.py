"""Benchmarks that write reference measurements, with the machine they ran on, to results/.

Book section: Chapter 1, the "Measured on a GPU" boxes of "Threads, blocks, grids and warps",
"Divergence" and "CPU and GPU on the same problem". Every number has a provenance, so each
file records the machine it came from.

``python -m gpudl bench elementwise`` runs :func:`bench_elementwise` and writes
``results/elementwise-<backend>.json`` with :func:`write_results`. On the simulator the sizes
are tiny and the file says that its timings are not meaningful.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.hardware import describe
from gpudl.kernels import elementwise as ew
from gpudl.timing import Timing, gbps, time_cpu, time_cuda

__all__ = ["machine", "write_results", "bench_elementwise"]

_SIMULATOR_NOTE = (
    "simulator: kernels ran as Python threads on the CPU at tiny sizes; the timings are "
    "wall clock and say nothing about GPU speed"
)


def _cuda_versions() -> dict:
    from numba.cuda.cudadrv import driver

    proc = Path("/proc/driver/nvidia/version")  # Linux: the kernel module's version line
    return {
        "nvidia_driver": proc.read_text().splitlines()[0] if proc.exists() else None,
        "driver_cuda_version": ".".join(map(str, driver.get_version())),
        "nvrtc_version": ".".join(map(str, cuda.runtime.get_version())),
        "torch_cuda_version": torch.version.cuda,
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")  # Linux
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine() -> dict:
    """The backend, platform, CPU, package versions and device that ran a benchmark."""
    versions = {}
    for package in ("numpy", "numba", "numba-cuda", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "backend": backend.name(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "versions": versions,
        "device": dataclasses.asdict(describe()),
        "cuda": None if backend.is_simulator() else _cuda_versions(),
    }


def _to_json(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    raise TypeError(f"cannot write {type(value).__name__} to JSON")


def write_results(topic: str, payload: dict, directory: str | Path = "results") -> Path:
    """Write ``payload`` with the machine and a UTC timestamp to ``<topic>-<backend>.json``."""
    if not isinstance(topic, str) or not topic or any(c in topic for c in "/\\ "):
        raise ValueError(f"topic must be a non-empty name without slashes or spaces, got {topic!r}")
    if not isinstance(payload, dict):
        raise TypeError(f"payload must be a dict, got {type(payload).__name__}")
    record = {
        "topic": topic,
        "timestamp_utc": datetime.now(UTC).isoformat(timespec="seconds"),
        "timings_meaningful": not backend.is_simulator(),
        "machine": machine(),
        "payload": payload,
    }
    path = Path(directory) / f"{topic}-{backend.name()}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, allow_nan=False, default=_to_json)
    path.write_text(text + "\n")
    return path


def _row(name: str, timing: Timing, n_bytes: int | None = None) -> dict:
    row = {
        "median_s": timing.median,
        "min_s": timing.min,
        "max_s": timing.max,
        "repeats": len(timing.samples),
        "method": timing.method,
        "meaningful": timing.meaningful,
    }
    rate = ""
    if n_bytes is not None:
        # a rate computed from a simulated kernel's wall clock would only mislead
        row |= {"bytes": n_bytes, "gbps": gbps(n_bytes, timing.median) if timing.meaningful
                else None}
        rate = f", {row['gbps']:.2f} GB/s" if timing.meaningful else ", GB/s n/a"
    print(f"  {name}: {timing}{rate}", flush=True)
    return row


def bench_elementwise(n: int | None = None, repeats: int | None = None) -> dict:
    """Time vector add (v1, v2), SAXPY and a torch copy of the same bytes; SAXPY on the CPU
    (NumPy, Numba parallel) vs the GPU; and the divergence demo in both modes.

    Every kernel's output is checked against its reference before its time is reported.
    """
    n = backend.pick(gpu=1 << 26, sim=4096) if n is None else n
    repeats = backend.pick(gpu=20, sim=2) if repeats is None else repeats
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    # Ten launches per pair of events on a GPU hide Python's launch overhead (timing.time_cuda).
    timed = {"warmup": backend.pick(gpu=3, sim=1), "repeats": repeats}
    batched = timed | {"inner": backend.pick(gpu=10, sim=1)}
    tpb, alpha = 256, 2.5
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n, dtype=np.float32)
    y_host = rng.standard_normal(n, dtype=np.float32)
    x, y = cuda.to_device(x_host), cuda.to_device(y_host)
    out = cuda.device_array(n, dtype=np.float32)
    print(f"[elementwise] n = {n:,} float32, {repeats} repeats, {backend.name()}", flush=True)

    bandwidth = {}
    for variant, launch in ew.VARIANTS.items():
        timing = time_cuda(launch, x, y, out, tpb, **batched)
        np.testing.assert_allclose(out.copy_to_host(), ew.reference_vector_add(x_host, y_host))
        bandwidth[f"vector_add_{variant}"] = _row(f"vector_add {variant}", timing, 3 * n * 4)
    timing = time_cuda(ew.launch_saxpy, alpha, x, y, out, tpb, **batched)
    expected = ew.reference_saxpy(alpha, x_host, y_host)
    np.testing.assert_allclose(out.copy_to_host(), expected, rtol=1e-6, atol=1e-5)
    bandwidth["saxpy"] = _row("saxpy", timing, 3 * n * 4)
    on_gpu = backend.name() == "cuda"
    src = torch.as_tensor(x_host, device="cuda" if on_gpu else "cpu")
    dst = torch.empty_like(src)
    # on the simulator this is a real copy in host memory, timed as CPU code
    timing = time_cuda(dst.copy_, src, **batched) if on_gpu else time_cpu(dst.copy_, src, **timed)
    bandwidth["torch_copy"] = _row("torch copy" + ("" if on_gpu else " (host memory)"), timing,
                                   2 * n * 4)
    fraction = (bandwidth["vector_add_v2"]["gbps"] / bandwidth["torch_copy"]["gbps"]
                if on_gpu else None)

    # The CPU columns are real measurements on both backends, so on the simulator they use
    # a size well past the CPU's caches; the simulated kernel is not timed there at all.
    n_cpu = backend.pick(gpu=n, sim=1 << 24)
    x_cpu, y_cpu = (x_host, y_host) if n_cpu == n else (
        rng.standard_normal(n_cpu, dtype=np.float32) for _ in range(2))
    print(f"[elementwise] saxpy, CPU vs GPU, n = {n_cpu:,}", flush=True)
    cpu_vs_gpu = {"n": n_cpu, "cpu_threads": os.cpu_count()}
    out_cpu = np.empty_like(x_cpu)  # written in place: page faults are not arithmetic
    for name, fn in (("numpy", ew.saxpy_numpy), ("numba_cpu_parallel", ew.saxpy_numba_cpu)):
        expected = ew.reference_saxpy(alpha, x_cpu, y_cpu)
        np.testing.assert_allclose(fn(alpha, x_cpu, y_cpu, out_cpu), expected, rtol=1e-6,
                                   atol=1e-5)
        timing = time_cpu(fn, alpha, x_cpu, y_cpu, out_cpu, warmup=1, repeats=max(repeats, 5))
        cpu_vs_gpu[name] = _row(name, timing, 3 * n_cpu * 4)
    if on_gpu:
        cpu_vs_gpu["cuda_kernel"] = _row(
            "cuda_kernel", time_cuda(ew.launch_saxpy, alpha, x, y, out, tpb, **batched),
            3 * n * 4)
        cpu_vs_gpu["cuda_with_transfers"] = _row(
            "cuda_with_transfers", time_cuda(ew.saxpy, alpha, x_host, y_host, **timed), 3 * n * 4)
    else:
        print("  cuda_kernel: not measured (simulator)", flush=True)
        cpu_vs_gpu["cuda_kernel"] = cpu_vs_gpu["cuda_with_transfers"] = None

    n_div = min(n, backend.pick(gpu=1 << 22, sim=1024))
    work = ew.DEFAULT_WORK
    print(f"[elementwise] divergence, {n_div:,} threads x {work} steps", flush=True)
    divergence = {"n": n_div, "work": work, "threads_per_block": tpb}
    codes = cuda.device_array(n_div, dtype=np.int64)
    n_check = min(n_div, 4096)
    for mode in ew.MODES:
        timing = time_cuda(ew.launch_divergence, codes, mode, work, tpb, **timed)
        got = codes.copy_to_host()[:n_check]
        np.testing.assert_array_equal(got, ew.reference_divergence(n_check, mode, work, tpb))
        paths = ew.divergence_paths(mode, min(n_div, 1024), tpb)
        divergence[mode] = _row(mode, timing) | {"max_paths_per_warp": int(paths.max())}
    ratio = divergence["parity"]["median_s"] / divergence["warp"]["median_s"]
    divergence["parity_over_warp"] = ratio

    return {
        "n": n,
        "threads_per_block": tpb,
        "timings_meaningful": not backend.is_simulator(),
        "note": _SIMULATOR_NOTE if backend.is_simulator() else "",
        "bandwidth": bandwidth,
        "v2_fraction_of_copy": fraction,
        "saxpy_cpu_vs_gpu": cpu_vs_gpu,
        "divergence": divergence,
    }


def bench_memory(time_kernels: bool | None = None, n: int | None = None) -> dict:
    """Chapter 2's measurements: copies (coalesced, strided, misaligned), the three
    transposes and the six reductions, each against a torch copy (and ``torch.sum``) in the
    same run; latency and bandwidth per level; point-to-point bandwidth between two ranks.

    Every kernel's output is checked before its time is reported. ``time_kernels`` defaults
    to True on a GPU and False on the simulator, whose kernel timings mean nothing (tests
    pass True with a tiny ``n`` to exercise the code path).
    """
    from gpudl.kernels import hierarchy
    from gpudl.kernels import memory as mem
    from gpudl.kernels import reduction as red
    from gpudl.parallel.comms import p2p_bandwidth

    on_gpu = backend.name() == "cuda"
    time_kernels = on_gpu if time_kernels is None else time_kernels
    payload: dict = {"timings_meaningful": on_gpu,
                     "note": "" if on_gpu else _SIMULATOR_NOTE + "; kernels not timed"}
    if time_kernels:
        payload |= _memory_kernels(mem, red, backend.pick(gpu=1 << 26, sim=2048) if n is None
                                   else n)
        print("[memory] latency and bandwidth per level", flush=True)
        results = hierarchy.measure()
        payload["hierarchy"] = results
        payload["hierarchy_table"] = hierarchy.table(results)
    print("[memory] point-to-point bandwidth, 2 ranks", flush=True)
    payload["p2p"] = p2p_bandwidth(repeats=backend.pick(gpu=20, sim=5))
    return payload


def _memory_kernels(mem, red, n: int) -> dict:
    """Time the copies, transposes and reductions of Chapter 2 on ``n`` float32 values."""
    timed = {"warmup": backend.pick(gpu=3, sim=0), "repeats": backend.pick(gpu=20, sim=1),
             "inner": backend.pick(gpu=10, sim=1)}
    on_gpu = backend.name() == "cuda"
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n, dtype=np.float32)
    x = cuda.to_device(x_host)
    print(f"[memory] n = {n:,} float32 ({backend.name()})", flush=True)
    src = torch.as_tensor(x_host, device="cuda" if on_gpu else "cpu")
    dst = torch.empty_like(src)
    copies = {"torch_copy": _row("torch copy", time_cuda(dst.copy_, src, **timed), 8 * n)}

    def check(got, expected) -> None:
        np.testing.assert_array_equal(got.copy_to_host(), expected)

    out = cuda.device_array(n, dtype=np.float32)
    copies["coalesced"] = _row("copy", time_cuda(mem.launch_copy, x, out, **timed), 8 * n)
    check(out, x_host)
    for stride in (2, 4, 8, 32):
        out = cuda.device_array(-(-n // stride), dtype=np.float32)
        timing = time_cuda(mem.launch_copy_strided, x, out, stride, **timed)
        check(out, x_host[::stride])
        # useful bytes: each output element read once and written once
        copies[f"stride_{stride}"] = _row(f"copy stride {stride}", timing, 8 * out.size)
    out = cuda.device_array(n - 1, dtype=np.float32)
    timing = time_cuda(mem.launch_copy_offset, x, out, 1, **timed)
    check(out, x_host[1:])
    copies["offset_1"] = _row("copy offset 1", timing, 8 * out.size)
    copy_gbs = copies["torch_copy"]["gbps"]

    side = int(np.sqrt(n))
    m = x_host[: side * side].reshape(side, side)
    md = cuda.to_device(m)
    transposes = {}
    for variant, launch in mem.VARIANTS.items():
        out = cuda.device_array((side, side), dtype=np.float32)
        timing = time_cuda(launch, md, out, **timed)
        check(out, m.T)
        transposes[variant] = _row(f"transpose {variant}", timing, 8 * side * side)

    reductions = {}
    exact = red.reference_sum(x_host)
    for variant, launch in red.VARIANTS.items():
        out = cuda.device_array(1, dtype=np.float32)
        timing = time_cuda(launch, x, out, **timed)
        got = float(out.copy_to_host()[0])
        bound = red.addition_depth(n, variant) * float(np.finfo(np.float32).eps) * float(
            np.abs(x_host.astype(np.float64)).sum())
        if not abs(got - exact) <= bound:
            raise RuntimeError(f"{variant}: sum {got} is off the exact {exact} by more than "
                               f"its error bound {bound}")
        reductions[variant] = _row(f"reduce {variant}", timing, 4 * n)
    reductions["torch_sum"] = _row("torch.sum", time_cuda(torch.sum, src, **timed), 4 * n)

    def fraction(row: dict) -> float | None:
        return row["gbps"] / copy_gbs if row["gbps"] is not None and copy_gbs else None

    best = min(red.VARIANTS, key=lambda v: reductions[v]["median_s"])
    return {
        "n": n,
        "copies": copies,
        "transpose_side": side,
        "transposes": transposes,
        "reductions": reductions,
        "fractions_of_copy": {
            "coalesced_copy": fraction(copies["coalesced"]),
            "padded_transpose": fraction(transposes["padded"]),
            f"best_reduction ({best})": fraction(reductions[best]),
        },
        "best_reduction_over_torch_sum": (reductions["torch_sum"]["median_s"]
                                          / reductions[best]["median_s"] if on_gpu else None),
    }
