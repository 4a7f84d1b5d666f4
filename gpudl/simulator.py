"""What Numba's CUDA simulator lacks, supplied: warp intrinsics, thread-safe shared arrays, a
block barrier that waits instead of polling, and the launch guard against one memory passed
twice.

Book section: *appendix D, "Two backends, one code path"*.

:mod:`gpudl` calls :func:`install` when :mod:`gpudl.backend` has chosen the simulator (never on
a real GPU). It supplies the warp-level intrinsics the simulator lacks (``shfl_sync``,
``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``syncwarp``, ``all_sync``,
``any_sync``, ``ballot_sync``) with real per-warp semantics: the threads of a warp meet at a
:class:`Rendezvous`, exchange values, and a lane that has exited while others wait for it
raises :class:`WarpDivergenceError` instead of hanging. It makes ``cuda.shared.array``
thread-safe (the simulator's own lookup races), runs each block with a :class:`BlockBarrier`
(the simulator's own block manager polls every thread of the block in a loop until all have
finished, holding the interpreter's lock against the threads it waits for), and it refuses
a launch that passes one memory as two arguments of a kernel that writes one of them
(:mod:`gpudl.aliasing`): the simulator copies each NumPy argument in and out, where a GPU
sees one memory.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from gpudl.backend import WARP_SIZE

__all__ = ["SIMULATED_INTRINSICS", "SWITCH_INTERVAL_S", "BlockBarrier", "Rendezvous",
           "WarpDivergenceError", "install", "rendezvous"]

_FULL_MASK = 0xFFFFFFFF
_POLL_S = 0.002
#: The interpreter's thread switch interval, in seconds, while a block runs (Python's default
#: is 5 ms). A simulated thread runs until it waits (a barrier, a warp intrinsic) or returns;
#: a longer slice spares the hundreds of threads of a block most of their forced switches.
#: Measured on 2 cores, tests/test_matmul.py, test_reduction.py and test_attention.py
#: together took 105 s (132 s of CPU) with the simulator's polling manager, and 58 s (61 s
#: of CPU) with :class:`BlockBarrier` and this interval (61 s at 5 ms, 72 s at 0.5 ms).
SWITCH_INTERVAL_S = 0.05
_switching = {"blocks": 0, "before": 0.0}
_switching_lock = threading.Lock()


class WarpDivergenceError(RuntimeError):
    """A warp-level intrinsic waited for a lane that has exited or cannot take part."""


class Rendezvous:
    """One warp's meeting point: lanes in a mask deposit a value and read the others'."""

    def __init__(self, manager: object, warp: int) -> None:
        self.manager = manager
        self.warp = warp
        self.cond = threading.Condition()
        self.slots: dict[int, dict[int, object]] = {}  # generation -> lane -> value
        self.arrived: dict[int, int] = {}  # generation -> number of lanes arrived
        self.left: dict[int, int] = {}  # generation -> number of lanes that read
        self.lane_gen: dict[tuple[int, int], int] = {}  # (mask, lane) -> calls made

    def exchange(self, mask: int, lane: int, value: object) -> dict[int, object]:
        """Deposit ``value`` for ``lane`` and wait for every lane of ``mask`` in the block;
        return their values by lane."""
        participants = _participants(self.manager, self.warp, mask, lane)
        with self.cond:
            n_calls = self.lane_gen.get((mask, lane), 0)
            self.lane_gen[(mask, lane)] = n_calls + 1
            key = (mask, n_calls)
            slots = self.slots.setdefault(key, {})
            slots[lane] = value
            self.arrived[key] = self.arrived.get(key, 0) + 1
            self.cond.notify_all()
            while self.arrived[key] < len(participants):
                self.cond.wait(_POLL_S)
                if self.arrived[key] < len(participants):
                    _check_waiting(self.manager, self.warp, participants, slots)
            values = dict(slots)
            self.left[key] = self.left.get(key, 0) + 1
            if self.left[key] == len(participants):
                del self.slots[key], self.arrived[key], self.left[key]
            return values


def _exited(manager: object, thread_id: int) -> bool:
    """True if the simulated thread ``thread_id`` of this block has started and finished."""
    thread = manager.__dict__.get("_gpudl_threads", {}).get(thread_id)
    return thread is not None and thread._started.is_set() and not thread.is_alive()


def _lanes_in_block(manager: object, warp: int) -> set[int]:
    bx, by, bz = manager._block_dim  # type: ignore[attr-defined]
    n_threads = bx * by * bz
    first = warp * WARP_SIZE
    return {lane for lane in range(WARP_SIZE) if first + lane < n_threads}


def _participants(manager: object, warp: int, mask: int, lane: int) -> set[int]:
    if not 0 <= mask <= _FULL_MASK:
        raise ValueError(f"warp mask must be a 32-bit unsigned value, got {mask!r}")
    if not (mask >> lane) & 1:
        raise WarpDivergenceError(
            f"lane {lane} of warp {warp} called a warp intrinsic with mask {mask:#010x}, "
            "which does not include that lane"
        )
    return {ln for ln in _lanes_in_block(manager, warp) if (mask >> ln) & 1}


def _check_waiting(manager: object, warp: int, participants: set[int], slots: dict) -> None:
    me = threading.current_thread()
    if getattr(me, "abort", False):
        raise RuntimeError("another thread of the block failed; aborting warp intrinsic")
    missing = [
        ln for ln in participants
        if ln not in slots and _exited(manager, warp * WARP_SIZE + ln)
    ]
    if missing:
        raise WarpDivergenceError(
            f"warp {warp}: lanes {sorted(missing)} are in the mask but have already exited; "
            "on a GPU this is undefined behaviour. Let every lane in the mask reach the "
            "intrinsic (e.g. guard the work, not the return)."
        )


_rendezvous_lock = threading.Lock()


def rendezvous() -> tuple[Rendezvous, int]:
    """The calling simulated thread's warp :class:`Rendezvous`, and its lane."""
    me = threading.current_thread()
    manager = getattr(me, "_manager", None)
    if manager is None:
        raise RuntimeError("warp intrinsics can only be called inside a simulated kernel")
    warp, lane = divmod(me.thread_id, WARP_SIZE)
    with _rendezvous_lock:
        table = manager.__dict__.setdefault("_gpudl_warps", {})
        if warp not in table:
            table[warp] = Rendezvous(manager, warp)
    return table[warp], lane


def _shuffle(mask: int, value: object, src_of_lane) -> object:
    rdv, lane = rendezvous()
    values = rdv.exchange(mask, lane, value)
    src = src_of_lane(lane)
    if src is None:
        return value
    if src not in values:
        raise WarpDivergenceError(
            f"lane {lane} of warp {rdv.warp} reads lane {src}, which is not in the mask "
            f"{mask:#010x} or not in the block; the result would be undefined on a GPU"
        )
    return values[src]


def _sim_shfl_sync(self, mask, value, src_lane):
    return _shuffle(mask, value, lambda lane: int(src_lane) % WARP_SIZE)


def _sim_shfl_up_sync(self, mask, value, delta):
    return _shuffle(mask, value, lambda lane: lane - delta if lane - delta >= 0 else None)


def _sim_shfl_down_sync(self, mask, value, delta):
    return _shuffle(
        mask, value, lambda lane: lane + delta if lane + delta < WARP_SIZE else None
    )


def _sim_shfl_xor_sync(self, mask, value, lane_mask):
    return _shuffle(
        mask, value, lambda lane: lane ^ lane_mask if (lane ^ lane_mask) < WARP_SIZE else None
    )


def _sim_syncwarp(self, mask=_FULL_MASK):
    rdv, lane = rendezvous()
    rdv.exchange(mask, lane, None)


def _sim_vote(mask, predicate) -> dict[int, bool]:
    rdv, lane = rendezvous()
    return {ln: bool(v) for ln, v in rdv.exchange(mask, lane, predicate).items()}


def _sim_all_sync(self, mask, predicate):
    return int(all(_sim_vote(mask, predicate).values()))


def _sim_any_sync(self, mask, predicate):
    return int(any(_sim_vote(mask, predicate).values()))


def _sim_ballot_sync(self, mask, predicate):
    votes = _sim_vote(mask, predicate)
    return sum(1 << ln for ln, v in votes.items() if v)


SIMULATED_INTRINSICS = {
    "shfl_sync": _sim_shfl_sync,
    "shfl_up_sync": _sim_shfl_up_sync,
    "shfl_down_sync": _sim_shfl_down_sync,
    "shfl_xor_sync": _sim_shfl_xor_sync,
    "syncwarp": _sim_syncwarp,
    "all_sync": _sim_all_sync,
    "any_sync": _sim_any_sync,
    "ballot_sync": _sim_ballot_sync,
}


_shared_alloc_lock = threading.Lock()


def _sim_shared_array(self, shape, dtype, alignment=None):
    """The simulator's ``cuda.shared.array`` made thread-safe.

    The simulator keeps one array per source line for the block, but looks it up and creates
    it without a lock: when threads are switched between the lookup and the store, some of
    them get a private copy of the "shared" array and the kernel computes garbage (seen as a
    rare, load-dependent failure of a tiled matmul). Same behaviour, under a lock.
    """
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    if alignment is not None:
        raise RuntimeError("Array alignment is not supported in cudasim")
    if isinstance(dtype, types.Type):
        dtype = numpy_support.as_dtype(dtype)
    if shape == 0:  # dynamic shared memory: one buffer, viewed with the dtype asked for
        count = self._dynshared_size // np.dtype(dtype).itemsize
        return np.frombuffer(self._dynshared.data, dtype=dtype, count=count)
    caller = sys._getframe(1)
    key = (caller.f_code.co_filename, caller.f_lineno)
    with _shared_alloc_lock:
        array = self._allocations.get(key)
        if array is None:
            array = self._allocations[key] = np.empty(shape, dtype)
    return array


class BlockBarrier:
    """``syncthreads`` for one simulated block, with the same rule as the simulator's own
    manager (every thread of the block that has not finished is waiting: all go on) but
    without polling: each thread that waits, or finishes, checks the rule under one lock, and
    the block's launch sleeps until every thread has finished or one has failed."""

    def __init__(self, n_threads: int) -> None:
        self.lock = threading.Lock()
        self.released = threading.Condition(self.lock)  # the waiting threads
        self.settled = threading.Condition(self.lock)  # the launch
        self.alive, self.waiting, self.generation = n_threads, 0, 0
        self.failed: object = None  # the first thread that raised

    def _release_if_all_wait(self) -> None:  # with the lock held
        if self.waiting and self.waiting == self.alive:
            self.waiting, self.generation = 0, self.generation + 1
            self.released.notify_all()

    def wait(self, thread: object) -> None:
        """The calling thread's ``syncthreads``: wait until every live thread of the block
        has reached it (``RuntimeError`` once another thread has failed, as the simulator)."""
        if thread.abort:  # type: ignore[attr-defined]
            raise RuntimeError("abort flag set on syncthreads call")
        with self.lock:
            generation = self.generation
            self.waiting += 1
            self._release_if_all_wait()
            while self.generation == generation and not thread.abort:  # type: ignore[attr-defined]
                self.released.wait()
        if thread.abort:  # type: ignore[attr-defined]
            raise RuntimeError("abort flag set on syncthreads clear")

    def finished(self, thread: object) -> None:
        """``thread`` has returned or raised (its ``exception`` set, as the simulator does)."""
        with self.lock:
            self.alive -= 1
            if thread.exception and self.failed is None:  # type: ignore[attr-defined]
                self.failed = thread
            self._release_if_all_wait()
            if self.failed is not None or not self.alive:
                self.settled.notify_all()

    def run(self, threads: list) -> None:
        """Start ``threads`` and wait until all have finished, or one has failed: then abort
        the others and raise its exception. The interpreter switches threads every
        :data:`SWITCH_INTERVAL_S` meanwhile (restored when the last running block ends)."""
        with _switching_lock:
            if not _switching["blocks"]:
                _switching["before"] = sys.getswitchinterval()
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            _switching["blocks"] += 1
        try:
            self._run(threads)
        finally:
            with _switching_lock:
                _switching["blocks"] -= 1
                if not _switching["blocks"]:
                    sys.setswitchinterval(_switching["before"])

    def _run(self, threads: list) -> None:
        for thread in threads:
            thread.start()
        with self.lock:
            while self.alive and self.failed is None:
                self.settled.wait()
            failed = self.failed
            if failed is not None:
                for thread in threads:
                    thread.abort = True
                self.released.notify_all()
        if failed is not None:
            raise failed.exception[0].with_traceback(failed.exception[1])
        for thread in threads:
            thread.join()


def _install_block_barrier(kernel: object) -> None:
    original_run = kernel.BlockThread.run

    def run(self) -> None:
        try:
            original_run(self)  # records the exception, as the simulator does
        finally:
            self._manager._gpudl_barrier.finished(self)

    def syncthreads(self) -> None:
        self._manager._gpudl_barrier.wait(self)

    def run_block(self, grid_point, *args) -> None:
        n_threads = int(np.prod(self._block_dim))
        self._gpudl_barrier = BlockBarrier(n_threads)

        def target():
            self._f(*args)

        self._gpudl_barrier.run([
            kernel.BlockThread(target, self, grid_point, block_point, self._debug)
            for block_point in np.ndindex(*self._block_dim)])

    kernel.BlockThread.run = run
    kernel.BlockThread.syncthreads = syncthreads
    kernel.BlockManager.run = run_block


def install() -> None:
    """Install the intrinsics, the thread-safe shared arrays and the launch guard into the
    simulator (once, from :mod:`gpudl`, before any kernel is defined)."""
    from numba.cuda.simulator import kernel, kernelapi

    for attr, fn in SIMULATED_INTRINSICS.items():
        setattr(kernelapi.FakeCUDAModule, attr, fn)
    kernelapi.FakeCUDAShared.array = _sim_shared_array
    _install_block_barrier(kernel)

    # Each simulated thread registers with its block, so that a rendezvous can tell a lane
    # that has not started yet from one that has already returned.
    original_init = kernel.BlockThread.__init__

    def registering_init(self, f, manager, blockIdx, threadIdx, debug):
        original_init(self, f, manager, blockIdx, threadIdx, debug)
        manager.__dict__.setdefault("_gpudl_threads", {})[self.thread_id] = self

    kernel.BlockThread.__init__ = registering_init

    # Refuse, before it runs, a launch that passes one memory twice where the kernel writes
    # it: the simulator copies each NumPy argument in and out, a GPU would not (gpudl.aliasing).
    from gpudl.aliasing import check_launch

    original_call = kernel.FakeCUDAKernel.__call__

    def guarded_call(self, *args):
        if not self._device and kernel._get_kernel_context() is None:
            check_launch(self.fn, args)
        return original_call(self, *args)

    kernel.FakeCUDAKernel.__call__ = guarded_call
