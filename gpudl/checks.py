"""Input checks shared by the package's modules: one mistake, one error type and one message.

Book section: *Preface, "How to read the code"* (bad input gets a clear error). Every public
function that takes a count, a number, a flag, a list of layer widths or a kernel array checks
it here:

* the wrong *type* (a float where an int is wanted, a bool where a number is, a list where an
  array is, an array of the wrong dtype) raises ``TypeError``;
* the right type with a wrong *value* (too small, not finite, the wrong rank, a strided view)
  raises ``ValueError``;

each message naming the argument, what was expected and what was given.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral, Real

import numpy as np

__all__ = [
    "check_bool",
    "check_choice",
    "check_compute_capability",
    "check_equal",
    "check_float32_array",
    "check_int",
    "check_array",
    "check_positive",
    "check_real",
    "check_widths",
    "is_device_array",
]


def check_int(name: str, value: object, minimum: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) ``>= minimum``; else a
    ``TypeError`` (not an integer) or ``ValueError`` (too small) naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return int(value)


def check_real(name: str, value: object, minimum: float | None = None, *,
               strict: bool = False, finite: bool = False) -> float:
    """``value`` as a float if it is a real number (an int or a float, not a bool); else a
    ``TypeError`` naming ``name``. With ``minimum``, a ``ValueError`` unless ``value >=
    minimum`` (``>`` with ``strict``; NaN never passes); with ``finite``, unless it is
    finite."""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if minimum is not None and not (value > minimum if strict else value >= minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum:g}"
                         f"{' and finite' if finite else ''}, got {value!r}")
    if finite and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return value


def check_positive(name: str, value: object) -> float:
    """``value`` as a float if it is a finite real number ``> 0`` (:func:`check_real`)."""
    return check_real(name, value, 0, strict=True, finite=True)


def check_bool(name: str, value: object) -> bool:
    """``value`` as a bool if it is one (Python's or NumPy's); else a ``TypeError``."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_choice(name: str, value: object, choices: Sequence[str]) -> str:
    """``value`` if it is one of the names ``choices``: ``TypeError`` if it is not a str,
    ``ValueError`` if it is another name."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def check_equal(name_a: str, a: object, name_b: str, b: object) -> None:
    """``ValueError`` unless ``a == b`` (two sizes or shapes that must agree), naming both."""
    if a != b:
        raise ValueError(f"{name_a} must equal {name_b}: got {a} and {b}")


def check_widths(name: str, widths: object, minimum_count: int = 2) -> tuple[int, ...]:
    """Layer widths as a tuple of ints: a sequence of at least ``minimum_count`` ints, each
    ``>= 1``. ``TypeError`` for what is not a sequence of ints, ``ValueError`` for too few
    widths or a width below 1."""
    if isinstance(widths, str) or not isinstance(widths, Sequence):
        raise TypeError(f"{name} must be a sequence of ints (layer widths), "
                        f"got {type(widths).__name__} {widths!r}")
    if len(widths) < minimum_count:
        raise ValueError(f"{name} must list at least {minimum_count} layer widths, "
                         f"got {tuple(widths)!r}")
    return tuple(check_int(f"{name}[{i}]", w, 1) for i, w in enumerate(widths))


def check_compute_capability(name: str, value: object) -> tuple[int, int]:
    """A compute capability: a ``(major, minor)`` tuple of two ints ``>= 0`` such as ``(8, 0)``;
    ``TypeError`` for anything else, ``ValueError`` for a negative number."""
    if not isinstance(value, tuple) or len(value) != 2:
        raise TypeError(f"{name} must be a (major, minor) tuple of ints such as (8, 0), "
                        f"got {value!r}")
    return check_int(f"{name}[0]", value[0], 0), check_int(f"{name}[1]", value[1], 0)


def is_device_array(x: object) -> bool:
    """True for a numba device array, real or simulated (both carry ``__cuda_ndarray__``)."""
    return bool(getattr(x, "__cuda_ndarray__", False))


def check_float32_array(name: str, x: object, ndim: int) -> bool:
    """Check that ``x`` is a float32, ``ndim``-D, C-contiguous NumPy or numba device array;
    return True if it is on the device (:func:`check_array` with float32)."""
    return check_array(name, x, ndim, np.float32)


def check_array(name: str, x: object, ndim: int, dtype: type) -> bool:
    """Check that ``x`` is a C-contiguous ``ndim``-D NumPy or numba device array of
    ``dtype`` (float32 data, int32 lengths and block tables, int8 weights); return True if
    it is on the device. ``TypeError`` for the wrong type or dtype, ``ValueError`` for the
    wrong rank or a strided view, each naming ``name``."""
    on_device = is_device_array(x)
    if not (on_device or isinstance(x, np.ndarray)):
        raise TypeError(
            f"{name} must be a NumPy array or a numba device array, got {type(x).__name__}"
        )
    if x.dtype != np.dtype(dtype):
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {x.ndim}-D with shape {x.shape}")
    if not (x.is_c_contiguous() if on_device else x.flags.c_contiguous):
        raise ValueError(f"{name} must be C-contiguous, got a strided view")
    return on_device
