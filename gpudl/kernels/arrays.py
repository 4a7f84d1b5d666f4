"""Kernel arrays in and out: host or device arrays in, outputs allocated on the device and
filled there, NaN ("poisoned") by default.

Book section: Chapter 1, "Threads, blocks, grids and warps" (every kernel writes into a poisoned
output, so an element it forgets stays NaN and the test catches it). Filling on the device needs
no host copy, so timings of the kernels that use these outputs include no upload.

Every kernel module's host functions take NumPy arrays (and return NumPy arrays) or numba
device arrays (and return device arrays): :func:`check_arrays` checks the inputs and says
which, :func:`launch_into_poisoned` copies host inputs to the device, launches into poisoned
outputs and brings them back when the inputs came from the host.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

from gpudl.checks import (
    check_array,
    check_bool,
    check_float_array,
    check_host_or_device,
    check_int,
    check_ints,
    float_dtype,
    is_device_array,
)

__all__ = [
    "EPS32",
    "UNIT_ROUNDOFF",
    "check_arrays",
    "check_shape",
    "filled",
    "from_float32",
    "launch_in_place",
    "launch_into_poisoned",
    "poisoned",
    "returned",
    "rounding_bound",
    "to_device",
    "to_float64",
    "zeros",
]

#: A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any
Shape = int | tuple[int, ...]
#: The machine epsilon of float32, 2**-23 (twice the unit roundoff), the unit in which the
#: kernels' error bounds are written.
EPS32 = float(np.finfo(np.float32).eps)
#: Format -> its unit roundoff (half an ulp of 1), float32 2**-24, float16 2**-11 and bfloat16
#: 2**-8. One rounding to the format is off by at most this much, relative, in its normal
#: range; :func:`rounding_bound` adds the subnormal range's absolute half-step.
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
#: Format -> half its smallest subnormal, the most one rounding of a tiny value is off by.
_HALF_SUBNORMAL = {"float32": 2.0**-150, "float16": 2.0**-25, "bfloat16": 2.0**-134}


def rounding_bound(exact: np.ndarray, dtype: str) -> np.ndarray:
    """How far, elementwise, one rounding of ``exact`` (float64) to the format ``dtype`` may
    be from it: ``UNIT_ROUNDOFF[dtype] * |exact|`` plus half the format's smallest subnormal
    (barring overflow)."""
    float_dtype(dtype)
    check_array("exact", exact, kinds="f")
    return UNIT_ROUNDOFF[dtype] * np.abs(exact.astype(np.float64)) + _HALF_SUBNORMAL[dtype]


def from_float32(x: np.ndarray, dtype: str) -> np.ndarray:
    """The float32 host vector ``x`` rounded to nearest (ties to even) in the format ``dtype``:
    a float32 or float16 vector, or bfloat16 as int16 bits (a NaN stays a quiet NaN)."""
    check_float_array("x", x, 1)
    if is_device_array(x):
        raise TypeError("x must be a NumPy array, got a numba device array")
    if float_dtype(dtype) != np.int16:
        return x.astype(float_dtype(dtype))
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded).view(np.int16)


def to_float64(x: np.ndarray, dtype: str) -> np.ndarray:
    """The host vector ``x`` of the format ``dtype`` (bfloat16: int16 bits) as float64, exactly."""
    check_float_array("x", x, 1, dtype)
    if is_device_array(x):
        raise TypeError("x must be a NumPy array, got a numba device array")
    if float_dtype(dtype) != np.int16:
        return x.astype(np.float64)
    return (x.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)


def check_shape(name: str, shape: object) -> tuple[int, ...]:
    """An array's shape: an int or a tuple of ints, each ``>= 0`` (``TypeError`` for anything
    else, ``ValueError`` for a negative length), as a tuple."""
    if isinstance(shape, tuple | list):
        return check_ints(name, shape, 0, minimum_count=0)
    return (check_int(name, shape, 0),)


def filled(shape: Shape, byte: int, dtype: str = "float32") -> Any:
    """A device array of the floating-point format ``dtype`` (a name of
    :data:`gpudl.checks.FLOAT_DTYPES`: float32, float16, or bfloat16 as int16 bits) with
    every byte set to ``byte`` on the device: 0xFF makes every element NaN in each format,
    0 makes it 0.0."""
    shape = check_shape("shape", shape)
    check_int("byte", byte, 0, 255)
    out = cuda.device_array(shape, dtype=float_dtype(dtype))
    if out.size:
        driver.device_memset(out, byte, out.nbytes)
    return out


def poisoned(shape: Shape, dtype: str = "float32") -> Any:
    """A device array of NaN in the floating-point format ``dtype`` (see :func:`filled`)."""
    return filled(shape, 0xFF, dtype)


def zeros(shape: Shape, on_device: bool, dtype: str = "float32") -> Array:
    """An array of zeros of the floating-point format ``dtype``, on the device or on the
    host."""
    if not check_bool("on_device", on_device):
        return np.zeros(check_shape("shape", shape), float_dtype(dtype))
    return filled(shape, 0, dtype)


def to_device(x: Array) -> Array:
    """``x`` itself if it is a device array, else a copy of the NumPy array on the device."""
    if is_device_array(x):
        return x
    if not isinstance(x, np.ndarray):
        raise TypeError(f"x must be a NumPy array or a numba device array, got "
                        f"{type(x).__name__}")
    return cuda.to_device(x)


def returned(out: Array, on_device: bool) -> Array:
    """A kernel's device output as the caller gave its inputs: itself, or a host copy."""
    return out if on_device else out.copy_to_host()


def check_arrays(same_shape: bool = False, dtype: str = "float32",
                 **arrays: tuple[object, int]) -> bool:
    """Check each ``name=(array, ndim)``: of the floating-point format ``dtype``,
    C-contiguous, of that rank (:func:`gpudl.checks.check_float_array`), all on the host or
    all on the device (:func:`gpudl.checks.check_host_or_device`), and with ``same_shape``
    of one shape. Return True if they are on the device."""
    float_dtype(dtype)
    for name, (x, ndim) in arrays.items():
        check_float_array(name, x, ndim, dtype)
    if same_shape:
        shapes = {name: x.shape for name, (x, _) in arrays.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"inputs must have the same shape, got {shapes}")
    return check_host_or_device({name: x for name, (x, _) in arrays.items()})


def launch_into_poisoned(launch: Callable[..., None], inputs: Sequence[Array],
                         shapes: Sequence[Shape], on_device: bool,
                         dtype: str = "float32") -> tuple[Array, ...]:
    """Run ``launch(*inputs, *outputs)`` on the device: host ``inputs`` are copied there
    first, each output is a poisoned array of its shape in ``shapes`` and of the
    floating-point format ``dtype``, and the outputs are returned as the inputs came
    (:func:`returned`). When no output has an element, zeros are returned without a launch
    (a grid of 0 blocks is an error)."""
    if all(math.prod(np.atleast_1d(shape)) == 0 for shape in shapes):
        return tuple(zeros(shape, on_device, dtype) for shape in shapes)
    outputs = [poisoned(shape, dtype) for shape in shapes]  # NaN, set on the device
    launch(*(to_device(x) for x in inputs), *outputs)
    return tuple(returned(out, on_device) for out in outputs)


def launch_in_place(launch: Callable[..., None], arrays: dict[str, Array],
                    outputs: Sequence[str], *scalars: Any) -> None:
    """Run ``launch(*arrays.values(), *scalars)``, which updates some of them in place.
    All device arrays are updated where they are; all NumPy arrays go to the device, and the
    ``outputs`` among them come back into the caller's arrays. ``TypeError`` for a mix
    (:func:`gpudl.checks.check_host_or_device`), ``ValueError`` for arrays of different
    sizes; nothing is launched for empty arrays."""
    on_device = check_host_or_device(arrays)
    sizes = {name: x.size for name, x in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"arrays must have the same size, got {sizes}")
    if next(iter(arrays.values())).size == 0:
        return
    if on_device:
        launch(*arrays.values(), *scalars)
        return
    copies = {name: to_device(x) for name, x in arrays.items()}
    launch(*copies.values(), *scalars)
    for name in outputs:
        copies[name].copy_to_host(arrays[name])
