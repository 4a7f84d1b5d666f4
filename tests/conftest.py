"""Shared test set-up: decide the backend before anything imports numba, and skip the tests
marked ``gpu`` unless a real GPU is in use."""

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
