"""Cost models: what an operation should cost, from first principles, to hold measurements to.

Book section: *Chapter 1, "What connects GPUs"* and *Chapter 5, "Data parallelism"* (the ring
all-reduce and its fit to measurements), *Chapter 2, "The roofline"* and *"Memory across GPUs"*.

Units throughout: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from __future__ import annotations

import math
from numbers import Real

import numpy as np

__all__ = [
    "allreduce_bytes_per_rank",
    "allreduce_time",
    "fit_allreduce",
    "model_state_memory",
    "roofline",
    "ridge_point",
    "KERNEL_INTENSITY",
]


def _check_world_size(world_size: object) -> None:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(
            f"world_size must be an int, got {type(world_size).__name__} {world_size!r}"
        )
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")


def _check_number(name: str, value: object, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if not positive and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")


def allreduce_bytes_per_rank(n_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``n_bytes``.

    The ring cuts the buffer into ``N`` chunks. Reduce-scatter takes ``N - 1`` steps, each
    sending one chunk of ``n_bytes / N``; all-gather takes as many again. In all
    ``2 (N - 1) / N * n_bytes``: almost twice the buffer, whatever ``N`` is.
    """
    _check_number("n_bytes", n_bytes, positive=False)
    _check_world_size(world_size)
    return 2 * (world_size - 1) / world_size * n_bytes


def allreduce_time(
    n_bytes: float, world_size: int, bandwidth: float, latency: float = 0.0
) -> float:
    """Seconds for a ring all-reduce of ``n_bytes`` over ``world_size`` ranks.

    ``bandwidth`` is what each rank's link carries one way, in bytes/s; ``latency`` is the
    fixed cost of one of the ``2 (N - 1)`` steps, in seconds::

        time = 2 (N - 1) / N * n_bytes / bandwidth + 2 (N - 1) * latency

    Measured all-reduces report the bandwidth this model implies as *bus bandwidth*
    (``busbw``, the nccl-tests convention), so the two can be compared directly.
    """
    _check_world_size(world_size)
    _check_number("bandwidth", bandwidth, positive=True)
    _check_number("latency", latency, positive=False)
    steps = 2 * (world_size - 1)
    return allreduce_bytes_per_rank(n_bytes, world_size) / bandwidth + steps * latency


def fit_allreduce(
    sizes_bytes: list[float], times_s: list[float], world_size: int
) -> tuple[float, float]:
    """Fit the ring model's ``(latency, bandwidth)`` to measured all-reduce times.

    Least squares of ``time = 2 (N - 1) * latency + 2 (N - 1) / N * size / bandwidth`` over the
    measurements, which is linear in ``latency`` and ``1 / bandwidth``. If noise makes the
    best latency negative, latency is fixed at 0 and the bandwidth refitted. Needs at least
    two distinct sizes; returns seconds and bytes/s.
    """
    _check_world_size(world_size)
    if world_size < 2:
        raise ValueError("an all-reduce over one rank moves nothing: fit with world_size >= 2")
    sizes = np.asarray(sizes_bytes, dtype=np.float64)
    times = np.asarray(times_s, dtype=np.float64)
    if sizes.ndim != 1 or sizes.shape != times.shape:
        raise ValueError(f"sizes and times must be 1-D of one length, got {sizes.shape}, "
                         f"{times.shape}")
    if np.unique(sizes).size < 2:
        raise ValueError("need measurements at two or more distinct sizes to fit two parameters")
    if not (np.isfinite(sizes).all() and np.isfinite(times).all()) or (sizes < 0).any() or (
            times <= 0).any():
        raise ValueError("sizes must be finite and >= 0, times finite and > 0")
    steps = 2 * (world_size - 1)
    per_rank = steps / world_size * sizes
    (latency, inverse_bandwidth), *_ = np.linalg.lstsq(
        np.column_stack([np.full_like(sizes, steps), per_rank]), times, rcond=None)
    if latency < 0:
        latency, inverse_bandwidth = 0.0, float(per_rank @ times / (per_rank @ per_rank))
    if not inverse_bandwidth > 0:
        raise ValueError("the times do not grow with size: no positive bandwidth fits them")
    return float(latency), float(1 / inverse_bandwidth)


def model_state_memory(
    n_params: float,
    *,
    n_gpus: int = 1,
    zero_stage: int = 0,
    optimizer: str = "adam",
    precision: str = "mixed",
) -> float:
    """Bytes of model state (parameters, gradients, optimizer state) that each GPU holds.

    Book section: *Chapter 2, "Memory across GPUs"*. The accounting of ZeRO (Rajbhandari et
    al. 2020), in bytes per parameter::

        optimizer  precision  params  grads  optimizer state (K)
        adam       mixed      2       2      12  fp32 master copy, momentum, variance
        adam       fp32       4       4       8  momentum, variance (params are the master)
        sgd        mixed      2       2       8  fp32 master copy, momentum
        sgd        fp32       4       4       4  momentum

    (SGD means SGD with momentum.) Stage 0 is plain data parallelism: every GPU holds it all.
    ZeRO stage 1 divides the optimizer state among the ``n_gpus`` GPUs, stage 2 the gradients
    as well, stage 3 the parameters as well. Not counted: Adam's step counter, activations,
    temporary buffers and fragmentation.
    """
    _check_number("n_params", n_params, positive=False)
    for name, value, least, most in (("n_gpus", n_gpus, 1, None),
                                     ("zero_stage", zero_stage, 0, 3)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
        if value < least or (most is not None and value > most):
            expected = f"from {least} to {most}" if most is not None else f"at least {least}"
            raise ValueError(f"{name} must be {expected}, got {value}")
    for name, value, choices in (("optimizer", optimizer, ("adam", "sgd")),
                                 ("precision", precision, ("mixed", "fp32"))):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
        if value not in choices:
            raise ValueError(f"{name} must be one of {choices}, got {value!r}")
    params, grads, state = {
        ("adam", "mixed"): (2, 2, 12), ("adam", "fp32"): (4, 4, 8),
        ("sgd", "mixed"): (2, 2, 8), ("sgd", "fp32"): (4, 4, 4),
    }[optimizer, precision]
    ways = lambda stage: n_gpus if zero_stage >= stage else 1  # how many GPUs share it
    return n_params * (params / ways(3) + grads / ways(2) + state / ways(1))


def _check_peak(name: str, value: object) -> None:
    _check_number(name, value, positive=True)
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")


def roofline(
    intensity: float | np.ndarray, peak_flops: float, peak_bandwidth: float
) -> float | np.ndarray:
    """Attainable flop/s for an arithmetic intensity, by the roofline model.

    Book section: *Chapter 2, "The roofline"*. ``intensity`` is flops per byte moved to or
    from memory (a number, or a NumPy array of them), ``peak_flops`` in flop/s and
    ``peak_bandwidth`` in bytes/s::

        attainable = min(peak_flops, intensity * peak_bandwidth)

    Below the ridge point (:func:`ridge_point`) a kernel cannot be fed fast enough and is
    memory-bound; above it, compute-bound. A float for a number, an array for an array.
    """
    _check_peak("peak_flops", peak_flops)
    _check_peak("peak_bandwidth", peak_bandwidth)
    if isinstance(intensity, np.ndarray):
        if intensity.dtype.kind not in "iuf":
            raise TypeError(f"intensity must have a real dtype, got {intensity.dtype}")
        if np.isnan(intensity).any() or (intensity < 0).any():
            raise ValueError("intensity must be >= 0 everywhere, got a negative or NaN value")
        return np.minimum(float(peak_flops), intensity * float(peak_bandwidth))
    _check_number("intensity", intensity, positive=False)
    return float(min(peak_flops, intensity * peak_bandwidth))


def ridge_point(peak_flops: float, peak_bandwidth: float) -> float:
    """The intensity (flop/byte) where the roofline bends: ``peak_flops / peak_bandwidth``.

    Book section: *Chapter 2, "The roofline"*. H100 SXM: 67e12 flop/s FP32 over 3.35e12
    bytes/s is 20 flop/byte; a kernel doing fewer flops per byte is memory-bound.
    """
    _check_peak("peak_flops", peak_flops)
    _check_peak("peak_bandwidth", peak_bandwidth)
    return float(peak_flops / peak_bandwidth)


#: Arithmetic intensity (flop per byte moved, float32) of kernels this book writes, derived
#: from what each reads, writes and computes (Chapter 2, "The roofline"). Adam: 28 bytes
#: (read p, g, m, v; write p, m, v) for about 12 operations. Matmul: at most, since 12 n**2
#: bytes is the least traffic an n x n product can have.
KERNEL_INTENSITY: dict[str, float] = {
    "vector add (1 flop, 12 B)": 1 / 12,
    "SAXPY (2 flops, 12 B)": 2 / 12,
    "sum (1 flop, 4 B)": 1 / 4,
    "fp32 Adam (about 12 flops, 28 B)": 12 / 28,
    "matmul n=4096 (at most: 2n^3 flops, 12n^2 B)": 2 * 4096**3 / (12 * 4096**2),
}
