"""Communication, timed: all-reduce and all-to-all bandwidth between ranks and the ring
all-reduce against ``dist.all_reduce``, every result checked exactly.

Book section: *Chapter 5, "What connects GPUs"* (measuring an interconnect) and "The ring
all-reduce, from send and receive" (the ring timed against ``dist.all_reduce``); the
all-to-all, *Chapter 11, "What the all-to-all costs"*. The models are
:func:`gpudl.estimate.allreduce_time` and :func:`gpudl.estimate.all_to_all_time`; the messages
and their checks are :mod:`gpudl.parallel.messages`'s. The topic's :func:`run` times both
collectives at each size in one group of processes (the all-to-all's rows under
``"all_to_all"``, its bus bandwidth held to the all-reduce's at 64 MiB by :data:`BARS`), and
stores the point-to-point bandwidth of :mod:`gpudl.bench.p2p` (``"p2p"``).

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
from collections.abc import Sequence

import torch
import torch.distributed as dist

from gpudl import estimate
from gpudl.bench import evaluate_bars, row
from gpudl.bench.environment import gpus_missing
from gpudl.bench.message_sizes import check_plan, default_sizes, human_size
from gpudl.bench.p2p import p2p_bandwidth
from gpudl.bench.timing import Timing
from gpudl.checks import check_bool, check_choice, check_int, check_ints
from gpudl.parallel.data.comms import ring_all_reduce, ring_all_reduce_worker
from gpudl.parallel.messages import ITEMSIZE, check_all_to_all, check_allreduce, rank_input
from gpudl.parallel.spawn import (
    device_and_sync,
    rank0_print,
    run_under_torchrun,
    spawn,
)

__all__ = [
    "BARS",
    "COLLECTIVES",
    "VIEWS",
    "WORLD_SIZES",
    "allreduce_bandwidth",
    "allreduce_bandwidth_worker",
    "collective_bandwidth_worker",
    "format_table",
    "main",
    "ring_timings_worker",
    "run",
    "time_ring_all_reduce",
]


#: The all-to-all's speed goal at each world size measured (Chapter 11). Its bus bandwidth,
#: ``(N - 1) / N x size / time``, is at least 0.7 of the all-reduce's,
#: ``2 (N - 1) / N x size / time``, at 64 MiB; so its time is at most ``1 / 1.4`` of the
#: all-reduce's. No goal is set for the links themselves.
BARS: tuple[dict, ...] = (
    {"name": "all_to_all_vs_all_reduce_x{ws}",
     "what": "time of a 64 MiB all-to-all over a 64 MiB all-reduce's, same ranks (at most "
             "1/1.4: its bus bandwidth at least 0.7 of the all-reduce's, which sends twice the "
             "bytes per rank)",
     "numerator": "all_to_all 64 MiB x{ws}", "denominator": "all_reduce 64 MiB x{ws}",
     "threshold": 1 / 1.4, "compare": "<=", "rate": "median_s"},
)
#: The book's boxes of this topic (``{gpudl-measured} allreduce <view>``: Chapter 5's
#: ``busbw`` and ``p2p``, Chapter 11's ``all_to_all``) and the bars (of :data:`BARS`) each is
#: held to.
VIEWS = {"busbw": (), "p2p": (), "all_to_all": ("all_to_all_vs_all_reduce_x{ws}",)}
#: The world sizes :func:`run` times (on GPUs, those with a GPU per rank).
WORLD_SIZES = (2, 4)
#: The collectives :func:`collective_bandwidth_worker` times.
COLLECTIVES = ("all_reduce", "all_to_all")


def _timing(message: torch.Tensor, out: torch.Tensor, collective: str, world_size: int,
            repeats: int, warmup: int) -> Timing:
    """``repeats`` timings of ``collective`` from ``message`` into ``out`` (after ``warmup``
    untimed runs), each checked; each the slowest rank's (max-reduced)."""
    device, sync = device_and_sync()
    times = []
    for step in range(warmup + repeats):
        if collective == "all_reduce":
            out.copy_(message)
        else:
            out.fill_(float("nan"))  # a part left unwritten fails the check
        dist.barrier()
        sync()
        start = time.perf_counter()
        if collective == "all_reduce":
            dist.all_reduce(out)
        else:
            dist.all_to_all_single(out, message)
        sync()
        elapsed = time.perf_counter() - start
        if collective == "all_reduce":
            check_allreduce(out, world_size)
        else:
            check_all_to_all(out, dist.get_rank(), world_size)
        if step >= warmup:
            times.append(elapsed)
    slowest = torch.tensor(times, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return Timing(tuple(slowest.tolist()), "wall-clock", True)


def _check_sizes(sizes_bytes: list[int], repeats: int, warmup: int, world_size: int,
                 collectives: Sequence[str]) -> None:
    check_plan(sizes_bytes, repeats, warmup)
    if isinstance(collectives, str) or not isinstance(collectives, Sequence):
        raise TypeError(f"collectives must be a list of names of {COLLECTIVES}, got "
                        f"{collectives!r}")
    for i, name in enumerate(collectives):
        check_choice(f"collectives[{i}]", name, COLLECTIVES)
    if "all_to_all" in collectives:
        for size in sizes_bytes:
            if size % (ITEMSIZE * world_size):
                raise ValueError(f"sizes_bytes: an all-to-all sends each of the {world_size} "
                                 f"ranks an equal part: {size} is not a multiple of "
                                 f"{ITEMSIZE * world_size} bytes")


def collective_bandwidth_worker(rank: int, world_size: int, sizes_bytes: list[int],
                                repeats: int, warmup: int,
                                collectives: Sequence[str] = COLLECTIVES) -> list[dict]:
    """Time each of ``collectives`` at each message size, checking every result exactly: a
    sum all-reduce of this rank's :func:`~gpudl.parallel.messages.rank_input`, and an
    all-to-all of it cut into ``world_size`` equal parts.

    Each timing starts after a barrier and ends when this rank holds the result (after a
    ``cuda.synchronize`` on NCCL). A repeat takes as long as its slowest rank (max-reduced);
    ``warmup`` untimed runs come first. One dict per size and collective: ``collective``,
    ``size_bytes``, ``world_size``, ``backend`` and ``timing`` (the ``repeats`` slowest-rank
    times).
    """
    _check_sizes(sizes_bytes, repeats, warmup, world_size, collectives)
    device, _ = device_and_sync()
    out = []
    for size in sizes_bytes:
        message = rank_input(rank, size // ITEMSIZE, device)
        for collective in collectives:
            timing = _timing(message, torch.empty_like(message), collective, world_size,
                             repeats, warmup)
            out.append({"collective": collective, "size_bytes": size,
                        "world_size": world_size, "backend": dist.get_backend(),
                        "timing": timing})
    return out


def allreduce_bandwidth_worker(
    rank: int, world_size: int, sizes_bytes: list[int], repeats: int, warmup: int
) -> list[dict]:
    """Time a sum all-reduce of each message size, checking every result
    (:func:`collective_bandwidth_worker` of the all-reduce alone)."""
    return collective_bandwidth_worker(rank, world_size, sizes_bytes, repeats, warmup,
                                       ("all_reduce",))


def _allreduce_rows(measured: list[dict], collective: str = "all_reduce") -> list[dict]:
    """Rows of :func:`allreduce_bandwidth` from the worker's timings of ``collective``:
    ``time_s`` (median), ``algbw_gbs`` (size / time) and ``busbw_gbs``, the per-link
    bandwidth the model implies, ``algbw x 2 (N - 1) / N`` for an all-reduce and ``algbw x
    (N - 1) / N`` for an all-to-all (nccl-tests' convention)."""
    bus = {"all_reduce": estimate.allreduce_bytes_per_rank,
           "all_to_all": estimate.all_to_all_bytes_per_rank}[collective]
    rows = []
    for m in measured:
        if m["collective"] != collective:
            continue
        size, world_size, t = m["size_bytes"], m["world_size"], m["timing"].median
        rows.append(row(f"{collective} {human_size(size)} x{world_size}", m["timing"], size,
                        size_bytes=size, world_size=world_size, backend=m["backend"],
                        time_s=t, algbw_gbs=size / t / 1e9,
                        busbw_gbs=bus(size, world_size) / t / 1e9))
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


def run(world_sizes: tuple[int, ...] = WORLD_SIZES, sizes_bytes: list[int] | None = None,
        repeats: int = 5, p2p: bool = True) -> dict:
    """All-reduce and all-to-all bandwidth at each of ``world_sizes`` (on GPUs, those with a
    GPU per rank; the others are skipped, and with none left the topic is), the all-to-all's
    rows under ``"all_to_all"`` and its bar at each world size; then, unless switched off, the
    point-to-point bandwidth between two ranks (``"p2p"``: on GPUs, ``None`` with fewer than
    two, and ``"p2p_skipped"`` says why)."""
    check_ints("world_sizes", world_sizes, 1)
    if sizes_bytes is not None:
        check_plan(sizes_bytes, repeats, 0)
    check_int("repeats", repeats, 1)
    check_bool("p2p", p2p)
    rows, all_to_all, bars, skipped = [], [], [], []
    for world_size in world_sizes:
        missing = gpus_missing(world_size)
        if missing:
            print(f"[allreduce] world size {world_size} skipped: {missing}", flush=True)
            skipped.append(f"world size {world_size}: {missing}")
            continue
        print(f"[allreduce] world size {world_size}: all-reduce and all-to-all ...", flush=True)
        sizes = default_sizes(world_size) if sizes_bytes is None else sizes_bytes
        _check_sizes(sizes, repeats, 2, world_size, COLLECTIVES)
        measured = spawn(collective_bandwidth_worker, world_size, sizes, repeats, 2,
                         COLLECTIVES)[0]  # every rank holds the slowest rank's times
        reduced, exchanged = (_allreduce_rows(measured, c) for c in COLLECTIVES)
        rows += reduced
        all_to_all += exchanged
        bars += evaluate_bars(BARS, reduced + exchanged, ws=world_size)
    body = {"rows": rows, "bars": bars, "all_to_all": all_to_all, "skipped_world_sizes": skipped}
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
