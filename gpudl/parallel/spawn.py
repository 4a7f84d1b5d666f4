"""Start a worker on several processes, each with a process group, and collect the results.

Book section: *Chapter 5, "What connects GPUs"*.

A worker is a function ``worker(rank, world_size, *args)`` defined at the top level of a module
(spawned children import it by name, so a function typed into a notebook cannot be one). It runs
two ways, with the same code:

* :func:`spawn` starts ``world_size`` processes from Python (a notebook, a test) and returns
  what each rank returned, in rank order;
* :func:`run_under_torchrun` runs it inside a script started by ``torchrun`` (one process per
  rank, any number of nodes), or as a single process when the script is started plainly.

NCCL is used when every rank on a machine can have a GPU of its own, gloo otherwise. Inside a
worker, :func:`device_and_sync` gives the rank's device and :class:`Clock` times it.

:func:`spawn`'s processes are forked from a server process that has imported torch and NumPy
already (multiprocessing's ``forkserver``, one server per parent process, started at its first
spawn), not started from a fresh interpreter: a group of four ranks starts in about half the
time. Nothing else is imported there, so each rank imports gpudl and its worker itself, as a
freshly spawned process does, with the parent's environment as it is at the spawn.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from multiprocessing.connection import Connection, wait
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from gpudl.checks import (
    check_callable,
    check_choice,
    check_instance,
    check_int,
    check_positive,
)

__all__ = [
    "Clock",
    "WorkerError",
    "default_backend",
    "device_and_sync",
    "rank0_print",
    "run_under_torchrun",
    "spawn",
]

T = TypeVar("T")
_HOST = "127.0.0.1"
#: What the server that :func:`spawn` forks its ranks from imports once (no CUDA, no gpudl:
#: their state must be each rank's own). The distributed packages the strategies use cost a
#: rank about 1.6 s of CPU to import after torch on this project's 2-core machine.
_PRELOAD = ["torch", "numpy", "torch.distributed.fsdp", "torch.distributed.tensor",
            "torch.distributed.pipelining", "torch.nn.parallel"]


def _context() -> mp.context.BaseContext:
    """Forked from a server that has imported :data:`_PRELOAD` where the platform has one
    (Linux, macOS), started from a fresh interpreter elsewhere."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


class WorkerError(RuntimeError):
    """A worker raised an exception, or its process died; ``rank`` says which one."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(message)
        self.rank = rank


def default_backend(world_size: int) -> str:
    """``"nccl"`` when there is a GPU for each of ``world_size`` local ranks, else ``"gloo"``."""
    check_int("world_size", world_size, 1)
    if (
        dist.is_nccl_available()
        and torch.cuda.is_available()
        and torch.cuda.device_count() >= world_size
    ):
        return "nccl"
    return "gloo"


def rank0_print(*args: Any, **kwargs: Any) -> None:
    """``print`` on rank 0 only.

    The rank is the process group's; with no group (before it is set up, or after it is torn
    down) it is ``torchrun``'s ``RANK`` variable, and a plain process counts as rank 0.
    """
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ.get("RANK", 0))
    if rank == 0:
        kwargs.setdefault("flush", True)
        print(*args, **kwargs)


def device_and_sync() -> tuple[torch.device, Callable[[], None]]:
    """The device this rank's messages live on (its GPU under NCCL, else the CPU) and a
    function that waits for the GPU's queued work (a no-op on the CPU)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device()), torch.cuda.synchronize
    return torch.device("cpu"), lambda: None


class Clock:
    """Marks of "now", as seconds of ``time.perf_counter`` on the CPU and as CUDA events
    recorded on the current stream on a GPU; :meth:`seconds` turns them into seconds since
    the first mark."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = check_instance("device", device, torch.device).type == "cuda"

    def mark(self) -> float | torch.cuda.Event:
        """Now: a ``time.perf_counter`` reading, or a CUDA event recorded on the stream."""
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, start: float | torch.cuda.Event, mark: float | torch.cuda.Event) -> float:
        """Seconds from mark ``start`` to mark ``mark`` (waiting for an event to complete)."""
        if not self.cuda:
            return mark - start
        mark.synchronize()
        return start.elapsed_time(mark) / 1e3


def _check_worker(worker: object) -> None:
    """Check that ``worker`` can be imported by name in a child process."""
    if not callable(worker):
        raise TypeError(
            f"worker must be a function worker(rank, world_size, *args), "
            f"got {type(worker).__name__}"
        )
    module = getattr(worker, "__module__", None)
    qualname = getattr(worker, "__qualname__", "")
    problem = None
    if module in (None, "__main__", "__mp_main__"):
        problem = f"it is defined in {module or 'no module'!r} (a notebook, a script or the REPL)"
    elif "<" in qualname:  # <lambda>, or <locals> of another function
        problem = f"{module}.{qualname} is a lambda or a nested function"
    else:
        try:
            pickle.dumps(worker)
            return
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            problem = f"it cannot be pickled ({exc})"
    raise ValueError(
        f"worker {qualname or worker!r} cannot be started in a new process: {problem}. "
        "Spawned processes import the worker by module and name, so it must be a function "
        "defined at the top level of an importable module (for example in gpudl.parallel)."
    )


def _check_backend(backend: object, world_size: int) -> str:
    """``backend``, or the default one for ``world_size`` when it is None: ``"gloo"``, or
    ``"nccl"`` where the machine has a GPU for every rank."""
    if backend is None:
        return default_backend(world_size)
    check_choice("backend", backend, ("gloo", "nccl"))
    if backend == "nccl" and default_backend(world_size) != "nccl":
        raise ValueError(f"backend 'nccl' needs NCCL and a GPU for each of the {world_size} "
                         f"ranks; this machine has {torch.cuda.device_count()} GPU(s)")
    return backend


def _device_id(backend: str, local_rank: int) -> torch.device | None:
    """The GPU an NCCL rank is bound to (``init_process_group``'s ``device_id``: collectives
    and barriers then know their device and do not warn that they guess it); ``None`` for
    gloo."""
    return torch.device("cuda", local_rank) if backend == "nccl" else None


def _child(
    rank: int,
    world_size: int,
    backend: str,
    port: int,
    payload: bytes,
    conn: Connection,
    timeout: float,
    num_threads: int,
    environ: dict[str, str],
) -> None:
    """Body of each spawned process: join the group, run the worker, report, tear down."""
    try:
        os.environ.clear()  # the parent's at the spawn, not the fork server's at its start
        os.environ.update(environ)
        torch.set_num_threads(num_threads)
        worker, args = pickle.loads(payload)
        if backend == "nccl":
            torch.cuda.set_device(rank)
        store = dist.TCPStore(
            _HOST, port, world_size, is_master=False, timeout=timedelta(seconds=timeout)
        )
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size,
            timeout=timedelta(seconds=timeout), device_id=_device_id(backend, rank),
        )
        result = worker(rank, world_size, *args)
        dist.barrier()
        dist.destroy_process_group()
        conn.send_bytes(pickle.dumps(("ok", result)))
    except BaseException as exc:  # report everything, even KeyboardInterrupt, to the parent
        summary = "".join(traceback.format_exception_only(exc)).strip()
        text = "".join(traceback.format_exception(exc))
        conn.send_bytes(pickle.dumps(("error", summary, text, time.time())))
        if dist.is_initialized():
            dist.destroy_process_group()
    finally:
        conn.close()


#: Seconds the other ranks get, after one reports an error, to show whether one of them died.
_ECHO_GRACE_S = 1.0


def _read(ready: list, rank_of: dict, world_size: int, results: dict[int, Any]) -> list[tuple]:
    """Each ready rank's message: a result into ``results``; the errors returned, as (time,
    rank, summary, traceback); a rank whose pipe closed without one died, and is raised."""
    errors = []
    for conn in ready:
        rank = rank_of[conn]
        try:
            message = pickle.loads(conn.recv_bytes())
        except EOFError:
            raise WorkerError(
                rank, f"rank {rank} of {world_size} died without reporting a result "
                "(killed, out of memory, or a crash in native code)"
            ) from None
        if message[0] == "ok":
            results[rank] = message[1]
        else:
            errors.append((message[3], rank, message[1], message[2]))
    return errors


def _collect(conns: list[Connection], world_size: int, timeout: float) -> list[Any]:
    """Wait for one message per rank; raise on the first error, or on the deadline."""
    deadline = time.monotonic() + timeout
    rank_of = {conn: rank for rank, conn in enumerate(conns)}
    results: dict[int, Any] = {}
    while len(results) < world_size:
        pending = [conn for conn in conns if rank_of[conn] not in results]
        left = deadline - time.monotonic()
        ready = wait(pending, timeout=left) if left > 0 else []
        if not ready:
            ranks = sorted(rank_of[conn] for conn in pending)
            raise TimeoutError(
                f"spawn: rank(s) {ranks} of world size {world_size} had not finished after "
                f"{timeout:g} s; all workers were stopped (raise timeout= if they need longer)"
            )
        errors = _read(ready, rank_of, world_size, results)
        if errors:
            # a rank that died is the cause of its peers' errors ("connection closed by peer"),
            # which can arrive first: the others get a moment to report or to be seen dead
            others = [conn for conn in pending if conn not in ready]
            if others:
                errors += _read(wait(others, timeout=_ECHO_GRACE_S), rank_of, world_size,
                                results)
            # the earliest error is the cause; later ones are usually its echoes
            _, rank, summary, text = min(errors)
            raise WorkerError(
                rank, f"rank {rank} of {world_size} failed with {summary}\n\n"
                f"Traceback in rank {rank}:\n{text}"
            )
    return [results[rank] for rank in range(world_size)]


#: Seconds a terminated child has to exit before it is killed (all children together).
_TERMINATE_GRACE_S = 5.0


def _join_all(procs: list[mp.process.BaseProcess], seconds: float) -> None:
    """Wait for the children to exit, ``seconds`` in all (not per child)."""
    deadline = time.monotonic() + seconds
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))


def _stop(procs: list[mp.process.BaseProcess], grace: float) -> None:
    """Join the children, terminating those still alive after ``grace`` s, and killing those
    that then ignore the signal for :data:`_TERMINATE_GRACE_S` more: every deadline is shared
    by all the children, so stopping N of them takes as long as stopping one."""
    _join_all(procs, grace)
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    _join_all(procs, _TERMINATE_GRACE_S)
    for proc in procs:
        if proc.is_alive():
            proc.kill()
    for proc in procs:
        proc.join()


def spawn(
    worker: Callable[..., Any],
    world_size: int,
    *args: Any,
    timeout: float = 120.0,
    backend: str | None = None,
    num_threads: int = 1,
) -> list[Any]:
    """Run ``worker(rank, world_size, *args)`` on ``world_size`` new processes.

    Each process has the default process group initialised (``backend``: NCCL with one GPU per
    rank when there are enough GPUs, gloo otherwise) and ``num_threads`` torch threads. Returns
    the workers' return values in rank order. A worker's exception is raised here as
    :class:`WorkerError` naming the rank, with its traceback, and the other ranks are stopped;
    if the workers have not all finished after ``timeout`` seconds, :class:`TimeoutError`.
    Every argument is checked before any process starts.
    """
    check_int("world_size", world_size, 1)
    check_positive("timeout", timeout)
    check_int("num_threads", num_threads, 1)
    _check_worker(worker)
    backend = _check_backend(backend, world_size)
    payload = pickle.dumps((worker, args))
    # The parent hosts the rendezvous store on a port the OS picks (port 0) and keeps it bound
    # for the whole run, so two runs can never be handed the same port.
    store = dist.TCPStore(_HOST, 0, world_size, is_master=True, wait_for_workers=False)
    ctx = _context()
    procs: list[mp.process.BaseProcess] = []
    conns: list[Connection] = []
    finished = False
    try:
        for rank in range(world_size):
            receiver, sender = ctx.Pipe(duplex=False)
            proc = ctx.Process(
                target=_child,
                args=(rank, world_size, backend, store.port, payload, sender, timeout,
                      num_threads, dict(os.environ)),
                name=f"gpudl-rank{rank}",
            )
            proc.start()
            sender.close()  # the child holds the only writer: its death reads as EOF here
            procs.append(proc)
            conns.append(receiver)
        results = _collect(conns, world_size, timeout)
        finished = True
        return results
    finally:
        _stop(procs, grace=10.0 if finished else 0.0)
        for conn in conns:
            conn.close()
        del store


def run_under_torchrun(worker: Callable[..., T], *args: Any) -> T:
    """Run ``worker(rank, world_size, *args)`` in this process, as one rank of a group.

    Under ``torchrun`` (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``/``PORT`` set)
    the group is joined with ``env://``; NCCL when each local rank has a GPU, gloo otherwise.
    Started without ``torchrun`` it runs as a group of one on a free port, so the same script
    works both ways. The group is always destroyed; returns this rank's result.
    """
    check_callable("worker", worker)
    if "RANK" in os.environ:
        rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        backend = default_backend(int(os.environ.get("LOCAL_WORLD_SIZE", world_size)))
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend, init_method="env://",
                                device_id=_device_id(backend, local_rank))
    else:
        rank, world_size = 0, 1
        backend = default_backend(1)
        if backend == "nccl":
            torch.cuda.set_device(0)
        store = dist.TCPStore(_HOST, 0, 1, is_master=True, wait_for_workers=False)
        dist.init_process_group(backend, store=store, rank=0, world_size=1,
                                device_id=_device_id(backend, 0))
    try:
        result = worker(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return result
