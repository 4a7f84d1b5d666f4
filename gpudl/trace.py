"""Record every memory access of a kernel on the simulator and count what each warp asks for.

Book section: Chapter 2, "Seeing memory transactions without a GPU".

Numba's CUDA simulator runs each CUDA thread as a Python thread and hands array arguments
that are not NumPy arrays straight to the kernel. :func:`trace` passes each array argument
inside a recorder that behaves like the array and logs every element access: global or
shared, load or store, the byte address, the block, the thread and the kernel's source line.
Shared arrays are wrapped as the kernel creates them (the simulator's shared-array factory is
replaced for the duration of the launch, and restored even if the kernel raises).

A GPU executes memory instructions per warp: the 32 lanes' addresses of one instruction form
one *request*. Here a request is the accesses of one warp made by one source line to one
array, the n-th time each lane makes that access. For a global request the figure that matters
is the number of 32-byte sectors it touches (ideal: the distinct bytes / 32, rounded up);
for a shared request, the bank-conflict degree: shared memory has 32 banks of 4-byte words
(bank = word % 32), a bank serves one word per cycle, lanes reading the same word share it
(broadcast), so a request takes as many cycles as the most distinct words asked of one bank.

The memory model is the textbook one (NVIDIA's CUDA C++ Programming Guide, compute
capability 5.0 and later). Array argument k starts at byte (k + 1) * 2**32, so 256-byte
aligned as ``cudaMalloc`` guarantees; static shared arrays are laid out from address 0, each
on a 128-byte boundary, and dynamic shared memory starts at 2**32. Caches are not modelled,
nor the phases in which hardware splits wide (8- and 16-byte) shared accesses.
"""

from __future__ import annotations

import functools
import inspect
import linecache
import math
import multiprocessing as mp
import os
import re
import sys
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from gpudl import backend

# isort: split
import numpy as np

from gpudl.checks import check_callable, check_choice, check_int, is_device_array
from gpudl.launches import MAX_DYNAMIC_SHARED_BYTES

__all__ = [
    "Access", "Request", "RequestStats", "Trace", "trace", "SECTOR_BYTES", "BANKS", "BANK_BYTES",
    "KINDS", "OPS", "on_simulator",
]

SECTOR_BYTES = 32
BANKS = 32
BANK_BYTES = 4
_SHARED_ALIGN = 128
_DYNAMIC_SHARED_BASE = 1 << 32
KINDS = ("global", "shared")
OPS = ("load", "store")


@dataclass(frozen=True, order=True)
class Access:
    """One element access by one simulated thread."""

    line: int  # source line of the kernel (or device function) that made it
    kind: str  # "global" or "shared"
    array: str  # kernel parameter name, or the shared array's variable name
    op: str  # "load" or "store"
    block: tuple[int, int, int]  # blockIdx (x, y, z)
    thread: int  # the thread's linear index in its block (x fastest)
    occurrence: int  # how many times before this thread made this (line, array, op) access
    address: int  # byte address
    size: int  # bytes accessed


@dataclass(frozen=True)
class Request:
    """What one warp asks of one array with one instruction: its lanes' accesses."""

    line: int
    kind: str
    array: str
    op: str
    block: tuple[int, int, int]
    warp: int
    occurrence: int
    lanes: tuple[int, ...]
    addresses: tuple[int, ...]
    size: int

    @property
    def sectors(self) -> int:
        """Distinct 32-byte sectors touched."""
        return len({b // SECTOR_BYTES for a in self.addresses for b in (a, a + self.size - 1)})

    @property
    def ideal_sectors(self) -> int:
        """Sectors needed if the distinct bytes asked for were packed and aligned."""
        return math.ceil(len(set(self.addresses)) * self.size / SECTOR_BYTES)

    @property
    def conflict_degree(self) -> int:
        """The most distinct 4-byte words any one bank is asked for; 1 means conflict-free."""
        words = {
            w
            for a in self.addresses
            for w in range(a // BANK_BYTES, (a + self.size - 1) // BANK_BYTES + 1)
        }
        per_bank = defaultdict(int)
        for w in words:
            per_bank[w % BANKS] += 1
        return max(per_bank.values())


@dataclass(frozen=True)
class RequestStats:
    """A figure (sectors, or bank-conflict degree) over a set of requests."""

    requests: int
    mean: float
    max: int
    ideal: float  # mean of the ideal value of the same figure


@dataclass(frozen=True)
class Trace:
    """Every access of a traced launch, in a deterministic order, and figures per request."""

    kernel: str
    parameters: tuple[str, ...]
    accesses: tuple[Access, ...]

    @cached_property
    def _requests(self) -> tuple[Request, ...]:
        groups: dict[tuple, list[Access]] = defaultdict(list)
        for a in self.accesses:
            warp = a.thread // backend.WARP_SIZE
            key = (a.line, a.kind, a.array, a.op, a.block, warp, a.occurrence)
            groups[key].append(a)
        return tuple(
            Request(
                *key,
                lanes=tuple(a.thread % backend.WARP_SIZE for a in group),
                addresses=tuple(a.address for a in group),
                size=group[0].size,
            )
            for key, group in sorted(groups.items())
        )

    def requests(
        self,
        kind: str | None = None,
        op: str | None = None,
        array: str | int | None = None,
        line: int | None = None,
    ) -> list[Request]:
        """The requests, optionally only those of a kind ("global", "shared"), an op ("load",
        "store"), an array (name, or a kernel argument's position) and a source line."""
        check_choice("kind", kind, (None, *KINDS))
        check_choice("op", op, (None, *OPS))
        if line is not None:
            check_int("line", line, 1)
        name = self._array_name(array)
        return [
            r
            for r in self._requests
            if (kind is None or r.kind == kind)
            and (op is None or r.op == op)
            and (name is None or r.array == name)
            and (line is None or r.line == line)
        ]

    def sectors_per_request(
        self, array: str | int | None = None, op: str = "load", line: int | None = None
    ) -> RequestStats:
        """Sectors per global request (loads unless ``op="store"``), over matching requests."""
        check_choice("op", op, OPS)
        found = self._matching("global", op, array, line)
        return _stats([r.sectors for r in found], [r.ideal_sectors for r in found])

    def bank_conflict_degree(
        self, array: str | int | None = None, op: str | None = None, line: int | None = None
    ) -> RequestStats:
        """Bank-conflict degree of shared requests (1 is conflict-free), over matching ones."""
        found = self._matching("shared", op, array, line)
        return _stats([r.conflict_degree for r in found], [1] * len(found))

    def summary(self) -> str:
        """One line per source line, op, kind and array: in source order, loads first."""
        keys = {(r.line, OPS.index(r.op), KINDS.index(r.kind), r.array) for r in self._requests}
        lines = []
        for line, op_index, kind_index, array in sorted(keys):
            kind, op = KINDS[kind_index], OPS[op_index]
            head = f"line {line} {kind} {op} {array}: "
            if kind == "global":
                s = self.sectors_per_request(array, op, line)
                tail = f"{s.mean:.1f} sectors/request (ideal {s.ideal:.1f})"
            else:
                s = self.bank_conflict_degree(array, op, line)
                tail = f"{s.mean:.1f}-way bank conflicts (max {s.max})"
            lines.append(f"{head}{s.requests} requests, {tail}")
        return "\n".join(lines)

    def _array_name(self, array: str | int | None) -> str | None:
        if isinstance(array, int) and not isinstance(array, bool):
            if not 0 <= array < len(self.parameters):
                raise ValueError(
                    f"array position must be in [0, {len(self.parameters)}), got {array}"
                )
            return self.parameters[array]
        if array is None or isinstance(array, str):
            return array
        raise TypeError(f"array must be a name, a position or None, got {type(array).__name__}")

    def _matching(self, kind: str, op: str | None, array, line) -> list[Request]:
        found = self.requests(kind, op, array, line)
        if not found:
            raise ValueError(
                f"no {kind} {op or 'load/store'} requests for array={array!r}, line={line!r}"
            )
        return found


def _stats(values: list[int], ideals: list[int]) -> RequestStats:
    return RequestStats(len(values), float(np.mean(values)), max(values), float(np.mean(ideals)))


# ------------------------------------------------------------------------------------------
# Recording
# ------------------------------------------------------------------------------------------


class _Recorder:
    """Stands in for an array inside a simulated kernel and logs each element access."""

    def __init__(self, ary: np.ndarray, kind: str, name: str, offsets: np.ndarray, log: list):
        self._ary, self._kind, self._name, self._log = ary, kind, name, log
        self._offsets = offsets  # byte address of each element, same shape as ary

    shape = property(lambda self: self._ary.shape)
    size = property(lambda self: self._ary.size)
    ndim = property(lambda self: self._ary.ndim)
    dtype = property(lambda self: self._ary.dtype)
    strides = property(lambda self: self._ary.strides)

    def __len__(self) -> int:
        return len(self._ary)

    def __getitem__(self, index):
        value = self._ary[index]
        if isinstance(value, np.ndarray):  # a sub-array (a row, a slice): a view, no access
            return _Recorder(value, self._kind, self._name, self._offsets[index], self._log)
        self._record("load", index)
        return value

    def __setitem__(self, index, value) -> None:
        self._ary[index] = value
        self._record("store", index)

    def _record(self, op: str, index) -> None:
        frame = sys._getframe(2)
        while frame.f_code.co_filename.startswith(_simulator_dir()):  # e.g. cuda.atomic.add
            frame = frame.f_back
        thread = threading.current_thread()
        counts = thread.__dict__.setdefault("_gpudl_trace_counts", defaultdict(int))
        key = (frame.f_lineno, self._kind, self._name, op)
        occurrence = counts[key]
        counts[key] += 1
        block = tuple(thread.blockIdx)
        for address in np.ravel(self._offsets[index]).tolist():
            self._log.append(
                Access(*key, block, thread.thread_id, occurrence, address, self._ary.itemsize)
            )


def _byte_offsets(ary: np.ndarray, base: int) -> np.ndarray:
    index = np.indices(ary.shape, dtype=np.int64)
    return base + sum(index[k] * ary.strides[k] for k in range(ary.ndim))


@functools.cache
def _simulator_dir() -> str:
    from numba.cuda import simulator

    return os.path.dirname(simulator.__file__)


def _shared_name(filename: str, lineno: int) -> str:
    match = re.match(r"\s*(\w+)\s*=", linecache.getline(filename, lineno))
    return match.group(1) if match else f"shared@{lineno}"


def _traced_shared_factory(log: list) -> Callable:
    """A replacement for the simulator's ``cuda.shared.array`` that returns recorders."""
    from numba.cuda import types
    from numba.cuda.np import numpy_support

    lock = threading.Lock()
    made: dict[tuple, _Recorder] = {}
    next_base = 0

    def array(fake_shared, shape, dtype, alignment=None):
        nonlocal next_base
        if alignment is not None:
            raise RuntimeError("Array alignment is not supported in cudasim")
        dtype = np.dtype(numpy_support.as_dtype(dtype) if isinstance(dtype, types.Type) else dtype)
        # Like the simulator: one static allocation per source line of the call; dynamic
        # shared memory (shape 0) is one buffer, viewed with the dtype asked for.
        caller = sys._getframe(1)
        key = ("dynamic", dtype) if shape == 0 else (caller.f_code.co_filename, caller.f_lineno)
        with lock:
            if key not in made:
                if shape == 0:
                    count = fake_shared._dynshared_size // dtype.itemsize
                    ary = np.frombuffer(fake_shared._dynshared.data, dtype=dtype, count=count)
                    name, base = "dynamic", _DYNAMIC_SHARED_BASE
                else:
                    ary = np.empty(shape, dtype)
                    name, base = _shared_name(*key), next_base
                    next_base += -(-ary.nbytes // _SHARED_ALIGN) * _SHARED_ALIGN
                made[key] = _Recorder(ary, "shared", name, _byte_offsets(ary, base), log)
            return made[key]

    return array


def trace(
    kernel: Any, griddim: Any, blockdim: Any, *args: Any, dynamic_shared_bytes: int = 0
) -> Trace:
    """Launch ``kernel[griddim, blockdim, 0, dynamic_shared_bytes](*args)`` on the simulator,
    recording every access.

    Array arguments (NumPy arrays, or simulator device arrays) are accessed in place: what
    the kernel writes lands in them, as in an untraced launch. Other arguments pass as they
    are. Tracing needs the simulator (a GPU runs kernels as machine code: nothing to wrap).
    """
    check_int("dynamic_shared_bytes", dynamic_shared_bytes, 0, MAX_DYNAMIC_SHARED_BYTES)
    if not backend.is_simulator():
        raise RuntimeError(
            "tracing needs Numba's CUDA simulator (GPUDL_BACKEND=simulator); on a GPU, "
            "use a profiler such as Nsight Compute to count sectors and bank conflicts"
        )
    from numba.cuda.simulator import kernelapi
    from numba.cuda.simulator.kernel import FakeCUDAKernel

    if not isinstance(kernel, FakeCUDAKernel):
        raise TypeError(f"kernel must be a @cuda.jit kernel, got {type(kernel).__name__}")
    parameters = tuple(inspect.signature(kernel.py_func).parameters)
    if len(args) != len(parameters):
        raise TypeError(
            f"{kernel.py_func.__name__} takes {len(parameters)} arguments, got {len(args)}"
        )
    log: list[Access] = []
    wrapped = []
    for position, (name, arg) in enumerate(zip(parameters, args, strict=True)):
        ary = arg._ary if is_device_array(arg) else arg
        if isinstance(ary, np.ndarray) and ary.ndim > 0:
            offsets = _byte_offsets(ary, (position + 1) << 32)  # 4 GiB apart, 256-aligned
            wrapped.append(_Recorder(ary, "global", name, offsets, log))
        else:
            wrapped.append(arg)
    original = kernelapi.FakeCUDAShared.array
    kernelapi.FakeCUDAShared.array = _traced_shared_factory(log)
    try:
        kernel[griddim, blockdim, 0, dynamic_shared_bytes](*wrapped)
    finally:
        kernelapi.FakeCUDAShared.array = original
    return Trace(kernel.py_func.__name__, parameters, tuple(sorted(log)))


def on_simulator(fn: Callable, *args: Any) -> Any:
    """``fn(*args)`` where Numba's CUDA simulator runs: in this process on the simulator, and
    in a child process started with ``GPUDL_BACKEND=simulator`` when this one uses a GPU, so
    that a lab shows the same traces on both backends. ``fn`` must be importable by name."""
    check_callable("fn", fn)
    if backend.is_simulator():
        return fn(*args)
    saved = os.environ.get("GPUDL_BACKEND")
    os.environ["GPUDL_BACKEND"] = "simulator"  # the child decides its backend at import
    try:
        with mp.get_context("spawn").Pool(1) as pool:
            return pool.apply(fn, args)
    finally:
        if saved is None:
            del os.environ["GPUDL_BACKEND"]
        else:
            os.environ["GPUDL_BACKEND"] = saved
