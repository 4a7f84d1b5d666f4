"""Every kernel launch held to CUDA's limits, on both backends.

Book section: *Chapter 1, "Threads, blocks, grids and warps"* (the grid's limits).

:func:`check_launch` holds a launch configuration to CUDA's limits (a grid of at most
2**31 - 1 blocks in x and 65,535 in y and z, at most 1,024 threads per block, at most 48 KiB
of dynamic shared memory) and refuses one beyond them with a message naming the kernel and the
limit. :func:`guard_launches`, called once by :mod:`gpudl`, makes every launch,
``kernel[griddim, blockdim, stream, shared_bytes]``, go through it on both backends: a
configuration the driver would refuse is refused before it reaches the driver, and the
simulator, which would run it, refuses it too.
"""

from __future__ import annotations

import functools
import math
from numbers import Integral

import numpy as np

from gpudl import backend
from gpudl.checks import check_int

__all__ = [
    "MAX_BLOCK_DIMS",
    "MAX_DYNAMIC_SHARED_BYTES",
    "MAX_GRID_DIMS",
    "MAX_THREADS_PER_BLOCK",
    "check_launch",
    "guard_launches",
]

#: The most blocks a grid has along x, y and z (every GPU since compute capability 3.0).
MAX_GRID_DIMS = (2**31 - 1, 65_535, 65_535)
#: The most threads a block has along x, y and z (and in all, :data:`MAX_THREADS_PER_BLOCK`).
MAX_BLOCK_DIMS = (1024, 1024, 64)
#: The most threads a block has in all.
MAX_THREADS_PER_BLOCK = 1024
#: The dynamic shared memory a launch gets without opting in to more. A GPU's opt-in limit is
#: larger (227 KiB on an H100), but numba-cuda 0.30 never opts a kernel in, so 48 KiB is the
#: limit its launches are held to.
MAX_DYNAMIC_SHARED_BYTES = 48 * 1024


def _dims(kernel: str, what: str, dims: object) -> tuple[int, int, int]:
    values = list(dims) if isinstance(dims, tuple | list) else [dims]
    if not 1 <= len(values) <= 3 or not all(
            isinstance(v, Integral) and not isinstance(v, bool | np.bool_) for v in values):
        raise TypeError(f"{kernel}: {what} must be an int or a tuple of 1 to 3 ints, "
                        f"got {dims!r}")
    return tuple(int(v) for v in values + [1] * (3 - len(values)))


@functools.lru_cache(maxsize=4096)
def _check_cached(kernel: str, grid: tuple[int, int, int], block: tuple[int, int, int],
                  shared_bytes: int) -> None:
    for axis, n, limit in zip("xyz", grid, MAX_GRID_DIMS, strict=True):
        if not 1 <= n <= limit:
            raise ValueError(f"{kernel}: griddim {grid} has {n:,} blocks along {axis}, outside "
                             f"CUDA's limit of 1 to {limit:,}")
    for axis, n, limit in zip("xyz", block, MAX_BLOCK_DIMS, strict=True):
        if not 1 <= n <= limit:
            raise ValueError(f"{kernel}: blockdim {block} has {n:,} threads along {axis}, "
                             f"outside CUDA's limit of 1 to {limit:,}")
    if math.prod(block) > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"{kernel}: blockdim {block} has {math.prod(block):,} threads, more "
                         f"than CUDA's limit of {MAX_THREADS_PER_BLOCK:,} threads per block")
    if not 0 <= shared_bytes <= MAX_DYNAMIC_SHARED_BYTES:
        raise ValueError(f"{kernel}: shared_bytes of {shared_bytes:,} is outside the limit of "
                         f"0 to {MAX_DYNAMIC_SHARED_BYTES:,} bytes of dynamic shared memory a "
                         "launch gets without opting in")


def check_launch(kernel: str, griddim: object, blockdim: object,
                 shared_bytes: object = 0) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """The launch ``kernel[griddim, blockdim, stream, shared_bytes]`` as two ``(x, y, z)``
    tuples, if CUDA can run it: every grid and block dimension at least 1, the grid within
    :data:`MAX_GRID_DIMS`, the block within :data:`MAX_BLOCK_DIMS` and
    :data:`MAX_THREADS_PER_BLOCK`, and ``shared_bytes`` within
    :data:`MAX_DYNAMIC_SHARED_BYTES`. Otherwise ``TypeError`` (not ints) or ``ValueError``
    naming ``kernel`` and the limit."""
    grid, block = _dims(kernel, "griddim", griddim), _dims(kernel, "blockdim", blockdim)
    shared = check_int(f"{kernel}: shared_bytes", shared_bytes)
    _check_cached(kernel, grid, block, shared)
    return grid, block


def _kernel_name(kernel: object) -> str:
    fn = getattr(kernel, "py_func", None) or getattr(kernel, "fn", None) or kernel
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def guard_launches() -> None:
    """Route every launch configuration, ``kernel[griddim, blockdim(, stream(, shared))]``, of
    the backend's kernel class through :func:`check_launch` first (once, from :mod:`gpudl`)."""
    if backend.is_simulator():
        from numba.cuda.simulator.kernel import FakeCUDAKernel as Kernel
    else:
        from numba.cuda.dispatcher import CUDADispatcher as Kernel
    if getattr(Kernel.__getitem__, "checks_launch_limits", False):
        return
    configure = Kernel.__getitem__
    accepted: set = set()  # configurations within the limits: one set lookup per launch

    def checked_getitem(self, configuration):
        try:
            known = configuration in accepted
        except TypeError:  # a list in it: not cached, checked every time
            known = False
        if not known and isinstance(configuration, tuple) and 2 <= len(configuration) <= 4:
            shared = configuration[3] if len(configuration) == 4 else 0
            check_launch(_kernel_name(self), configuration[0], configuration[1], shared)
            try:
                if len(accepted) >= 4096:
                    accepted.clear()
                accepted.add(configuration)
            except TypeError:
                pass
        return configure(self, configuration)

    checked_getitem.checks_launch_limits = True
    Kernel.__getitem__ = checked_getitem
