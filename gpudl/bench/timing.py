"""Timing GPU and CPU code, and turning times into bandwidth and flop rates.

Book section: Chapter 1, "Threads, blocks, grids and warps", "CPU and GPU on the same
problem" and "Timing a kernel fairly" (and every later chapter that times a kernel).

A GPU launch returns before the kernel has finished, so a host clock around it measures the
launch, not the work. :func:`time_cuda` records a CUDA event before and after each call and
reads the time between them once the second has completed. On Numba's CUDA simulator events
record nothing (``elapsed_time`` is -1), and every thread runs as a Python thread, so it falls
back to the wall clock and marks the result as meaningless for GPU speed. :func:`time_cpu`
times CPU code (NumPy, Numba on the CPU) with the wall clock, where that is the right tool.

Fair comparisons (:func:`time_interleaved`) follow one policy, :data:`POLICY`: at least 3
warm-up calls; at least 3 calls per sample and enough of them to fill about a millisecond
(:func:`choose_inner`); samples taken until the median is stable (:func:`stable`: at least 5,
and the middle half of them within 2 % of the median, or half a second of samples for a slow
call; at most 50), of which the median is reported; the GPU kept busy before each start event,
so that the host's delay in issuing the first call is not timed; and the contenders (gpudl's
kernel and torch's, say) timed in turns, sample by sample, so that a change of clock speed or
temperature during the run affects them alike. :func:`time_cuda` takes samples the same way
unless it is given a number of ``repeats``. A result whose bytes fit in the L2 cache measures
latency and the cache, not device memory: :func:`row_kind` says which a row is.

:func:`fp32_matmuls` sets, for the duration of a measurement, whether cuBLAS may run float32
products on the tensor cores in TF32 (``torch.backends.cuda.matmul.fp32_precision``, the switch
that replaced ``allow_tf32`` in torch 2.9), and restores the previous setting afterwards.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gpudl import backend, registry
from gpudl.checks import check_choice, check_int, check_positive, check_real, check_reals

# isort: split
from numba import cuda

__all__ = ["Timing", "POLICY", "time_cuda", "time_cpu", "time_interleaved", "choose_inner",
           "spread", "stable", "hold_kernel", "row_kind", "gbps", "gflops", "fp32_matmuls"]

#: The fair-timing policy, in numbers. It holds the least warm-up calls and calls per sample,
#: the seconds a sample should fill, and when sampling stops (:func:`stable`), which is after
#: at least ``min_repeats`` samples, as soon as their :func:`spread` is at most ``spread`` or
#: they have taken ``row_s`` seconds, and at ``max_repeats`` samples at the latest.
POLICY = {"warmup": 3, "inner": 3, "sample_s": 1e-3, "min_repeats": 5, "max_repeats": 50,
          "spread": 0.02, "row_s": 0.5}
_MAX_INNER = 1000
_HOLD_NS = 200_000  # how long the GPU is kept busy before a start event

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


def _check_counts(adaptive: bool = False, **counts: int | None) -> None:
    """Each count an int (``warmup`` >= 0, the others >= 1); with ``adaptive``, ``repeats``
    may also be None (samples until :func:`stable`)."""
    for name, value in counts.items():
        if not (adaptive and name == "repeats" and value is None):
            check_int(name, value, 0 if name == "warmup" else 1)


def spread(samples: Sequence[float]) -> float:
    """How far the middle half of ``samples`` (finite seconds ``>= 0``) strays from their
    median: the interquartile range over the median (``inf`` for fewer than 2 samples or a
    median of 0)."""
    samples = check_reals("samples", samples, 0, minimum_count=0)
    if len(samples) < 2:
        return math.inf
    median = statistics.median(samples)
    q1, _, q3 = statistics.quantiles(samples, n=4, method="inclusive")
    return (q3 - q1) / median if median > 0 else math.inf


def stable(samples: Sequence[float], seconds: float) -> bool:
    """Whether :data:`POLICY` stops sampling after ``samples``, which took ``seconds``: at
    ``max_repeats``; or with at least ``min_repeats``, once their :func:`spread` is at most
    ``spread`` (2 %) or they have taken ``row_s`` (a slow call is timed a few times only)."""
    samples = check_reals("samples", samples, 0, minimum_count=0)
    check_real("seconds", seconds, 0)
    n = len(samples)
    if n >= POLICY["max_repeats"]:
        return True
    if n < POLICY["min_repeats"]:
        return False
    return spread(samples) <= POLICY["spread"] or seconds >= POLICY["row_s"]


def _wall_clock(fn: Callable, args: tuple, warmup: int, repeats: int, inner: int,
                clock: Callable[[], float] = time.perf_counter) -> list[float]:
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = clock()
        for _ in range(inner):
            fn(*args)
        samples.append((clock() - start) / inner)
    return samples


@registry.kernel("timing_hold", "void(int64)", precision="integer")
@cuda.jit
def hold_kernel(rounds):
    """Keep the GPU busy for about ``rounds`` microseconds (one thread sleeping)."""
    for _ in range(rounds):
        cuda.nanosleep(1000)


def _event_sample(fn: Callable, args: tuple, inner: int) -> float:
    """Seconds per call of ``inner`` calls between two CUDA events. The GPU is first given
    :data:`_HOLD_NS` of sleep, queued before the start event: the start is recorded when the
    sleep ends, by which time the host has queued the first call, so the host's delay in
    issuing it (tens of microseconds for a numba launch) is not inside the window."""
    start, end = cuda.event(timing=True), cuda.event(timing=True)
    hold_kernel[1, 1](_HOLD_NS // 1000)
    start.record()
    for _ in range(inner):
        fn(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / inner


def time_cuda(
    fn: Callable, *args: object, warmup: int = 3, repeats: int | None = None, inner: int = 1
) -> Timing:
    """Time ``fn(*args)`` on the GPU with CUDA events (wall clock on the simulator).

    Each sample is the mean of ``inner`` back-to-back calls between one pair of events,
    recorded once the GPU has been kept busy long enough for the host to queue the first
    call. With ``inner > 1`` the host also prepares each next launch
    while the GPU runs the current one, so Python's launch overhead no longer adds to short
    kernels. The events are recorded on the default stream, where numba launches kernels and
    torch runs its operations, so both can be timed. ``repeats`` samples are taken, or, with
    ``repeats=None``, as many as :func:`stable` asks for (5 to 50).
    """
    _check_counts(adaptive=True, warmup=warmup, repeats=repeats, inner=inner)
    if backend.is_simulator():
        samples = _wall_clock(fn, args, warmup, repeats or POLICY["min_repeats"], inner)
        return Timing(tuple(samples), "wall-clock", False)
    for _ in range(warmup):
        fn(*args)
    cuda.synchronize()
    samples: list[float] = []
    while (len(samples) < repeats if repeats is not None
           else not stable(samples, sum(samples) * inner)):
        samples.append(_event_sample(fn, args, inner))
    return Timing(tuple(samples), "cuda-events", True)


def choose_inner(call_s: float) -> int:
    """Calls per sample for a call that takes ``call_s`` seconds: enough to fill
    ``POLICY["sample_s"]`` (a millisecond), at least ``POLICY["inner"]`` (3), at most 1000."""
    check_real("call_s", call_s, 0, strict=True)
    return int(min(_MAX_INNER, max(POLICY["inner"], math.ceil(POLICY["sample_s"] / call_s))))


def time_interleaved(fns: Mapping[str, Callable[[], object]], *, warmup: int = 3,
                     repeats: int | None = None, inner: int | None = None,
                     clock: Callable[[], float] = time.perf_counter) -> dict[str, Timing]:
    """Time several calls against each other, fairly (:data:`POLICY`): each warmed up
    ``warmup`` times; ``inner`` calls per sample (by default :func:`choose_inner` of each
    one's warm-up time); then rounds of one sample of each, the order rotated from round to
    round: ``repeats`` rounds, or, with ``repeats=None``, until :func:`stable` holds for every
    call. CUDA events on a GPU, the wall clock ``clock`` on the simulator. ``ValueError``
    below the policy's least warm-up, samples or inner calls."""
    if not fns:
        raise ValueError("fns must name at least one call")
    _check_counts(adaptive=True, warmup=warmup, repeats=repeats)
    for name, least, value in (("warmup", POLICY["warmup"], warmup),
                               ("repeats", POLICY["min_repeats"],
                                POLICY["min_repeats"] if repeats is None else repeats),
                               ("inner", POLICY["inner"], POLICY["inner"] if inner is None
                                else inner)):
        if value < least:
            raise ValueError(f"{name} must be >= {least} for a fair comparison, got {value}")
    on_gpu = not backend.is_simulator()
    sync = cuda.synchronize if on_gpu else (lambda: None)
    inners = {}
    for name, fn in fns.items():
        sync()
        start = clock()
        for _ in range(warmup):
            fn()
        sync()
        inners[name] = inner or choose_inner(max((clock() - start) / warmup, 1e-9))
    names = list(fns)
    samples: dict[str, list[float]] = {name: [] for name in names}

    def more(r: int) -> bool:
        if repeats is not None:
            return r < repeats
        return not all(stable(samples[n], sum(samples[n]) * inners[n]) for n in names)

    r = 0
    while more(r):
        for name in names[r % len(names):] + names[:r % len(names)]:
            if on_gpu:
                samples[name].append(_event_sample(fns[name], (), inners[name]))
            else:
                samples[name].append(_wall_clock(fns[name], (), 0, 1, inners[name], clock)[0])
        r += 1
    method = "cuda-events" if on_gpu else "wall-clock"
    return {name: Timing(tuple(samples[name]), method, on_gpu) for name in names}


def row_kind(n_bytes: int, l2_bytes: int | None = None) -> str | None:
    """``"latency"`` if ``n_bytes`` (what one call reads and writes) fits in an L2 cache of
    ``l2_bytes`` (by default the device's), ``"bandwidth"`` if not: only a working set larger
    than the L2 measures device memory. None when the L2's size is unknown (the simulator)."""
    check_int("n_bytes", n_bytes, 0)
    if l2_bytes is not None:
        check_int("l2_bytes", l2_bytes, 0)
    if l2_bytes is None:
        from gpudl.hardware import describe

        l2_bytes = describe().l2_cache_bytes
    if l2_bytes is None:
        return None
    return "latency" if n_bytes <= l2_bytes else "bandwidth"


def time_cpu(fn: Callable, *args: object, warmup: int = 1, repeats: int = 5) -> Timing:
    """Time CPU code ``fn(*args)`` (NumPy, Numba on the CPU) with the wall clock."""
    _check_counts(warmup=warmup, repeats=repeats)
    return Timing(tuple(_wall_clock(fn, args, warmup, repeats, 1)), "wall-clock", True)


def _rate(amount: float, seconds: float, what: str) -> float:
    amount = check_real(what, amount, 0, finite=True)
    return amount / check_positive("seconds", seconds) / 1e9


def gbps(n_bytes: float, seconds: float) -> float:
    """Bandwidth in GB/s (10**9 bytes per second) for ``n_bytes`` moved in ``seconds``."""
    return _rate(n_bytes, seconds, "n_bytes")


def gflops(n_flops: float, seconds: float) -> float:
    """Rate in GFLOP/s (10**9 floating-point operations per second)."""
    return _rate(n_flops, seconds, "n_flops")


@contextlib.contextmanager
def fp32_matmuls(precision: str) -> Iterator[None]:
    """Run the ``with`` block with torch's float32 matrix products in ``precision``:
    ``"ieee"`` (true float32, on the CUDA cores) or ``"tf32"`` (inputs rounded to TF32 on the
    tensor cores), set with ``torch.backends.cuda.matmul.fp32_precision`` and restored on exit.

    Book section: Chapter 3, "v5: an 8 × 8 block of outputs per thread" (why the comparison
    with cuBLAS turns TF32 off) and Chapter 8, "Tensor cores"."""
    import torch

    check_choice("precision", precision, ("ieee", "tf32"))
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous
