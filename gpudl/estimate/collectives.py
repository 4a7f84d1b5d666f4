"""The ring all-reduce's cost, its fit to measurements, and a data-parallel step's time.

Book section: *Chapter 5, "A cost model for a step"*; the all-reduce's cost is first met in
*Chapter 5, "What connects GPUs"*. Units: bytes, seconds, and bytes per second (not bits, not
GB/s).
"""

from __future__ import annotations

import numpy as np

from gpudl.checks import check_equal, check_int, check_real, check_reals

__all__ = ["allreduce_bytes_per_rank", "allreduce_time", "data_parallel_step_time",
           "fit_allreduce"]


def allreduce_bytes_per_rank(n_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in a ring all-reduce of ``n_bytes``.

    The ring cuts the buffer into ``N`` chunks. Reduce-scatter takes ``N - 1`` steps, each
    sending one chunk of ``n_bytes / N``; all-gather takes as many again. In all
    ``2 (N - 1) / N * n_bytes``: almost twice the buffer, whatever ``N`` is.
    """
    check_real("n_bytes", n_bytes, 0)
    check_int("world_size", world_size, 1)
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
    check_int("world_size", world_size, 1)
    check_real("bandwidth", bandwidth, 0, strict=True)
    check_real("latency", latency, 0)
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
    check_int("world_size", world_size, 1)
    if world_size < 2:
        raise ValueError("an all-reduce over one rank moves nothing: fit with world_size >= 2")
    sizes = np.array(check_reals("sizes_bytes", sizes_bytes, 0, minimum_count=2))
    times = np.array(check_reals("times_s", times_s, 0, strict=True, minimum_count=2))
    check_equal("len(sizes_bytes)", sizes.size, "len(times_s)", times.size)
    if np.unique(sizes).size < 2:
        raise ValueError("sizes_bytes: need measurements at two or more distinct sizes to fit "
                         "two parameters")
    steps = 2 * (world_size - 1)
    per_rank = steps / world_size * sizes
    (latency, inverse_bandwidth), *_ = np.linalg.lstsq(
        np.column_stack([np.full_like(sizes, steps), per_rank]), times, rcond=None)
    if latency < 0:
        latency, inverse_bandwidth = 0.0, float(per_rank @ times / (per_rank @ per_rank))
    if not inverse_bandwidth > 0:
        raise ValueError("the times do not grow with size: no positive bandwidth fits them")
    return float(latency), float(1 / inverse_bandwidth)


def data_parallel_step_time(
    compute_s: float,
    grad_bytes: float,
    world_size: int,
    bandwidth: float,
    latency: float = 0.0,
    backward_fraction: float = 2 / 3,
    n_buckets: int = 1,
) -> float:
    """Seconds per data-parallel training step: the computation plus the part of the gradient
    all-reduce that the backward pass does not hide.

    Book section: *Chapter 5, "A cost model for a step"*. ``compute_s`` is one rank's forward,
    backward and update on its share of the batch, ``backward_fraction`` of it the backward
    pass (about 2/3: backward does twice the forward's products, Chapter 3). The
    ``grad_bytes`` of gradients are cut into ``n_buckets`` equal buckets, which become ready
    at even intervals during the backward pass (the last at its end); each bucket's
    all-reduce takes :func:`allreduce_time` and starts when its bucket is ready and the
    previous all-reduce has finished. The update waits for the last one::

        c = allreduce_time(grad_bytes / n, N, bandwidth, latency)
        end = max over buckets i = 0 .. n-1 of (i + 1) / n * T_backward + (n - i) * c
        step = compute_s + max(0, end - T_backward)

    One bucket hides nothing: ``compute_s + allreduce_time(grad_bytes, ...)``. Many buckets
    hide all but the last bucket's all-reduce when the communication is shorter than the
    backward pass, but each pays the latency.
    """
    check_real("compute_s", compute_s, 0)
    check_real("grad_bytes", grad_bytes, 0)
    check_real("backward_fraction", backward_fraction, 0)
    if backward_fraction > 1:
        raise ValueError(f"backward_fraction must be from 0 to 1, got {backward_fraction!r}")
    n = check_int("n_buckets", n_buckets, 1)
    per_bucket = allreduce_time(grad_bytes / n, world_size, bandwidth, latency)
    backward = backward_fraction * compute_s
    end = max((i + 1) / n * backward + (n - i) * per_bucket for i in range(n))
    return compute_s + max(0.0, end - backward)
