"""Input checks shared by the package's modules: one mistake, one error type and one message.

Book section: *Preface, "How to read the code"* (bad input gets a clear error). Every public
function that takes a count, a number, a flag, a name from a list, layer widths, a kernel array
or a tensor checks it here, before any work and before any process starts:

* the wrong *type* (a float where an int is wanted, a bool or a str where a number is, a list
  where an array is, an array of the wrong dtype) raises ``TypeError``;
* the right type with a wrong *value* (too small or too large, NaN or infinite, the wrong rank,
  a strided view) raises ``ValueError``;

each message naming the argument, what was expected and what was given.

Deciding that two results are *equal* or *within a bound* goes through :func:`largest`,
:func:`largest_difference` and :func:`within`, for which NaN is never within anything
(Python's ``max(0.0, nan)`` is ``0.0``, and ``nan > bound`` is False).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = [
    "OneLineArgumentParser",
    "check_array",
    "check_bool",
    "check_callable",
    "check_choice",
    "check_compute_capability",
    "FLOAT_DTYPES",
    "check_equal",
    "check_float32_array",
    "check_float_array",
    "check_host_or_device",
    "check_instance",
    "check_int",
    "check_ints",
    "check_kernel_array",
    "check_positive",
    "check_real",
    "check_real_mapping",
    "check_reals",
    "check_tensor",
    "check_widths",
    "fail",
    "float_dtype",
    "is_device_array",
    "largest",
    "largest_difference",
    "within",
]


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ``argparse.ArgumentParser`` whose errors are one line, ``PROG: error: MESSAGE``, on
    stderr, with exit status 2 (argparse's status for a bad argument): the command lines of
    ``python -m gpudl`` refuse a bad argument or source this way, with no usage dump and no
    traceback. Its sub-commands' parsers are of the same class."""

    def error(self, message: str) -> None:
        """Print ``PROG: error: MESSAGE`` on one line and exit with status 2."""
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())}\n")


def fail(prog: str, message: object) -> int:
    """Print ``PROG: error: MESSAGE`` on one line on stderr; the exit status 2, to return."""
    print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
    return 2


def check_int(name: str, value: object, minimum: int | None = None,
              maximum: int | None = None) -> int:
    """``value`` as an int if it is an integer (not a bool) from ``minimum`` to ``maximum``
    (each optional, both included); else a ``TypeError`` (not an integer) or ``ValueError``
    (out of range) naming ``name``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return int(value)


def check_real(name: str, value: object, minimum: float | None = None,
               maximum: float | None = None, *, strict: bool = False,
               finite: bool = True) -> float:
    """``value`` as a float if it is a real number (an int or a float, not a bool); else a
    ``TypeError`` naming ``name``. ``ValueError`` for NaN, for an infinity unless ``finite``
    is False, below ``minimum`` (or equal to it with ``strict``), or above ``maximum``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r}")
    value = float(value)
    if math.isnan(value) or (finite and math.isinf(value)):
        raise ValueError(f"{name} must be a {'finite ' if finite else ''}number, got {value!r}")
    if minimum is not None and not (value > minimum if strict else value >= minimum):
        raise ValueError(f"{name} must be {'>' if strict else '>='} {minimum:g}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum:g}, got {value!r}")
    return value


def check_positive(name: str, value: object) -> float:
    """``value`` as a float if it is a finite real number ``> 0`` (:func:`check_real`)."""
    return check_real(name, value, 0, strict=True)


def check_bool(name: str, value: object) -> bool:
    """``value`` as a bool if it is one (Python's or NumPy's); else a ``TypeError``."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def check_callable(name: str, value: object) -> Any:
    """``value`` if it can be called (a function, a class); else a ``TypeError``."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {type(value).__name__} {value!r}")
    return value


def check_instance(name: str, value: object, cls: type | tuple[type, ...]) -> Any:
    """``value`` if it is an instance of ``cls`` (a set-up object, a model, a generator);
    else a ``TypeError`` naming ``name`` and the class wanted."""
    if not isinstance(value, cls):
        wanted = " or ".join(c.__name__ for c in (cls if isinstance(cls, tuple) else (cls,)))
        raise TypeError(f"{name} must be a {wanted}, got {type(value).__name__}")
    return value


def check_choice(name: str, value: object, choices: Iterable[Any]) -> Any:
    """``value`` if it is one of ``choices`` (names, or other values such as torch dtypes):
    ``TypeError`` if it is not of a type the choices have (``None``, a list, a str where a
    dtype is wanted), ``ValueError`` if it is another value of that type (or if there are no
    choices)."""
    choices = tuple(choices)
    types = tuple({type(c) for c in choices})
    wanted = " or ".join(sorted(t.__name__ for t in types))
    if types and not isinstance(value, types):
        raise TypeError(f"{name} must be a {wanted}, one of {list(choices)}, "
                        f"got {type(value).__name__} {value!r}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_equal(name_a: str, a: object, name_b: str, b: object) -> None:
    """``ValueError`` unless ``a == b`` (two sizes or shapes that must agree), naming both."""
    if a != b:
        raise ValueError(f"{name_a} must equal {name_b}: got {a} and {b}")


def check_ints(name: str, values: object, minimum: int | None = 1,
               minimum_count: int = 1) -> tuple[int, ...]:
    """A sequence of at least ``minimum_count`` ints, each ``>= minimum``, as a tuple:
    ``TypeError`` for what is not a sequence of ints (a str, a number, an element that is
    not an int), ``ValueError`` for too few elements or one that is too small."""
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | np.ndarray):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__} "
                        f"{values!r}")
    if len(values) < minimum_count:
        raise ValueError(f"{name} must hold at least {minimum_count} int(s), got "
                         f"{tuple(values)!r}")
    return tuple(check_int(f"{name}[{i}]", v, minimum) for i, v in enumerate(values))


def check_reals(name: str, values: object, minimum: float | None = None, *,
                strict: bool = False, minimum_count: int = 1) -> tuple[float, ...]:
    """A sequence (or 1-D array) of at least ``minimum_count`` finite real numbers, each
    ``>= minimum`` (``>`` with ``strict``), as a tuple of floats (:func:`check_real`)."""
    if isinstance(values, np.ndarray) and values.ndim == 1:
        values = values.tolist()
    if isinstance(values, str | bytes) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a sequence of numbers, got {type(values).__name__} "
                        f"{values!r}")
    if len(values) < minimum_count:
        raise ValueError(f"{name} must hold at least {minimum_count} number(s), got "
                         f"{tuple(values)!r}")
    return tuple(check_real(f"{name}[{i}]", v, minimum, strict=strict)
                 for i, v in enumerate(values))


def check_real_mapping(name: str, values: object, minimum: float | None = None, *,
                       strict: bool = False) -> dict:
    """A mapping of names to finite real numbers, each ``>= minimum`` (``>`` with
    ``strict``), or to such mappings (one level of groups): ``TypeError`` for what is not,
    ``ValueError`` for NaN, an infinity or a number out of range, naming the entry."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{name} must be a mapping of names to numbers, got "
                        f"{type(values).__name__}")
    for key, value in values.items():
        if isinstance(value, Mapping):
            check_real_mapping(f"{name}[{key!r}]", value, minimum, strict=strict)
        else:
            check_real(f"{name}[{key!r}]", value, minimum, strict=strict)
    return dict(values)


def check_widths(name: str, widths: object, minimum_count: int = 2) -> tuple[int, ...]:
    """Layer widths as a tuple of ints: a sequence of at least ``minimum_count`` ints, each
    ``>= 1`` (:func:`check_ints`)."""
    if isinstance(widths, Sequence) and not isinstance(widths, str) and (
            len(widths) < minimum_count):
        raise ValueError(f"{name} must list at least {minimum_count} layer widths, "
                         f"got {tuple(widths)!r}")
    return check_ints(name, widths, 1, minimum_count)


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


#: The floating-point formats a kernel array may hold, by name (the names a kernel declares
#: as its ``precision`` in :mod:`gpudl.registry`), and the NumPy dtype that holds each:
#: bfloat16 has no NumPy dtype, so kernels see it through its bit pattern, int16
#: (``tensor.view(torch.int16)``, :mod:`gpudl.interop`).
FLOAT_DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
                "bfloat16": np.dtype(np.int16)}


def float_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype that holds the floating-point format ``dtype``, a name of
    :data:`FLOAT_DTYPES` (:func:`check_choice`)."""
    return FLOAT_DTYPES[check_choice("dtype", dtype, FLOAT_DTYPES)]


def check_float_array(name: str, x: object, ndim: int,
                      dtype: str | tuple[str, ...] = "float32") -> bool:
    """Check that ``x`` is a C-contiguous ``ndim``-D NumPy or numba device array holding the
    floating-point format ``dtype`` (a name of :data:`FLOAT_DTYPES`, or a tuple of names any
    of which will do); return True if it is on the device (:func:`check_kernel_array`)."""
    formats = dtype if isinstance(dtype, tuple) else (dtype,)
    return _check_kernel_array(name, x, ndim, {
        float_dtype(f): "bfloat16 (int16 bits)" if f == "bfloat16" else f for f in formats})


def check_float32_array(name: str, x: object, ndim: int) -> bool:
    """Check that ``x`` is a float32, ``ndim``-D, C-contiguous NumPy or numba device array;
    return True if it is on the device (:func:`check_float_array` with float32)."""
    return check_float_array(name, x, ndim, "float32")


def check_host_or_device(arrays: Mapping[str, object]) -> bool:
    """True if every array of ``arrays`` (name -> array) is a numba device array, False if
    every one is on the host; a ``TypeError`` naming one of each for a mix (a kernel's
    host function returns host arrays for host inputs and device arrays for device ones)."""
    on_device = {name: is_device_array(x) for name, x in arrays.items()}
    if len(set(on_device.values())) > 1:
        device = next(name for name, here in on_device.items() if here)
        host = next(name for name, here in on_device.items() if not here)
        raise TypeError(f"{device} is a numba device array but {host} is not: give all host "
                        "arrays or all device arrays, not a mix")
    return any(on_device.values())


def check_kernel_array(name: str, x: object, ndim: int,
                       dtype: type | tuple[type, ...]) -> bool:
    """Check that ``x`` is a C-contiguous ``ndim``-D NumPy or numba device array of
    ``dtype`` (or of any dtype of a tuple: int32 lengths and block tables, int8 weights,
    int32 or int64 pointer chains; float data goes through :func:`check_float_array`);
    return True if it is on the device. ``TypeError`` for the wrong type or dtype,
    ``ValueError`` for the wrong rank or a strided view, each naming ``name``."""
    dtypes = dtype if isinstance(dtype, tuple) else (dtype,)
    return _check_kernel_array(name, x, ndim, {np.dtype(d): str(np.dtype(d)) for d in dtypes})


def _check_kernel_array(name: str, x: object, ndim: int, dtypes: dict[np.dtype, str]) -> bool:
    on_device = is_device_array(x)
    if not (on_device or isinstance(x, np.ndarray)):
        raise TypeError(
            f"{name} must be a NumPy array or a numba device array, got {type(x).__name__}"
        )
    if np.dtype(x.dtype) not in dtypes:
        raise TypeError(f"{name} must have dtype {' or '.join(dtypes.values())}, got {x.dtype}")
    if x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {x.ndim}-D with shape {x.shape}")
    if not (x.is_c_contiguous() if on_device else x.flags.c_contiguous):
        raise ValueError(f"{name} must be C-contiguous, got a strided view")
    return on_device


def check_array(name: str, x: object, ndim: int | None = None,
                kinds: str = "fiu") -> np.ndarray:
    """``x`` if it is a NumPy array of a real dtype (``kinds``: float, signed or unsigned
    int) and, given ``ndim``, of that rank: ``TypeError`` for another type or dtype,
    ``ValueError`` for the wrong rank. The check of the NumPy references' inputs."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array, got {type(x).__name__}")
    if x.dtype.kind not in kinds:
        raise TypeError(f"{name} must have a real dtype, got {x.dtype}")
    if ndim is not None and x.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got {x.ndim}-D with shape {x.shape}")
    return x


def check_tensor(name: str, t: object, dtypes: Sequence[Any] | None = None,
                 ndim: int | None = None, contiguous: bool = False) -> Any:
    """``t`` if it is a ``torch.Tensor`` (``TypeError`` otherwise, or for a dtype not in
    ``dtypes``), of rank ``ndim`` and, with ``contiguous``, contiguous (``ValueError``
    otherwise), each naming ``name``."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None and t.dtype not in dtypes:
        raise TypeError(f"{name} must have a dtype in {tuple(dtypes)}, got {t.dtype}")
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {tuple(t.shape)}")
    if contiguous and not t.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {t.stride()}")
    return t


def _largest_of(value: Any) -> float:
    if isinstance(value, np.ndarray | np.generic) or hasattr(value, "detach"):
        array = np.asarray(value.detach().cpu() if hasattr(value, "detach") else value,
                           dtype=np.float64)
        return float(array.max()) if array.size else -math.inf  # max() propagates NaN
    return float(value)


def largest(values: Iterable[Any]) -> float:
    """The largest of ``values`` (numbers, arrays or tensors, each reduced to its largest
    element) as a float: NaN if any of them holds a NaN, ``-inf`` if there are none. Python's
    ``max`` would skip a NaN that does not come first (``max(0.0, nan)`` is 0.0)."""
    out = -math.inf
    for value in values:
        v = _largest_of(value)
        if math.isnan(v):
            return math.nan
        out = max(out, v)
    return out


def largest_difference(a: Any, b: Any) -> float:
    """The largest ``|a - b|`` over two arrays or tensors of one shape (or two numbers): NaN
    where either holds a NaN the other does not match, ``inf`` where infinities differ."""
    if hasattr(a, "detach"):
        a = a.detach().cpu().numpy()
    if hasattr(b, "detach"):
        b = b.detach().cpu().numpy()
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    check_equal("the shape of a", a.shape, "the shape of b", b.shape)
    if a.size == 0:
        return 0.0
    with np.errstate(invalid="ignore"):
        diff = np.abs(a - b)
    both_infinite = np.isinf(a) & (a == b)  # the same infinity is no difference
    return float(np.where(both_infinite, 0.0, diff).max())


def within(value: float, bound: float) -> bool:
    """``value <= bound``, and False whenever either is NaN: the one way this package decides
    that a difference is small enough."""
    return bool(float(value) <= float(bound))
