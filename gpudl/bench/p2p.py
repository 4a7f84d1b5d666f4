"""Point-to-point bandwidth between two ranks, timed: a ping-pong of ``dist.send`` and
``dist.recv``, every message checked exactly.

Book section: *Chapter 5*, "Send and receive".

:func:`p2p_bandwidth` spawns two ranks running :func:`p2p_bandwidth_worker`; the ``"allreduce"``
topic (:func:`gpudl.bench.allreduce.run`) stores its rows as ``"p2p"``, and
:func:`gpudl.bench.allreduce.format_table` prints them. Bandwidths are in GB/s (1e9 bytes per
second); the messages and their checks are :mod:`gpudl.parallel.messages`'s.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from gpudl.bench import row
from gpudl.bench.message_sizes import check_plan, default_sizes, human_size
from gpudl.bench.timing import Timing
from gpudl.checks import check_int
from gpudl.parallel.messages import ITEMSIZE, check_p2p, rank_input
from gpudl.parallel.spawn import device_and_sync, spawn

__all__ = ["p2p_bandwidth_worker", "p2p_bandwidth"]


def p2p_bandwidth_worker(
    rank: int, world_size: int, sizes_bytes: list[int], repeats: int, warmup: int
) -> list[dict]:
    """Time a ping-pong between ranks 0 and 1 for each message size; other ranks only wait.

    Rank 0 sends its message (:func:`gpudl.parallel.messages.rank_input`) with ``dist.send``;
    rank 1 receives it and sends it back. A repeat starts after a barrier; the one-way time is
    half the round trip rank 0 sees (after a ``cuda.synchronize`` on NCCL). Both copies are
    checked after the clock stops. ``warmup`` untimed trips come first. Rank 0 returns one
    dict per size (``size_bytes``, ``backend``, ``timing``), the others ``[]``.
    """
    check_plan(sizes_bytes, repeats, warmup)
    if check_int("world_size", world_size, 1) < 2:
        raise ValueError(f"a point-to-point benchmark needs a world_size of at least 2 ranks, "
                         f"got {world_size}")
    device, sync = device_and_sync()
    out = []
    for size in sizes_bytes:
        message = rank_input(0, size // ITEMSIZE, device)
        times = []
        for step in range(warmup + repeats):
            buffer = torch.full_like(message, float("nan"))  # poisoned: a lost byte shows
            dist.barrier()
            sync()
            start = time.perf_counter()
            if rank == 0:
                dist.send(message, dst=1)
                dist.recv(buffer, src=1)
            elif rank == 1:
                dist.recv(buffer, src=0)
                dist.send(buffer, dst=0)
            sync()
            elapsed = time.perf_counter() - start
            if rank in (0, 1):
                check_p2p(buffer, sender=0)
            if step >= warmup:
                times.append(elapsed / 2)
        if rank == 0:
            out.append({"size_bytes": size, "backend": dist.get_backend(),
                        "timing": Timing(tuple(times), "wall-clock", True)})
    return out


def p2p_bandwidth(
    sizes_bytes: list[int] | None = None,
    repeats: int = 5,
    warmup: int = 2,
    timeout: float = 120.0,
) -> list[dict]:
    """Spawn 2 processes and measure point-to-point bandwidth (one row per size).

    Rows (:func:`gpudl.bench.row`) add ``size_bytes``, ``backend``, ``time_s`` (one way,
    median), ``gbps`` (from the median) and ``best_gbps`` (from the fastest run, the one the
    rest of the machine disturbed least); see :func:`p2p_bandwidth_worker`.
    """
    sizes = default_sizes() if sizes_bytes is None else sizes_bytes
    check_plan(sizes, repeats, warmup)
    measured = spawn(p2p_bandwidth_worker, 2, sizes, repeats, warmup, timeout=timeout)[0]
    return [row(f"send/recv {human_size(m['size_bytes'])}", m["timing"], m["size_bytes"],
                size_bytes=m["size_bytes"], backend=m["backend"], time_s=m["timing"].median,
                best_gbps=m["size_bytes"] / m["timing"].min / 1e9)
            for m in measured]
