"""Where a benchmark runs: the machine (its GPUs, driver and versions) and the git commit of
the measured code, stored with every result; whether the machine has the GPUs a run needs.

Book section: every chapter's "Measured on a GPU" boxes (the machine and the commit each box
names).

:func:`machine` and :func:`commit` describe a run for :func:`gpudl.bench.write_results`;
:func:`gpus_missing` says why a benchmark of several ranks cannot run here, for the topics
that measure between GPUs (:mod:`gpudl.bench.allreduce`, :mod:`gpudl.bench.p2p`,
:mod:`gpudl.bench.pipeline`).
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

from gpudl import backend
from gpudl.bench.schema import COMMIT_PATTERN
from gpudl.checks import check_instance, check_int

__all__ = ["ROOT", "machine", "commit", "gpus_missing"]

#: The repository's root, the folder that holds the package.
ROOT = Path(__file__).resolve().parents[2]


def _nvidia_driver() -> str | None:
    proc = Path("/proc/driver/nvidia/version")  # Linux: the kernel module's version line
    text = proc.read_text() if proc.exists() else ""
    if not text:
        try:
            text = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                   "--format=csv,noheader"], capture_output=True, text=True,
                                  timeout=20).stdout
        except (OSError, subprocess.SubprocessError):
            return None
    found = re.search(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b", text)
    return found.group(1) if found else None


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")  # Linux
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine() -> dict:
    """The machine a benchmark ran on: ``backend``, ``gpu`` (name), ``gpu_count``,
    ``driver`` (NVIDIA driver version), ``cuda_driver`` (the CUDA version the driver
    supports), ``cuda_runtime`` (numba's NVRTC), ``torch_cuda``, ``platform``, ``python``,
    ``cpu``, ``cpu_count``, ``versions`` (numpy, numba, numba-cuda, torch) and ``device``
    (:func:`gpudl.hardware.describe`)."""
    import torch

    from gpudl.hardware import describe

    versions = {}
    for package in ("numpy", "numba", "numba-cuda", "torch"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    info = describe()
    on_gpu = not backend.is_simulator()
    out = {"backend": backend.name(), "gpu": info.name if on_gpu else None,
           "gpu_count": torch.cuda.device_count() if on_gpu else 0,
           "driver": None, "cuda_driver": None, "cuda_runtime": None, "torch_cuda": None}
    if on_gpu:
        from numba import cuda
        from numba.cuda.cudadrv import driver

        out |= {"driver": _nvidia_driver(),
                "cuda_driver": ".".join(map(str, driver.get_version())),
                "cuda_runtime": ".".join(map(str, cuda.runtime.get_version())),
                "torch_cuda": torch.version.cuda}
    return out | {"platform": platform.platform(), "python": platform.python_version(),
                  "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "versions": versions,
                  "device": dataclasses.asdict(info)}


def commit(root: Path = ROOT) -> str | None:
    """The git commit of the measured code: ``GPUDL_COMMIT`` if set (a checkout without
    ``.git``, as on a lent GPU machine), else ``git rev-parse HEAD`` in ``root``, with
    ``-dirty`` appended when tracked files differ from it (the outputs of runs, in
    ``notebooks/`` and ``results/``, aside); ``None`` when neither is known."""
    check_instance("root", root, (str, os.PathLike))
    given = os.environ.get("GPUDL_COMMIT")
    if given:
        if not COMMIT_PATTERN.fullmatch(given):
            raise ValueError(f"GPUDL_COMMIT must be a hexadecimal git sha (7 to 40 digits), "
                             f"optionally ending in -dirty, got {given!r}")
        return given
    try:
        git = ["git", "-C", str(root)]
        sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=30).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--",
                                 ".", ":!notebooks", ":!results"], capture_output=True,
                                text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return sha + ("-dirty" if status.strip() else "")


def gpus_missing(ranks: int) -> str | None:
    """Why ``ranks`` ranks cannot be measured between GPUs here (fewer GPUs than ranks), or
    ``None``. On the simulator the ranks are CPU processes (gloo) and nothing is missing."""
    check_int("ranks", ranks, 1)
    if backend.is_simulator():
        return None
    import torch

    count = torch.cuda.device_count()
    if count >= ranks:
        return None
    return f"needs {ranks} GPUs, this machine has {count}"
