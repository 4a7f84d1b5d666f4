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

from gpudl.checks import check_bool, check_float32_array, check_int, check_ints, is_device_array

__all__ = [
    "EPS32",
    "check_arrays",
    "check_shape",
    "filled",
    "launch_in_place",
    "launch_into_poisoned",
    "poisoned",
    "returned",
    "to_device",
    "zeros",
]

#: A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any
Shape = int | tuple[int, ...]
#: The machine epsilon of float32, 2**-23 (twice the unit roundoff), the unit in which the
#: kernels' error bounds are written.
EPS32 = float(np.finfo(np.float32).eps)


def check_shape(name: str, shape: object) -> tuple[int, ...]:
    """An array's shape: an int or a tuple of ints, each ``>= 0`` (``TypeError`` for anything
    else, ``ValueError`` for a negative length), as a tuple."""
    if isinstance(shape, tuple | list):
        return check_ints(name, shape, 0, minimum_count=0)
    return (check_int(name, shape, 0),)


def filled(shape: Shape, byte: int) -> Any:
    """A float32 device array with every byte set to ``byte`` on the device: 0xFF makes
    every element NaN, 0 makes it 0.0."""
    shape = check_shape("shape", shape)
    check_int("byte", byte, 0, 255)
    out = cuda.device_array(shape, dtype=np.float32)
    if out.size:
        driver.device_memset(out, byte, out.nbytes)
    return out


def poisoned(shape: Shape) -> Any:
    """A float32 device array of NaN (see :func:`filled`)."""
    return filled(shape, 0xFF)


def zeros(shape: Shape, on_device: bool) -> Array:
    """A float32 array of zeros, on the device or on the host."""
    if not check_bool("on_device", on_device):
        return np.zeros(check_shape("shape", shape), np.float32)
    return filled(shape, 0)


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


def check_arrays(same_shape: bool = False, **arrays: tuple[object, int]) -> bool:
    """Check each ``name=(array, ndim)``: float32, C-contiguous, of that rank
    (:func:`gpudl.checks.check_float32_array`), all on the host or all on the device, and
    with ``same_shape`` of one shape. Return True if they are on the device."""
    kinds = {check_float32_array(name, x, ndim) for name, (x, ndim) in arrays.items()}
    if same_shape:
        shapes = {name: x.shape for name, (x, _) in arrays.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError(f"inputs must have the same shape, got {shapes}")
    if len(kinds) > 1:
        raise TypeError("inputs must be all host arrays or all device arrays, got a mix")
    return kinds == {True}


def launch_into_poisoned(launch: Callable[..., None], inputs: Sequence[Array],
                         shapes: Sequence[Shape], on_device: bool) -> tuple[Array, ...]:
    """Run ``launch(*inputs, *outputs)`` on the device: host ``inputs`` are copied there
    first, each output is a poisoned array of its shape in ``shapes``, and the outputs are
    returned as the inputs came (:func:`returned`). When no output has an element, zeros
    are returned without a launch (a grid of 0 blocks is an error)."""
    if all(math.prod(np.atleast_1d(shape)) == 0 for shape in shapes):
        return tuple(zeros(shape, on_device) for shape in shapes)
    outputs = [poisoned(shape) for shape in shapes]  # NaN, set on the device: no host copy
    launch(*(to_device(x) for x in inputs), *outputs)
    return tuple(returned(out, on_device) for out in outputs)


def launch_in_place(launch: Callable[..., None], arrays: dict[str, Array],
                    outputs: Sequence[str], kinds: set[bool], *scalars: Any) -> None:
    """Run ``launch(*arrays.values(), *scalars)``, which updates some of them in place.
    ``kinds`` holds each array's "on the device?" (from the checks): all device arrays are
    updated where they are; all NumPy arrays go to the device, and the ``outputs`` among them
    come back into the caller's arrays. ``TypeError`` for a mix, ``ValueError`` for arrays of
    different sizes; nothing is launched for empty arrays."""
    if len(kinds) > 1:
        raise TypeError("arrays must be all NumPy arrays or all device arrays, got a mix")
    sizes = {name: x.size for name, x in arrays.items()}
    if len(set(sizes.values())) > 1:
        raise ValueError(f"arrays must have the same size, got {sizes}")
    if next(iter(arrays.values())).size == 0:
        return
    if kinds == {True}:
        launch(*arrays.values(), *scalars)
        return
    on_device = {name: to_device(x) for name, x in arrays.items()}
    launch(*on_device.values(), *scalars)
    for name in outputs:
        on_device[name].copy_to_host(arrays[name])
