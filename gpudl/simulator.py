"""What Numba's CUDA simulator lacks, supplied: warp intrinsics, thread-safe shared arrays,
blocks run by reused threads, and the launch guard against one memory passed twice.

Book section: *appendix D, "Two backends, one code path"*.

:mod:`gpudl` calls :func:`install` when :mod:`gpudl.backend` has chosen the simulator (never on
a real GPU). It supplies the warp-level intrinsics the simulator lacks (``shfl_sync``,
``shfl_up_sync``, ``shfl_down_sync``, ``shfl_xor_sync``, ``syncwarp``, ``all_sync``,
``any_sync``, ``ballot_sync``) with real per-warp semantics: the threads of a warp meet at a
:class:`Rendezvous`, exchange values, and a lane that has exited while others wait for it
raises :class:`WarpDivergenceError` instead of hanging. It makes ``cuda.shared.array``
thread-safe (the simulator's own lookup races), runs each block with
:mod:`gpudl.simulated_blocks` (a pool of reused threads and a barrier that sleeps, where the
simulator starts a thread per simulated thread and polls them), and it refuses
a launch that passes one memory as two arguments of a kernel that writes one of them
(:mod:`gpudl.aliasing`): the simulator copies each NumPy argument in and out, where a GPU
sees one memory.
"""

from __future__ import annotations

import sys
import threading

import numpy as np

from gpudl import simulated_blocks
from gpudl.backend import WARP_SIZE

__all__ = ["SIMULATED_INTRINSICS", "Rendezvous", "WarpDivergenceError", "install", "rendezvous"]

_FULL_MASK = 0xFFFFFFFF
_POLL_S = 0.002


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
            if self.arrived[key] < len(participants):
                block = self.manager._gpudl_block  # type: ignore[attr-defined]
                block.blocking()  # the lanes not started yet must get a worker
                try:
                    while self.arrived[key] < len(participants):
                        self.cond.wait(_POLL_S)
                        if self.arrived[key] < len(participants):
                            _check_waiting(self.manager, self.warp, participants, slots)
                finally:
                    block.unblocked()
            values = dict(slots)
            self.left[key] = self.left.get(key, 0) + 1
            if self.left[key] == len(participants):
                del self.slots[key], self.arrived[key], self.left[key]
            return values


def _exited(manager: object, thread_id: int) -> bool:
    """True if the simulated thread ``thread_id`` of this block has started and finished."""
    return manager._gpudl_block.exited(thread_id)  # type: ignore[attr-defined]


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


def install() -> None:
    """Install the intrinsics, the thread-safe shared arrays and the launch guard into the
    simulator (once, from :mod:`gpudl`, before any kernel is defined)."""
    from numba.cuda.simulator import kernel, kernelapi

    for attr, fn in SIMULATED_INTRINSICS.items():
        setattr(kernelapi.FakeCUDAModule, attr, fn)
    kernelapi.FakeCUDAShared.array = _sim_shared_array
    simulated_blocks.install(kernel)

    # Refuse, before it runs, a launch that passes one memory twice where the kernel writes
    # it: the simulator copies each NumPy argument in and out, a GPU would not (gpudl.aliasing).
    from gpudl.aliasing import check_launch

    original_call = kernel.FakeCUDAKernel.__call__

    def guarded_call(self, *args):
        if not self._device and kernel._get_kernel_context() is None:
            check_launch(self.fn, args)
        return original_call(self, *args)

    kernel.FakeCUDAKernel.__call__ = guarded_call
