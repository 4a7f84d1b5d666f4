"""Cost models: what an operation should cost, from first principles, to hold measurements to.

Book section: *Chapter 1, "What connects GPUs"* and *Chapter 5, "Data parallelism"* (the ring
all-reduce).

Units throughout: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from __future__ import annotations

from numbers import Real

__all__ = ["allreduce_bytes_per_rank", "allreduce_time"]


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
