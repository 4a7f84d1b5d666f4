"""Communication, measured: how fast an all-reduce and a point-to-point send run, each result
checked.

Book section: *Chapter 1, "What connects GPUs"* (measuring an interconnect), *Chapter 2, "Past
one GPU"* (point-to-point bandwidth) and *Chapter 5, "Data parallelism"* (the ring all-reduce
cost model against measurement; the ring all-reduce built from sends and receives,
:func:`ring_all_reduce`). The model itself is :func:`gpudl.estimate.allreduce_time`; this
module communicates, checks and times.

Three ways to run the all-reduce benchmark:

* from Python (a notebook): ``allreduce_bandwidth(world_size=2)``;
* ``torchrun --standalone --nproc_per_node=2 -m gpudl.parallel.comms``;
* ``python -m gpudl.parallel.comms`` (one process: a smoke test, nothing crosses a link).

Bandwidths are in GB/s (1e9 bytes per second), as nccl-tests reports them.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from gpudl import estimate
from gpudl.parallel.launch import default_backend, rank0_print, run_under_torchrun, spawn

__all__ = [
    "allreduce_bandwidth",
    "allreduce_bandwidth_worker",
    "check_allreduce",
    "check_p2p",
    "default_sizes",
    "expected_sum",
    "format_table",
    "main",
    "p2p_bandwidth",
    "p2p_bandwidth_worker",
    "rank_input",
    "ring_all_reduce",
    "ring_all_reduce_check",
    "ring_all_reduce_worker",
    "ring_chunks",
]

_ITEMSIZE = 4  # the messages are float32


def default_sizes(world_size: int = 2) -> list[int]:
    """Message sizes in bytes, powers of 4: 4 KiB to 256 MiB when ``world_size`` ranks get a
    GPU each (NCCL), to 4 MiB when they share CPU memory over gloo (with fewer GPUs than
    ranks, or none: 256 MiB messages there would only make the run long)."""
    largest = 28 if default_backend(world_size) == "nccl" else 22
    return [1 << k for k in range(12, largest + 1, 2)]


def rank_input(rank: int, numel: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Rank ``rank``'s message: element ``i`` is ``i % 1024 + 1024 * rank`` (float32).

    Every rank and element differ, so a chunk sent to the wrong place shows; the values are
    small integers, so the sum is exact in float32 whatever order the ranks add in.
    """
    i = torch.arange(numel, device=device)
    return (i % 1024 + 1024 * rank).to(torch.float32)


def expected_sum(world_size: int, numel: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The sum over all ranks of :func:`rank_input`: what every rank must hold afterwards."""
    i = torch.arange(numel, device=device)
    return (world_size * (i % 1024) + 1024 * (world_size * (world_size - 1) // 2)).to(
        torch.float32
    )


def _check_exact(result: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    wrong = (result.flatten() != expected).nonzero().flatten()
    if len(wrong):
        first = int(wrong[0])
        raise RuntimeError(
            f"{what} is wrong at {len(wrong)} of {result.numel()} elements; the first is "
            f"index {first}: got {result.flatten()[first].item()}, "
            f"expected {expected[first].item()}"
        )


def check_allreduce(result: torch.Tensor, world_size: int) -> None:
    """Raise ``RuntimeError`` unless ``result`` is exactly the all-reduced sum of the inputs."""
    expected = expected_sum(world_size, result.numel(), result.device)
    _check_exact(result, expected, f"all-reduce over {world_size} ranks")


def check_p2p(received: torch.Tensor, sender: int) -> None:
    """Raise ``RuntimeError`` unless ``received`` is exactly rank ``sender``'s message."""
    expected = rank_input(sender, received.numel(), received.device)
    _check_exact(received, expected, f"message from rank {sender}")


def _check_plan(sizes_bytes: list[int], repeats: int, warmup: int) -> None:
    if not sizes_bytes:
        raise ValueError("sizes_bytes must list at least one message size")
    for size in sizes_bytes:
        if isinstance(size, bool) or not isinstance(size, int):
            raise TypeError(f"message sizes must be ints (bytes), got {size!r}")
        if size <= 0 or size % _ITEMSIZE:
            raise ValueError(
                f"message sizes must be positive multiples of {_ITEMSIZE} bytes (float32), "
                f"got {size}"
            )
    for name, value, least in (("repeats", repeats, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")


def device_and_sync() -> tuple[torch.device, Callable[[], None]]:
    """The device this rank's messages live on (its GPU under NCCL, else the CPU) and a
    function that waits for the GPU's queued work (a no-op on the CPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device()), torch.cuda.synchronize
    return torch.device("cpu"), lambda: None


def allreduce_bandwidth_worker(
    rank: int, world_size: int, sizes_bytes: list[int], repeats: int, warmup: int
) -> list[dict]:
    """Time a sum all-reduce of each message size, checking every result.

    Each timing starts after a barrier and ends when this rank holds the result (after a
    ``cuda.synchronize`` on NCCL). A repeat takes as long as its slowest rank; the row reports
    the median over ``repeats`` of that, after ``warmup`` untimed runs. ``algbw`` is
    size / time; ``busbw`` is the per-link bandwidth the ring model implies,
    ``algbw * 2 (N - 1) / N`` (nccl-tests' convention).
    """
    _check_plan(sizes_bytes, repeats, warmup)
    device, sync = device_and_sync()
    rows = []
    for size in sizes_bytes:
        message = rank_input(rank, size // _ITEMSIZE, device)
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
        time_s = statistics.median(slowest.tolist())
        rows.append({
            "size_bytes": size,
            "world_size": world_size,
            "backend": dist.get_backend(),
            "time_s": time_s,
            "algbw_gbs": size / time_s / 1e9,
            "busbw_gbs": estimate.allreduce_bytes_per_rank(size, world_size) / time_s / 1e9,
        })
    return rows


def allreduce_bandwidth(
    world_size: int = 2,
    sizes_bytes: list[int] | None = None,
    repeats: int = 5,
    warmup: int = 2,
    timeout: float = 120.0,
) -> list[dict]:
    """Spawn ``world_size`` processes and measure all-reduce bandwidth (one row per size).

    Rows have ``size_bytes``, ``world_size``, ``backend``, ``time_s``, ``algbw_gbs`` and
    ``busbw_gbs``; see :func:`allreduce_bandwidth_worker`.
    """
    sizes = default_sizes(world_size) if sizes_bytes is None else list(sizes_bytes)
    _check_plan(sizes, repeats, warmup)
    per_rank = spawn(
        allreduce_bandwidth_worker, world_size, sizes, repeats, warmup, timeout=timeout
    )
    return per_rank[0]  # every rank holds the same rows: the times were max-reduced


def p2p_bandwidth_worker(
    rank: int, world_size: int, sizes_bytes: list[int], repeats: int, warmup: int
) -> list[dict]:
    """Time a ping-pong between ranks 0 and 1 for each message size; other ranks only wait.

    Rank 0 sends its message (:func:`rank_input`) with ``dist.send``; rank 1 receives it and
    sends it back. A repeat starts after a barrier; the one-way time is half the round trip
    rank 0 sees (after a ``cuda.synchronize`` on NCCL). Both copies are checked after the
    clock stops. The row reports the median over ``repeats``, after ``warmup`` untimed trips;
    ``gbps`` is size / one-way time in GB/s. Rank 0 returns the rows, the others ``[]``.
    """
    _check_plan(sizes_bytes, repeats, warmup)
    if world_size < 2:
        raise ValueError(f"a point-to-point benchmark needs at least 2 ranks, got {world_size}")
    device, sync = device_and_sync()
    rows = []
    for size in sizes_bytes:
        message = rank_input(0, size // _ITEMSIZE, device)
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
            time_s = statistics.median(times)
            rows.append({"size_bytes": size, "backend": dist.get_backend(), "time_s": time_s,
                         "gbps": size / time_s / 1e9})
    return rows


def p2p_bandwidth(
    sizes_bytes: list[int] | None = None,
    repeats: int = 5,
    warmup: int = 2,
    timeout: float = 120.0,
) -> list[dict]:
    """Spawn 2 processes and measure point-to-point bandwidth (one row per size).

    Rows have ``size_bytes``, ``backend``, ``time_s`` (one way) and ``gbps`` (GB/s); see
    :func:`p2p_bandwidth_worker`.
    """
    sizes = default_sizes() if sizes_bytes is None else list(sizes_bytes)
    _check_plan(sizes, repeats, warmup)
    return spawn(p2p_bandwidth_worker, 2, sizes, repeats, warmup, timeout=timeout)[0]



def ring_chunks(numel: int, world_size: int) -> list[tuple[int, int]]:
    """The ring all-reduce's ``world_size`` chunks of a tensor of ``numel`` elements, as
    ``(start, end)``: contiguous, in order, their sizes differing by at most one (some are
    empty when ``numel < world_size``)."""
    return [(i * numel // world_size, (i + 1) * numel // world_size) for i in range(world_size)]


def ring_all_reduce(tensor: torch.Tensor) -> int:
    """Sum ``tensor`` over all ranks, in place, by a ring of sends and receives; return the
    bytes this rank sent.

    Called on every rank of the default process group, like ``dist.all_reduce``. The tensor
    is cut into ``N`` chunks (:func:`ring_chunks`); rank ``r`` sends to ``r + 1`` and receives
    from ``r - 1``. **Reduce-scatter**, ``N - 1`` steps: at step ``s`` rank ``r`` sends chunk
    ``r - s`` and adds the chunk ``r - s - 1`` it receives to its own, so that afterwards it
    holds the complete sum of chunk ``r + 1``. **All-gather**, ``N - 1`` more steps: at step
    ``s`` it sends chunk ``r + 1 - s``, complete, and receives chunk ``r - s`` in its place
    (indices modulo ``N``). Each step's send and receive are posted together
    (``batch_isend_irecv``), so no rank waits for a receive that nobody has posted.

    Every rank sends ``2 (N - 1)`` chunks: ``2 (N - 1) / N`` of the tensor's bytes when ``N``
    divides its length, :func:`gpudl.estimate.allreduce_bytes_per_rank`; all ranks together
    send exactly ``2 (N - 1)`` times the tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise TypeError(f"tensor must have a real numeric dtype to be summed, got {tensor.dtype}")
    if not tensor.is_contiguous():
        raise ValueError(f"tensor must be contiguous (it is summed in place), got strides "
                         f"{tensor.stride()}")
    if not dist.is_initialized():
        raise RuntimeError("ring_all_reduce needs a process group: call it inside a worker "
                           "started by gpudl.parallel.launch.spawn or torchrun")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size == 1:
        return 0
    flat = tensor.view(-1)
    chunks = ring_chunks(flat.numel(), world_size)
    incoming = torch.empty(max(end - start for start, end in chunks), dtype=tensor.dtype,
                           device=tensor.device)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    sent = 0

    def exchange(send: int, receive: int) -> torch.Tensor:
        nonlocal sent
        (s0, s1), (r0, r1) = chunks[send], chunks[receive]
        ops = []  # an empty chunk is skipped by its sender and its receiver alike
        if s1 > s0:
            ops.append(dist.P2POp(dist.isend, flat[s0:s1], right))
            sent += s1 - s0
        if r1 > r0:
            ops.append(dist.P2POp(dist.irecv, incoming[:r1 - r0], left))
        for work in dist.batch_isend_irecv(ops) if ops else []:
            work.wait()
        return incoming[:r1 - r0]

    for step in range(world_size - 1):  # reduce-scatter
        receive = (rank - step - 1) % world_size
        start, end = chunks[receive]
        flat[start:end] += exchange((rank - step) % world_size, receive)
    for step in range(world_size - 1):  # all-gather
        receive = (rank - step) % world_size
        start, end = chunks[receive]
        flat[start:end].copy_(exchange((rank + 1 - step) % world_size, receive))
    return sent * tensor.element_size()


def _check_numels(numels: list[int]) -> None:
    if not numels:
        raise ValueError("numels must list at least one tensor length")
    for numel in numels:
        if isinstance(numel, bool) or not isinstance(numel, int) or numel < 1:
            raise ValueError(f"numels must be positive ints (tensor lengths), got {numel!r}")


def ring_all_reduce_worker(rank: int, world_size: int, numels: list[int]) -> list[dict]:
    """For each length in ``numels``, all-reduce this rank's :func:`rank_input` with
    :func:`ring_all_reduce` and with ``dist.all_reduce``, check both against
    :func:`expected_sum` exactly, and time them.

    Rows: ``numel``, ``bytes`` (of the tensor), ``bytes_sent`` (by this rank, counted by the
    ring), ``ring_s`` and ``all_reduce_s`` (wall-clock seconds on this rank, after a
    barrier; on NCCL after a ``cuda.synchronize``), and ``equal`` (the two results are
    identical).
    """
    _check_numels(numels)
    device, sync = device_and_sync()
    rows = []
    for numel in numels:
        ours, theirs = (rank_input(rank, numel, device) for _ in range(2))
        times = []
        for reduce in (ring_all_reduce, dist.all_reduce):
            buffer = ours if reduce is ring_all_reduce else theirs
            dist.barrier()
            sync()
            start = time.perf_counter()
            result = reduce(buffer)
            sync()
            times.append(time.perf_counter() - start)
            if reduce is ring_all_reduce:
                sent = result
            check_allreduce(buffer, world_size)
        rows.append({"numel": numel, "bytes": numel * _ITEMSIZE, "bytes_sent": sent,
                     "ring_s": times[0], "all_reduce_s": times[1],
                     "equal": bool(torch.equal(ours, theirs))})
    return rows


def ring_all_reduce_check(
    world_size: int = 4, numels: list[int] | None = None, timeout: float = 120.0
) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`ring_all_reduce_worker`; one list of rows per
    rank. The default lengths include ones the world size does not divide and ones smaller
    than it."""
    numels = [1, 3, 1000, 1001, 4099] if numels is None else list(numels)
    _check_numels(numels)
    return spawn(ring_all_reduce_worker, world_size, numels, timeout=timeout)


def _human(n_bytes: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n_bytes < 1024 or unit == "GiB":
            return f"{n_bytes:g} {unit}"
        n_bytes /= 1024


_COLUMNS = [  # key, header, width, how a value is written
    ("size_bytes", "size", 9, _human),
    ("world_size", "ranks", 5, str),
    ("backend", "backend", 7, str),
    ("time_s", "time (us)", 10, lambda t: f"{t * 1e6:.1f}"),
    ("algbw_gbs", "algbw (GB/s)", 12, "{:.3f}".format),
    ("busbw_gbs", "busbw (GB/s)", 12, "{:.3f}".format),
    ("gbps", "bw (GB/s)", 9, "{:.3f}".format),
]


def format_table(rows: list[dict]) -> str:
    """The rows of :func:`allreduce_bandwidth` or :func:`p2p_bandwidth` as a text table.

    One column for each key the rows have, in a fixed order.
    """
    columns = [column for column in _COLUMNS if rows and column[0] in rows[0]]
    lines = [" ".join(f"{header:>{width}}" for _, header, width, _ in columns)]
    for row in rows:
        lines.append(" ".join(f"{fmt(row[key]):>{width}}" for key, _, width, fmt in columns))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the benchmark in this process (under ``torchrun``, on every rank); rank 0 prints."""
    parser = argparse.ArgumentParser(
        prog="python -m gpudl.parallel.comms", description="All-reduce bandwidth benchmark."
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per size")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs per size")
    opts = parser.parse_args(argv)
    rows = run_under_torchrun(
        allreduce_bandwidth_worker, default_sizes(int(os.environ.get("LOCAL_WORLD_SIZE", "1"))),
        opts.repeats, opts.warmup
    )
    rank0_print(format_table(rows))


if __name__ == "__main__":
    main()
