"""A kernel's PTX for a chosen compute capability, with or without a GPU.

Book section: Chapter 8, "A warp-level mma from Numba" (the PTX shows the ``mma.sync``
instruction; the fused attention kernel's shows no float64 arithmetic).

PTX is the virtual instruction set that numba-cuda compiles a kernel to (through NVIDIA's
NVVM) before the driver or ``ptxas`` turns it into machine code. Compiling to PTX needs the
CUDA compiler pieces, libNVVM and libdevice, but no GPU. :func:`compile_ptx` compiles in a
child process, where numba loads its real CUDA target (this process may be running the
simulator). Without a GPU, numba-cuda 0.30 asks NVRTC which architectures it supports and
looks for libdevice next to NVRTC; where only a CUDA toolkit directory is installed
(:func:`toolkit`, such as ``/usr/local/cuda-13.0``), the child answers those two lookups from
it. :func:`ptxas` assembles PTX with the toolkit's ``ptxas`` to check it and to count
registers and shared memory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudl import backend

__all__ = ["toolkit", "available", "compile_ptx", "compile_many", "ptxas"]

_LIBDEVICE = Path("nvvm/libdevice/libdevice.10.bc")

_CHILD = r"""
import json, os, sys
os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
os.environ["GPUDL_BACKEND"] = "cuda"
import numba.cuda  # the real CUDA target, before gpudl decides the backend
request = json.loads(sys.argv[1])
if request["toolkit"]:
    from numba.cuda.cudadrv import nvrtc, nvvm
    libdevice = os.path.join(request["toolkit"], "nvvm", "libdevice", "libdevice.10.bc")
    nvrtc.find_closest_arch = lambda cc: tuple(cc)
    nvvm.get_libdevice = lambda: libdevice
    nvvm.open_libdevice = lambda: open(libdevice, "rb").read()
import importlib
codes = []
for module, name, signature, args in request["jobs"]:
    kernel = getattr(importlib.import_module(module), name)
    if args is not None:
        kernel = kernel(*args)
    ptx, _ = numba.cuda.compile_ptx(kernel.py_func, signature, cc=tuple(request["cc"]))
    codes.append(ptx)
sys.stdout.write(json.dumps(codes))
"""


def toolkit() -> Path | None:
    """A CUDA toolkit directory with libNVVM and libdevice: ``$CUDA_HOME``, ``$CUDA_PATH``,
    ``/usr/local/cuda`` or the newest ``/usr/local/cuda-*``; None if there is none."""
    candidates = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")]
    candidates += ["/usr/local/cuda", *sorted(map(str, Path("/usr/local").glob("cuda-*")),
                                               reverse=True)]
    for path in filter(None, candidates):
        root = Path(path)
        has_nvvm = any(root.glob("lib*/libnvvm.so*")) or any(root.glob("nvvm/lib*/libnvvm*"))
        if (root / _LIBDEVICE).is_file() and has_nvvm:
            return root
    return None


def available() -> bool:
    """Whether :func:`compile_ptx` can work here: a GPU (numba-cuda finds its own compiler
    pieces), or a CUDA toolkit directory (:func:`toolkit`)."""
    return not backend.is_simulator() or toolkit() is not None


def compile_ptx(module: str, name: str, signature: str, cc: tuple[int, int] = (8, 0),
                args: tuple | None = None, timeout: float = 300) -> str:
    """The PTX of kernel ``module.name`` (or, with ``args``, of the kernel that the factory
    ``module.name(*args)`` returns) for ``signature`` and compute capability ``cc``."""
    return compile_many([(module, name, signature, args)], cc, timeout)[0]


def compile_many(jobs: list[tuple[str, str, str, tuple | None]], cc: tuple[int, int] = (8, 0),
                 timeout: float = 300) -> list[str]:
    """:func:`compile_ptx` for several ``(module, name, signature, args)`` at once, in one
    child process."""
    if not (isinstance(cc, tuple) and len(cc) == 2 and all(isinstance(x, int) for x in cc)):
        raise TypeError(f"cc must be a (major, minor) tuple of ints, got {cc!r}")
    root = toolkit() if backend.is_simulator() else None
    if root is None and backend.is_simulator():
        raise RuntimeError("no CUDA toolkit with libNVVM and libdevice found (set CUDA_HOME): "
                           "PTX cannot be compiled without a GPU")
    request = {"jobs": [[m, n, s, None if a is None else list(a)] for m, n, s, a in jobs],
               "cc": list(cc), "toolkit": None if root is None else str(root)}
    repo = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(request)],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "PYTHONPATH": path})
    if done.returncode != 0:
        names = ", ".join(f"{m}.{n}" for m, n, *_ in jobs)
        raise RuntimeError(f"compiling {names} to PTX failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def ptxas(ptx: str, cc: tuple[int, int] = (8, 0)) -> str:
    """Assemble ``ptx`` for ``sm_<cc>`` with ``ptxas -v`` and return its report (registers,
    shared memory, spills); ``RuntimeError`` if there is no ``ptxas`` or it refuses."""
    root = toolkit()
    exe = shutil.which("ptxas") or (str(root / "bin" / "ptxas") if root else None)
    if exe is None or not Path(exe).exists():
        raise RuntimeError("no ptxas found (on PATH or in the CUDA toolkit)")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(ptx)
        done = subprocess.run([exe, f"-arch=sm_{cc[0]}{cc[1]}", "-v", str(source), "-o",
                               str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ptxas refused the PTX:\n{done.stderr[-3000:]}")
    return done.stderr + done.stdout
