"""How a simulated block runs: its threads taken one after another by a pool of reused
interpreter threads, and ``syncthreads`` as a barrier that sleeps.

Book section: *appendix D, "Two backends, one code path"*.

Numba's CUDA simulator starts one interpreter thread for every thread of a block and polls
them until all have finished. Starting and joining a thread costs about 100 microseconds,
several times what the body of a small kernel costs a simulated thread, and the polling holds
the interpreter's lock against the very threads it waits for. :func:`install` (called by
:func:`gpudl.simulator.install`) replaces the simulator's block manager with
:class:`SimulatedBlock`:

* A block's simulated threads are tasks. A :class:`Worker` (an interpreter thread, kept in a
  pool and reused by every later block and launch) takes them one after another: a kernel
  that never waits runs all its threads on one worker, with no thread started at all.
* A task that must wait (``cuda.syncthreads()``, or a warp intrinsic of
  :mod:`gpudl.simulator` waiting for its warp) first makes sure the block can go on: when no
  other worker of the block is running and tasks are left that have not started, one more
  worker joins the block. A block whose threads all meet at a barrier thus gets one worker per
  thread, as before, and the workers are reused afterwards.
* The barrier has the simulator's rule: once every thread of the block that has not returned
  is waiting there (those not started yet count as not returned), all go on. The launch
  sleeps until the last task has finished or one has raised; then the others are aborted and
  the launch raises that thread's own error, named by its thread and block as the simulator
  names it.

The answers are the same; only the order in which simulated threads that never wait for each
other run changes, which no correct kernel can depend on. While a block runs the interpreter
switches threads every :data:`SWITCH_INTERVAL_S` (restored when the last running block ends).
"""

from __future__ import annotations

import queue
import sys
import threading

import numpy as np

__all__ = ["SWITCH_INTERVAL_S", "SimulatedBlock", "Worker", "install", "worker_count"]

#: The interpreter's thread switch interval, in seconds, while a block runs (Python's default
#: is 5 ms). A simulated thread runs until it waits (a barrier, a warp intrinsic) or returns;
#: a longer slice spares the threads of a block that wait at barriers most of their forced
#: switches. Measured on 2 cores, tests/test_matmul.py, test_reduction.py and test_attention.py
#: together took 105 s (132 s of CPU) with the simulator's polling manager, and 58 s (61 s
#: of CPU) with a sleeping barrier and this interval (61 s at 5 ms, 72 s at 0.5 ms), before
#: the threads were pooled.
SWITCH_INTERVAL_S = 0.05
_switching = {"blocks": 0, "before": 0.0}
_switching_lock = threading.Lock()

_pool: list[Worker] = []  # idle workers
_pool_lock = threading.Lock()
_created = [0]


def worker_count() -> int:
    """How many worker threads the pool has started so far (idle or busy)."""
    return _created[0]


def _take_worker() -> Worker:
    with _pool_lock:
        if _pool:
            return _pool.pop()
        _created[0] += 1
    worker = Worker()
    worker.start()
    return worker


class Worker(threading.Thread):
    """An interpreter thread that runs simulated threads (tasks) of the blocks it is given.

    While it runs a task it carries what the simulator's kernel API asks of the current
    thread: ``blockIdx``, ``threadIdx``, ``thread_id``, ``syncthreads`` (and, through
    :class:`SimulatedBlock`, ``abort`` and ``exception``). State that code running in a task
    keeps on the current thread under a ``_gpudl_`` name (the tracer's counters) is removed
    before the next task, as if each simulated thread had a thread of its own."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name=f"gpudl-simulated-{_created[0]}")
        self._inbox: queue.SimpleQueue[SimulatedBlock] = queue.SimpleQueue()
        self.block: SimulatedBlock | None = None
        self.blockIdx = self.threadIdx = None
        self.thread_id = -1
        self.exception: tuple | None = None

    @property
    def abort(self) -> bool:
        """Whether another thread of the current block has failed."""
        return self.block is not None and self.block.failed is not None

    @property
    def _manager(self) -> object:  # the simulator's BlockManager, for gpudl.simulator
        return None if self.block is None else self.block.manager

    def give(self, block: SimulatedBlock) -> None:
        """Serve ``block``."""
        self._inbox.put(block)

    def run(self) -> None:
        while True:
            block = self._inbox.get()
            self.block = block
            block.serve(self)
            self.block = None
            with _pool_lock:
                _pool.append(self)

    def run_task(self, block: SimulatedBlock, point: tuple[int, int, int]) -> None:
        """Run the simulated thread at ``point`` of ``block`` and record its exception."""
        from numba.cuda.simulator.kernelapi import Dim3

        for key in [k for k in vars(self) if k.startswith("_gpudl_")]:
            delattr(self, key)
        self.threadIdx = Dim3(*point)
        self.blockIdx = block.block_index
        bx, by, _ = block.block_dim
        self.thread_id = point[0] + bx * (point[1] + by * point[2])
        self.exception = None
        try:
            if block.debug:
                with np.errstate(divide="raise"):
                    block.target()
            else:
                block.target()
        except Exception as e:  # noqa: BLE001  (recorded, raised by the launch: the simulator's way)
            where = f"tid={list(point)} ctaid={list(block.grid_point)}"
            self.exception = (type(e)(f"{where}: {e}" if str(e) else where),
                              sys.exc_info()[2])
        block.finished(self)

    def syncthreads(self) -> None:
        """``cuda.syncthreads()`` of the current task."""
        self.block.wait(self)  # type: ignore[union-attr]

    def syncthreads_count(self, value: object) -> int:
        """``cuda.syncthreads_count``: how many threads of the block passed a true value."""
        return int(np.count_nonzero(self._vote(value)))

    def syncthreads_and(self, value: object) -> int:
        """``cuda.syncthreads_and``: 1 if every thread of the block passed a true value."""
        return int(np.all(self._vote(value)))

    def syncthreads_or(self, value: object) -> int:
        """``cuda.syncthreads_or``: 1 if any thread of the block passed a true value."""
        return int(np.any(self._vote(value)))

    def _vote(self, value: object) -> np.ndarray:
        state = self.block.manager.block_state  # type: ignore[union-attr]
        state[self.threadIdx.x, self.threadIdx.y, self.threadIdx.z] = value
        self.syncthreads()
        votes = state.copy()
        self.syncthreads()
        return votes


class SimulatedBlock:
    """One launch of one block: its tasks, the workers serving it, and its barrier."""

    def __init__(self, manager: object, grid_point: tuple, target, debug: bool) -> None:
        from numba.cuda.simulator.kernelapi import Dim3

        self.manager, self.grid_point, self.target, self.debug = manager, grid_point, target, debug
        self.block_dim = tuple(manager._block_dim)  # type: ignore[attr-defined]
        self.block_index = Dim3(*grid_point)
        self.points = list(np.ndindex(*self.block_dim))
        self.lock = threading.Lock()
        self.released = threading.Condition(self.lock)  # the tasks waiting at the barrier
        self.settled = threading.Condition(self.lock)  # the launch
        self.next = 0  # the next task to start
        self.alive = len(self.points)  # tasks not finished (started or not)
        self.waiting, self.generation = 0, 0
        self.running = 0  # workers of this block that are not waiting
        self.done: set[int] = set()  # thread ids of the tasks that have finished
        self.failed: Worker | None = None  # the worker whose task raised first

    def exited(self, thread_id: int) -> bool:
        """Whether the simulated thread ``thread_id`` of this block has finished."""
        return thread_id in self.done

    def serve(self, worker: Worker) -> None:
        """Run tasks on ``worker`` until none is left (or one has failed)."""
        while True:
            with self.lock:
                if self.failed is not None or self.next == len(self.points):
                    self.running -= 1
                    return
                point = self.points[self.next]
                self.next += 1
            worker.run_task(self, point)

    def _recruit(self) -> None:  # with the lock held: one more worker if none is running
        if not self.running and self.next < len(self.points) and self.failed is None:
            self.running += 1
            _take_worker().give(self)

    def blocking(self) -> None:
        """The calling task is about to wait for other threads of the block."""
        with self.lock:
            self.running -= 1
            self._recruit()

    def unblocked(self) -> None:
        """The calling task waits no more."""
        with self.lock:
            self.running += 1

    def _release_if_all_wait(self) -> None:  # with the lock held
        if self.waiting and self.waiting == self.alive:
            self.waiting, self.generation = 0, self.generation + 1
            self.released.notify_all()

    def wait(self, worker: Worker) -> None:
        """``syncthreads`` of ``worker``'s task: wait until every live thread of the block has
        reached it (``RuntimeError`` once another thread has failed, as the simulator)."""
        if self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads call")
        with self.lock:
            generation = self.generation
            self.waiting += 1
            self.running -= 1
            self._release_if_all_wait()
            self._recruit()
            while self.generation == generation and self.failed is None:
                self.released.wait()
            self.running += 1
        if self.failed is not None:
            raise RuntimeError("abort flag set on syncthreads clear")

    def finished(self, worker: Worker) -> None:
        """``worker``'s task has returned or raised."""
        with self.lock:
            self.alive -= 1
            self.done.add(worker.thread_id)
            if worker.exception and self.failed is None:
                self.failed = worker
                self.released.notify_all()
            self._release_if_all_wait()
            if self.failed is not None or not self.alive:
                self.settled.notify_all()

    def run(self) -> None:
        """Run the block to its end, or raise the first failing thread's exception."""
        with _switching_lock:
            if not _switching["blocks"]:
                _switching["before"] = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            _switching["blocks"] += 1
        try:
            with self.lock:
                self._recruit()
                while self.alive and self.failed is None:
                    self.settled.wait()
                failed = self.failed
            if failed is not None:
                raise failed.exception[0].with_traceback(failed.exception[1])
        finally:
            with _switching_lock:
                _switching["blocks"] -= 1
                if not _switching["blocks"]:
                    sys.setswitchinterval(_switching["before"])


def install(kernel: object) -> None:
    """Run every block of the simulator's ``kernel`` module with :class:`SimulatedBlock`."""

    def run_block(self, grid_point, *args) -> None:
        def target():
            self._f(*args)

        self._gpudl_block = SimulatedBlock(self, grid_point, target, self._debug)
        self._gpudl_block.run()

    kernel.BlockManager.run = run_block
