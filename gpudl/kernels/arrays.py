"""Kernel outputs allocated on the device and filled there, NaN ("poisoned") by default.

Book section: Chapter 2, "Correct before fast" (every kernel writes into a poisoned output, so
an element it forgets stays NaN and the test catches it). Filling on the device needs no host
copy, so timings of the kernels that use these outputs include no upload.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

__all__ = ["filled", "poisoned"]


def filled(shape: int | tuple[int, ...], byte: int) -> Any:
    """A float32 device array with every byte set to ``byte`` on the device: 0xFF makes
    every element NaN, 0 makes it 0.0."""
    out = cuda.device_array(shape, dtype=np.float32)
    if out.size:
        driver.device_memset(out, byte, out.nbytes)
    return out


def poisoned(shape: int | tuple[int, ...]) -> Any:
    """A float32 device array of NaN (see :func:`filled`)."""
    return filled(shape, 0xFF)
