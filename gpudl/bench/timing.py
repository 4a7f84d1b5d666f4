"""Timing GPU and CPU code, and turning times into bandwidth and flop rates.

Book section: Chapter 1, "Threads, blocks, grids and warps" and "CPU and GPU on the same
problem" (and every later chapter that times a kernel).

A GPU launch returns before the kernel has finished, so a host clock around it measures the
launch, not the work. :func:`time_cuda` records a CUDA event before and after each call and
reads the time between them once the second has completed. On Numba's CUDA simulator events
record nothing (``elapsed_time`` is -1), and every thread runs as a Python thread, so it falls
back to the wall clock and marks the result as meaningless for GPU speed. :func:`time_cpu`
times CPU code (NumPy, Numba on the CPU) with the wall clock, where that is the right tool.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from numbers import Real

from gpudl import backend

# isort: split
from numba import cuda

__all__ = ["Timing", "time_cuda", "time_cpu", "gbps", "gflops"]

_SIMULATOR_NOTE = "(simulator: wall clock, meaningless for GPU speed)"


@dataclass(frozen=True)
class Timing:
    """Repeated timings of one call, in seconds."""

    samples: tuple[float, ...]
    method: str  # "cuda-events" or "wall-clock"
    meaningful: bool  # False for GPU code timed on the simulator

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def min(self) -> float:
        return min(self.samples)

    @property
    def max(self) -> float:
        return max(self.samples)

    def __str__(self) -> str:
        text = (
            f"median {self.median * 1e3:.3f} ms (min {self.min * 1e3:.3f}, "
            f"max {self.max * 1e3:.3f}, {len(self.samples)} runs, {self.method})"
        )
        return text if self.meaningful else f"{text} {_SIMULATOR_NOTE}"


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        low = 0 if name == "warmup" else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")


def _wall_clock(fn: Callable, args: tuple, warmup: int, repeats: int, inner: int) -> list[float]:
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(inner):
            fn(*args)
        samples.append((time.perf_counter() - start) / inner)
    return samples


def time_cuda(
    fn: Callable, *args: object, warmup: int = 3, repeats: int = 20, inner: int = 1
) -> Timing:
    """Time ``fn(*args)`` on the GPU with CUDA events (wall clock on the simulator).

    Each sample is the mean of ``inner`` back-to-back calls between one pair of events:
    with ``inner > 1`` the host prepares the next launch while the GPU runs the current
    one, so Python's launch overhead (tens of microseconds for a numba kernel) no longer
    adds to short kernels. The events are recorded on the default stream, where numba
    launches kernels and torch runs its operations, so both can be timed.
    """
    _check_counts(warmup=warmup, repeats=repeats, inner=inner)
    if backend.is_simulator():
        samples = _wall_clock(fn, args, warmup, repeats, inner)
        return Timing(tuple(samples), "wall-clock", False)
    for _ in range(warmup):
        fn(*args)
    cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start, end = cuda.event(timing=True), cuda.event(timing=True)
        start.record()
        for _ in range(inner):
            fn(*args)
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / 1e3 / inner)
    return Timing(tuple(samples), "cuda-events", True)


def time_cpu(fn: Callable, *args: object, warmup: int = 1, repeats: int = 5) -> Timing:
    """Time CPU code ``fn(*args)`` (NumPy, Numba on the CPU) with the wall clock."""
    _check_counts(warmup=warmup, repeats=repeats)
    return Timing(tuple(_wall_clock(fn, args, warmup, repeats, 1)), "wall-clock", True)


def _rate(amount: float, seconds: float, what: str) -> float:
    for label, value in ((what, amount), ("seconds", seconds)):
        if isinstance(value, bool) or not isinstance(value, Real):
            raise TypeError(f"{label} must be a real number, got {type(value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"{label} must be finite, got {value!r}")
    if amount < 0:
        raise ValueError(f"{what} must be >= 0, got {amount!r}")
    if seconds <= 0:
        raise ValueError(f"seconds must be > 0, got {seconds!r}")
    return amount / seconds / 1e9


def gbps(n_bytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (10**9 bytes per second) for ``n_bytes`` moved in ``seconds``."""
    return _rate(n_bytes, seconds, "n_bytes")


def gflops(n_flops: float, seconds: float) -> float:
    """Rate in GFLOP/s (10**9 floating-point operations per second)."""
    return _rate(n_flops, seconds, "n_flops")
