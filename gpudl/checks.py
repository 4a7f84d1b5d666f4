"""Input checks shared by the package's modules (BOOK.md rule 6: bad input gets a clear error).

Book section: none; every public function that takes a count uses it.
"""

from __future__ import annotations

from numbers import Integral

import numpy as np

__all__ = ["check_int", "check_float32_array"]


def check_int(name: str, value: object, minimum: int) -> int:
    """``value`` as an int if it is an integer (not a bool) ``>= minimum``; else a
    ``TypeError`` (not an integer) or ``ValueError`` (too small) naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_float32_array(name: str, x: object, ndim: int) -> bool:
    """Check that ``x`` is a float32, ``ndim``-D, C-contiguous NumPy or numba device array;
    return True if it is on the device. ``TypeError`` for the wrong type or dtype,
    ``ValueError`` for the wrong rank or a strided view, each naming ``name``."""
    on_device = bool(getattr(x, "__cuda_ndarray__", False))  # real and simulated device arrays
    if not (on_device or isinstance(x, np.ndarray)):
        raise TypeError(
            f"{name} must be a NumPy array or a numba device array, got {type(x).__name__}"
        )
    if x.dtype != np.float32:
        raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {x.ndim}-D with shape {x.shape}")
    if not (x.is_c_contiguous() if on_device else x.flags.c_contiguous):
        raise ValueError(f"{name} must be C-contiguous, got a strided view")
    return on_device
