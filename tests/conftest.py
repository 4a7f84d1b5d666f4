"""Shared test set-up: decide the backend before anything imports numba, and skip the tests
marked ``gpu`` unless a real GPU is in use."""

import sys

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
