"""Communication, timed: all-reduce bandwidth between ranks and the ring all-reduce against
``dist.all_reduce``, every result checked exactly.

Book section: *Chapter 5, "What connects GPUs"* (measuring an interconnect) and "The ring
all-reduce, from send and receive" (the ring timed against ``dist.all_reduce``). The model is
:func:`gpudl.estimate.allreduce_time`; the messages and their checks are
:mod:`gpudl.parallel.messages`'s. The topic's :func:`run` also stores the point-to-point
bandwidth of :mod:`gpudl.bench.p2p` (``"p2p"``).

Three ways to run the all-reduce benchmark:

* from Python (a notebook): ``allreduce_bandwidth(world_size=2)``;
* ``torchrun --standalone --nproc_per_node=2 -m gpudl.bench.allreduce``;
* ``python -m gpudl bench allreduce`` (world sizes 2 and 4; on GPUs only as many as there are).

Bandwidths are in GB/s (1e9 bytes per second), as nccl-tests reports them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist

from gpudl import estimate
from gpudl.bench import row
from gpudl.bench.environment import gpus_missing
from gpudl.bench.message_sizes import check_plan, default_sizes, human_size
from gpudl.bench.p2p import p2p_bandwidth
from gpudl.bench.timing import Timing
from gpudl.checks import check_bool, check_int, check_ints
from gpudl.parallel.data.comms import ring_all_reduce, ring_all_reduce_worker
from gpudl.parallel.messages import ITEMSIZE, check_allreduce, rank_input
from gpudl.parallel.spawn import (
    device_and_sync,
    rank0_print,
    run_under_torchrun,
    spawn,
)

__all__ = [
    "BARS",
    "VIEWS",
    "allreduce_bandwidth",
    "allreduce_bandwidth_worker",
    "format_table",
    "main",
    "ring_timings_worker",
    "run",
    "time_ring_all_reduce",
]


#: No speed goal is set for the links; the rows are what the book's boxes show.
BARS: tuple[dict, ...] = ()
#: The book's boxes of this topic (``{gpudl-measured} allreduce <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"busbw": (), "p2p": ()}


def allreduce_bandwidth_worker(
    rank: int, world_size: int, sizes_bytes: list[int], repeats: int, warmup: int
) -> list[dict]:
    """Time a sum all-reduce of each message size, checking every result.

    Each timing starts after a barrier and ends when this rank holds the result (after a
    ``cuda.synchronize`` on NCCL). A repeat takes as long as its slowest rank (max-reduced);
    ``warmup`` untimed runs come first. One dict per size: ``size_bytes``, ``world_size``,
    ``backend`` and ``timing`` (the ``repeats`` slowest-rank times).
    """
    check_plan(sizes_bytes, repeats, warmup)
    device, sync = device_and_sync()
    out = []
    for size in sizes_bytes:
        message = rank_input(rank, size // ITEMSIZE, device)
        times = []
        for step in range(warmup + repeats):
            buffer = message.clone()
            dist.barrier()
            sync()
            start = time.perf_counter()
            dist.all_reduce(buffer)
            sync()
            elapsed = time.perf_counter() - start
            check_allreduce(buffer, world_size)
            if step >= warmup:
                times.append(elapsed)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        out.append({"size_bytes": size, "world_size": world_size,
                    "backend": dist.get_backend(),
                    "timing": Timing(tuple(slowest.tolist()), "wall-clock", True)})
    return out


def _allreduce_rows(measured: list[dict]) -> list[dict]:
    """Rows of :func:`allreduce_bandwidth` from the worker's timings: ``time_s`` (median),
    ``algbw_gbs`` (size / time) and ``busbw_gbs``, the per-link bandwidth the ring model
    implies, ``algbw * 2 (N - 1) / N`` (nccl-tests' convention)."""
    rows = []
    for m in measured:
        size, world_size, t = m["size_bytes"], m["world_size"], m["timing"].median
        rows.append(row(f"all_reduce {human_size(size)} x{world_size}", m["timing"], size,
                        size_bytes=size, world_size=world_size, backend=m["backend"],
                        time_s=t, algbw_gbs=size / t / 1e9,
                        busbw_gbs=estimate.allreduce_bytes_per_rank(size, world_size) / t / 1e9))
    return rows


def allreduce_bandwidth(
    world_size: int = 2,
    sizes_bytes: list[int] | None = None,
    repeats: int = 5,
    warmup: int = 2,
    timeout: float = 120.0,
) -> list[dict]:
    """Spawn ``world_size`` processes and measure all-reduce bandwidth (one row per size).

    Rows (:func:`gpudl.bench.row`) add ``size_bytes``, ``world_size``, ``backend``,
    ``time_s``, ``algbw_gbs`` and ``busbw_gbs``; see :func:`allreduce_bandwidth_worker`.
    """
    sizes = default_sizes(world_size) if sizes_bytes is None else sizes_bytes
    check_plan(sizes, repeats, warmup)
    per_rank = spawn(
        allreduce_bandwidth_worker, world_size, sizes, repeats, warmup, timeout=timeout
    )
    return _allreduce_rows(per_rank[0])  # every rank holds the slowest rank's times


def ring_timings_worker(rank: int, world_size: int, numels: list[int],
                        repeats: int) -> list[dict]:
    """:func:`gpudl.parallel.data.ring_all_reduce_worker`'s checked rows, each with
    ``ring_s`` and ``all_reduce_s``: the median over ``repeats`` of the wall-clock time of
    :func:`~gpudl.parallel.data.ring_all_reduce` and of ``dist.all_reduce`` on this rank,
    each started after a barrier (and a ``cuda.synchronize`` on NCCL)."""
    check_int("repeats", repeats, 1)
    rows = ring_all_reduce_worker(rank, world_size, numels)
    device, sync = device_and_sync()
    for r in rows:
        for key, reduce in (("ring_s", ring_all_reduce), ("all_reduce_s", dist.all_reduce)):
            times = []
            for _ in range(repeats):
                buffer = rank_input(rank, r["numel"], device)
                dist.barrier()
                sync()
                start = time.perf_counter()
                reduce(buffer)
                sync()
                times.append(time.perf_counter() - start)
            r[key] = statistics.median(times)
    return rows


def time_ring_all_reduce(world_size: int, numels: list[int], repeats: int = 3,
                         timeout: float = 120.0) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`ring_timings_worker`: the ring all-reduce
    checked against ``dist.all_reduce`` and both timed, one list of rows per rank."""
    check_int("repeats", repeats, 1)
    numels = list(check_ints("numels", numels, 1))
    return spawn(ring_timings_worker, world_size, numels, repeats, timeout=timeout)


def run(world_sizes: tuple[int, ...] = (2, 4), sizes_bytes: list[int] | None = None,
        repeats: int = 5, p2p: bool = True) -> dict:
    """All-reduce bandwidth at each of ``world_sizes`` (on GPUs, those with a GPU per rank;
    the others are skipped, and with none left the topic is); then, unless switched off, the
    point-to-point bandwidth between two ranks (``"p2p"``: on GPUs, ``None`` with fewer than
    two, and ``"p2p_skipped"`` says why)."""
    check_ints("world_sizes", world_sizes, 1)
    if sizes_bytes is not None:
        check_plan(sizes_bytes, repeats, 0)
    check_int("repeats", repeats, 1)
    check_bool("p2p", p2p)
    rows, skipped = [], []
    for world_size in world_sizes:
        missing = gpus_missing(world_size)
        if missing:
            print(f"[allreduce] world size {world_size} skipped: {missing}", flush=True)
            skipped.append(f"world size {world_size}: {missing}")
            continue
        print(f"[allreduce] world size {world_size} ...", flush=True)
        rows += allreduce_bandwidth(world_size, sizes_bytes, repeats=repeats)
    body = {"rows": rows, "bars": [], "skipped_world_sizes": skipped}
    if p2p:
        print("[allreduce] point-to-point bandwidth, 2 ranks", flush=True)
        missing = gpus_missing(2)
        body["p2p"] = None if missing else p2p_bandwidth(sizes_bytes, repeats=repeats)
        body["p2p_skipped"] = missing
        if missing:
            print(f"  skipped: {missing}", flush=True)
    if not rows:
        body["skipped"] = "; ".join(skipped)
    return body


_COLUMNS = [  # key, header, width, how a value is written
    ("size_bytes", "size", 9, human_size),
    ("world_size", "ranks", 5, str),
    ("backend", "backend", 7, str),
    ("time_s", "time (us)", 10, lambda t: f"{t * 1e6:.1f}"),
    ("algbw_gbs", "algbw (GB/s)", 12, "{:.3f}".format),
    ("busbw_gbs", "busbw (GB/s)", 12, "{:.3f}".format),
]


def format_table(rows: list[dict]) -> str:
    """The rows of :func:`allreduce_bandwidth` or :func:`p2p_bandwidth` as a text table.

    One column for each key the rows have, in a fixed order (for send/recv: the bandwidth of
    the median run and of the fastest).
    """
    columns = [column for column in _COLUMNS if rows and column[0] in rows[0]]
    if rows and "algbw_gbs" not in rows[0]:
        columns += [("gbps", "bw (GB/s)", 9, "{:.3f}".format),
                    ("best_gbps", "fastest (GB/s)", 14, "{:.3f}".format)]
    lines = [" ".join(f"{header:>{width}}" for _, header, width, _ in columns)]
    for r in rows:
        lines.append(" ".join(f"{fmt(r[key]):>{width}}" for key, _, width, fmt in columns))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark in this process (under ``torchrun``, on every rank); rank 0 prints."""
    parser = argparse.ArgumentParser(
        prog="python -m gpudl.bench.allreduce", description="All-reduce bandwidth benchmark."
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per size")
    opts = parser.parse_args(argv)
    measured = run_under_torchrun(
        allreduce_bandwidth_worker, default_sizes(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))),
        opts.repeats, opts.warmup
    )
    if int(os.environ.get("RANK", "0")) == 0:  # the group is gone: torchrun's rank
        rank0_print(format_table(_allreduce_rows(measured)))


if __name__ == "__main__":
    main()
