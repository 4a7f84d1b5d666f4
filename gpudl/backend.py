"""Choose the backend once: a real CUDA GPU, or Numba's CUDA simulator.

Book section: *Preface, "Three ways to use this book"* and *appendix D, "Two backends, one
code path"*.

The choice is made when :mod:`gpudl` is first imported, **before numba is imported anywhere**,
because numba reads ``NUMBA_ENABLE_CUDASIM`` only at its own first import:

* ``GPUDL_BACKEND=cuda`` or ``GPUDL_BACKEND=simulator`` forces a backend;
* ``GPUDL_BACKEND=compile`` selects numba's real CUDA target without asking for a GPU: kernels
  can be compiled (to PTX, :mod:`gpudl.ptx`) but nothing can be launched or allocated, and
  :func:`pick` gives the GPU's settings, so that the code compiled is the code a GPU runs;
* otherwise the CUDA driver is asked (through ``ctypes``, without importing numba) whether it
  sees a GPU; if it does not, the simulator is switched on.

Triton's kernels (:mod:`gpudl.kernels.tiles`) follow the same choice: on the simulator
``TRITON_INTERPRET=1`` is set, so that ``@triton.jit`` kernels run in Triton's interpreter on torch
CPU tensors (Triton reads it when a kernel is decorated); on a GPU and for ``compile`` it is set
to ``0``, so that they compile.

On the simulator, :mod:`gpudl` then installs :mod:`gpudl.simulator`'s missing pieces (warp
intrinsics, thread-safe shared arrays, the launch guard of :mod:`gpudl.aliasing`).
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TypeVar

from gpudl.checks import check_choice  # NumPy only: numba is not imported yet

__all__ = ["name", "pick", "is_simulator", "libcuda", "compile_in_child", "WARP_SIZE"]

WARP_SIZE = 32
_VALID = ("cuda", "simulator", "compile")
T = TypeVar("T")


def libcuda() -> ctypes.CDLL | None:
    """The CUDA driver's library (``libcuda``) loaded with ``ctypes``, without numba, or
    None where no NVIDIA driver is installed."""
    for lib_name in ("libcuda.so.1", "libcuda.so", "nvcuda.dll"):
        try:
            return ctypes.CDLL(lib_name)
        except OSError:
            continue
    return None


def _driver_sees_a_gpu() -> bool:
    """Ask the CUDA driver, without numba, whether any GPU is present."""
    lib = libcuda()
    if lib is None or lib.cuInit(0) != 0:
        return False
    count = ctypes.c_int(0)
    return lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0


def _decide() -> str:
    requested = os.environ.get("GPUDL_BACKEND", "").strip().lower()
    if requested:
        check_choice("GPUDL_BACKEND (when set)", requested, _VALID)
    numba_loaded = "numba" in sys.modules
    if numba_loaded:
        import numba

        loaded_as = "simulator" if numba.config.ENABLE_CUDASIM else "cuda"
        wanted = requested or ("cuda" if _driver_sees_a_gpu() else "simulator")
        if requested == "compile" and loaded_as == "cuda":
            return "compile"
        if wanted != loaded_as:
            raise RuntimeError(
                f"numba was imported before gpudl with the {loaded_as!r} CUDA target, but gpudl "
                f"needs the {wanted!r} backend. numba reads NUMBA_ENABLE_CUDASIM only at its first "
                "import: import gpudl before numba (or set NUMBA_ENABLE_CUDASIM="
                f"{'1' if wanted == 'simulator' else '0'} before starting Python)."
            )
        return loaded_as
    if requested == "cuda" and not _driver_sees_a_gpu():
        raise RuntimeError(
            "GPUDL_BACKEND=cuda was requested but the CUDA driver reports no GPU; "
            "unset GPUDL_BACKEND (or set it to 'simulator') to run on the CPU"
        )
    chosen = requested or ("cuda" if _driver_sees_a_gpu() else "simulator")
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1" if chosen == "simulator" else "0"
    # Numba prints performance warnings on a GPU that the simulator never prints; they would
    # make a notebook's stored outputs differ between backends.
    os.environ.setdefault("NUMBA_CUDA_LOW_OCCUPANCY_WARNINGS", "0")
    os.environ.setdefault("NUMBA_CUDA_WARN_ON_IMPLICIT_COPY", "0")
    return chosen


_NAME = _decide()
os.environ["TRITON_INTERPRET"] = "1" if _NAME == "simulator" else "0"
# Triton 3.9 warns at its first kernel unless this is set; 1 keeps its default (a * b + c
# contracted into one FMA, as NVVM does for the Numba kernels), and the warning out of labs.
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def name() -> str:
    """Return the backend in use: ``"cuda"``, ``"simulator"`` or ``"compile"`` (the CUDA target
    without a GPU: kernels compile, nothing launches)."""
    return _NAME


def is_simulator() -> bool:
    """True when kernels run on Numba's CUDA simulator (on the CPU)."""
    return _NAME == "simulator"


def pick(*, gpu: T, sim: T) -> T:
    """Pick a problem size (or any setting) for the backend in use.

    ``pick(gpu=1 << 26, sim=3000)`` returns the first on a GPU and the second on the
    simulator, which runs each CUDA thread as a Python thread and is about a million times
    slower. ``"compile"`` (kernels compiled for a GPU, never run) takes the GPU's.
    """
    return sim if _NAME == "simulator" else gpu


def compile_in_child(module: str, jobs: list, ccs: list[tuple[int, int]],
                     timeout: float) -> subprocess.CompletedProcess:
    """Run ``python -m module --jobs JSON --cc 9.0,...`` in a child process on the
    ``compile`` backend (numba's real CUDA target; Triton's compiler, not its interpreter),
    with this checkout importable: how the simulator compiles kernels for a GPU
    (:mod:`gpudl.ptx`, :mod:`gpudl.triton_ptx`)."""
    env = {**os.environ, "GPUDL_BACKEND": "compile"}
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", module, "--jobs", json.dumps(jobs),
                           "--cc", ",".join(f"{c[0]}.{c[1]}" for c in ccs)],
                          capture_output=True, text=True, env=env, timeout=timeout)
