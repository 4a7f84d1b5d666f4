"""The messages the communication benchmarks send: their sizes, the check of a plan, and how
a size is written.

Book section: *Chapter 5, "What connects GPUs"* (the sizes an interconnect is measured at).

:func:`default_sizes` gives the message sizes :mod:`gpudl.bench.allreduce` and
:mod:`gpudl.bench.p2p` time by default; :func:`check_plan` checks sizes, repeats and warmup
before any process starts; :func:`human_size` writes a size for a table or a row's name.
"""

from __future__ import annotations

from gpudl.checks import check_int, check_ints
from gpudl.parallel.messages import ITEMSIZE
from gpudl.parallel.spawn import default_backend

__all__ = ["GPU_SIZES", "default_sizes", "check_plan", "human_size"]


#: The message sizes timed between GPUs over NCCL, powers of 4 from 4 KiB to 256 MiB.
GPU_SIZES = tuple(1 << k for k in range(12, 29, 2))


def default_sizes(world_size: int = 2) -> list[int]:
    """Message sizes in bytes, powers of 4: 4 KiB to 256 MiB when ``world_size`` ranks get a
    GPU each (NCCL), to 4 MiB when they share CPU memory over gloo (with fewer GPUs than
    ranks, or none: 256 MiB messages there would only make the run long)."""
    if default_backend(world_size) == "nccl":
        return list(GPU_SIZES)
    return [size for size in GPU_SIZES if size <= 1 << 22]


def check_plan(sizes_bytes: list[int], repeats: int, warmup: int) -> None:
    """The checks of a plan: message sizes positive multiples of the float32 item, ``repeats``
    >= 1 timed and ``warmup`` >= 0 untimed runs per size."""
    for size in check_ints("sizes_bytes", sizes_bytes, 1):
        if size % ITEMSIZE:
            raise ValueError(
                f"sizes_bytes: message sizes must be positive multiples of {ITEMSIZE} bytes "
                f"(float32), "
                f"got {size}"
            )
    check_int("repeats", repeats, 1)
    check_int("warmup", warmup, 0)


def human_size(n_bytes: int) -> str:
    """``n_bytes`` in the largest binary unit below it, as the tables and row names write it
    (``4 KiB``, ``256 MiB``)."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:g} {unit}"
        n_bytes /= 1024
