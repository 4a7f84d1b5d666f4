"""How the optimizer kernels are launched, and the launches and bytes they cost, counted.

Book section: *Chapter 4, "What each variant moves, counted"*.

Every kernel of :mod:`gpudl.kernels.optim` is launched through :func:`launch`, ``THREADS``
threads per block. Inside :func:`traffic` each launch runs under :func:`gpudl.trace.trace` on
the simulator and its bytes are counted; inside :func:`recorded_launches` each launch is
recorded (and run, or not).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from gpudl import backend
from gpudl.checks import check_bool, check_choice

__all__ = ["THREADS", "Traffic", "launch", "recorded_launches", "traffic"]

#: Threads per block; one warp on the simulator, which runs each thread as a Python thread.
THREADS = backend.pick(gpu=256, sim=32)


@dataclass
class Traffic:
    """Kernel launches and bytes accessed, by memory and direction, over some steps."""

    launches: int = 0
    kernels: list[str] = field(default_factory=list)
    bytes: dict[tuple[str, str], int] = field(default_factory=dict)  # (kind, op) -> bytes

    def total(self, kind: str = "global") -> int:
        """Bytes loaded plus stored in ``kind`` memory ("global": device memory, "shared")."""
        check_choice("kind", kind, ("global", "shared"))
        return sum(n for (k, _), n in self.bytes.items() if k == kind)

    def record(self, kernel: Any, blocks: int, args: tuple) -> None:
        from gpudl.trace import trace

        t = trace(kernel, blocks, THREADS, *args)
        self.launches += 1
        self.kernels.append(kernel.py_func.__name__)
        for a in t.accesses:
            self.bytes[(a.kind, a.op)] = self.bytes.get((a.kind, a.op), 0) + a.size


_traffic: Traffic | None = None
_recorded: tuple[list, bool] | None = None  # (the kernels launched, run them?)


def launch(kernel: Any, blocks: int, *args: Any) -> None:
    """Launch ``kernel[blocks, THREADS](*args)``, or count it (see the module)."""
    if _recorded is not None:
        launched, run = _recorded
        launched.append(kernel)
        if not run:
            return
    if _traffic is not None:
        _traffic.record(kernel, blocks, args)
    else:
        kernel[blocks, THREADS](*args)


@contextmanager
def traffic() -> Iterator[Traffic]:
    """Count every launch of this module's kernels inside the ``with`` block, and the bytes
    each reads and writes, by running them under :func:`gpudl.trace.trace` (simulator only:
    wrap the caller in :func:`gpudl.trace.on_simulator` on a GPU). The counts are facts about
    the kernels, the same on any GPU; caches are not modelled."""
    global _traffic
    if not backend.is_simulator():
        raise RuntimeError("counting traffic needs the simulator; call it through "
                           "gpudl.trace.on_simulator on a GPU")
    if _traffic is not None:
        raise RuntimeError("traffic() is already counting")
    _traffic = Traffic()
    try:
        yield _traffic
    finally:
        _traffic = None


@contextmanager
def recorded_launches(run: bool = True) -> Iterator[list]:
    """Append every kernel launched inside the ``with`` block to the list it yields; launch
    it only if ``run`` (without, the host's work of a step can be timed alone)."""
    global _recorded
    check_bool("run", run)
    if _recorded is not None:
        raise RuntimeError("recorded_launches() is already recording")
    _recorded = ([], run)
    try:
        yield _recorded[0]
    finally:
        _recorded = None
