"""Shared test set-up: decide the backend before anything imports numba, and skip the tests
marked ``gpu`` unless a real GPU is in use."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpudl  # noqa: F401  (gpudl.backend must run before the first `import numba`)
from gpudl import backend


def pytest_collection_modifyitems(config, items):
    if backend.name() == "cuda":
        return
    skip = pytest.mark.skip(reason="needs a real CUDA GPU (running on the simulator)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def fast_thread_switching():
    """The simulator runs each GPU thread as a Python thread; switching between them more
    often makes syncthreads and shuffles cheaper (a tiled matmul runs about twice as fast).
    Kernel-heavy test modules opt in with ``pytest.mark.usefixtures``."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(5e-4)
    yield
    sys.setswitchinterval(before)


ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def torchrun():
    """``torchrun(module, *args, nproc=2, timeout=150)`` runs ``python -m torch.distributed.run
    --standalone --nproc_per_node=nproc -m module *args`` with the repository importable, checks
    that it exited with 0 (else fails with the end of its stderr) and returns the process."""

    def run(module: str, *args: str, nproc: int = 2,
            timeout: float = 150) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={nproc}", "-m", module, *args]
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": path},
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    return run
