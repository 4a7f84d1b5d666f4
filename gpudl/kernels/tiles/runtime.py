"""Triton for the book's tile kernels: the package where it is installed, stand-ins where it is
not, and the one launch every Triton launcher makes.

Book section: appendix D, "Two backends, one code path" (Triton's interpreter on the simulator,
its compiler on a GPU).

Triton is an optional dependency (``pip install triton``, Linux x86_64 only; a CUDA build of
torch brings it). Where it is missing, ``triton`` and ``tl`` are stand-ins under which
the kernel modules still import (``@triton.jit`` leaves the function as it is), the Triton
variants are absent from their families (:data:`gpudl.registry.ABSENT`) and :func:`launch`
raises ``ModuleNotFoundError`` naming the package.

:func:`launch` starts a kernel on numba device arrays, the arrays every launcher of the book
receives: each becomes a torch tensor of the same memory (:func:`gpudl.interop.as_tensor`), a
CUDA tensor on a GPU (Triton launches on torch's current stream, the default stream that
numba's launches and timing events also use) and a CPU tensor on the simulator, where
:mod:`gpudl.backend` has switched Triton's interpreter on. A kernel therefore writes the array
it is given, on both backends, as a Numba kernel does.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gpudl import backend, registry
from gpudl.checks import check_ints, is_device_array
from gpudl.interop import as_tensor
from gpudl.launches import check_launch

# isort: split
import numpy as np
import torch

__all__ = ["AVAILABLE", "triton", "tl", "require", "launch"]

#: Whether Triton is installed here.
AVAILABLE = registry.installed("triton")

if AVAILABLE:
    import triton
    import triton.language as tl
else:  # stand-ins: the kernels' modules import, nothing launches
    triton = SimpleNamespace(jit=lambda fn: fn, cdiv=lambda a, b: -(-a // b))
    tl = SimpleNamespace(constexpr=object)


def require() -> None:
    """``ModuleNotFoundError`` naming the package, unless Triton is installed."""
    if not AVAILABLE:
        raise ModuleNotFoundError("the Triton kernels need the package 'triton', which is not "
                                  "installed here (pip install triton==3.9.0, on Linux x86_64)",
                                  name="triton")


def launch(kernel: Any, grid: tuple[int, ...], *args: Any, **meta: Any) -> None:
    """``kernel[grid](*args, **meta)`` with every numba device array among ``args`` passed as a
    torch tensor of its memory and every NumPy scalar as a Python number; ``meta`` holds the
    kernel's constexpr values and ``num_warps`` (and ``num_stages``). The grid is held to
    CUDA's limits first (:func:`gpudl.launches.check_launch`, with ``num_warps`` warps per
    program)."""
    require()
    grid = check_ints("grid", grid, 1)
    name = getattr(getattr(kernel, "fn", kernel), "__name__", repr(kernel))
    check_launch(f"{name} (Triton)", grid, backend.WARP_SIZE * meta.get("num_warps", 4))
    kernel[grid](*(_argument(a, f"{name}'s argument {i}") for i, a in enumerate(args)), **meta)


def _argument(a: Any, name: str) -> Any:
    """A launch argument as Triton takes it: a device array as a tensor of its memory; on the
    simulator a NumPy array as a CPU tensor of its memory too (the simulator's kernels take
    NumPy arrays as well; the interpreter then writes the array itself, where Numba's
    simulator writes a copy back); a NumPy scalar as a Python number."""
    if is_device_array(a):
        return as_tensor(a, name)
    if isinstance(a, np.ndarray) and backend.is_simulator():
        return torch.from_numpy(a)
    return a.item() if isinstance(a, np.generic) else a
