"""16-byte loads and stores: four float32 values in one instruction, ``ld.global.v4.f32``.

Book section: Chapter 2, "Bytes in flight" (the copy and vector-add variants that use them).

A GPU moves a vector of four float32 values (16 bytes) with one load or store instruction
when the address is a multiple of 16 bytes. Numba has no such operation for arrays, and it
will not fuse four neighbouring scalar loads into one, because it cannot prove the address
aligned. :func:`load4` and :func:`store4` say it: on a GPU they are intrinsics that compile
to one LLVM load or store of a ``<4 x float>`` with ``align 16`` (``ld.global.v4.f32`` and
``st.global.v4.f32`` in the PTX, as ``python -m gpudl ptx copy_v3_vector4`` shows). A
misaligned vector access is an error on a GPU (``CUDA_ERROR_MISALIGNED_ADDRESS``), so the
launchers check :func:`check_aligned` first.

The simulator runs kernels as Python and cannot run an intrinsic (it raises
``NotImplementedError``), so on the simulator the names are bound to plain functions with the
same meaning: four consecutive elements as a tuple, refused (``ValueError``) unless the first
is on a 16-byte boundary, as the GPU would refuse it.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend

# isort: split
import numpy as np

__all__ = ["WIDTH", "address", "check_aligned", "load4", "store4"]

#: Elements per vector access (4 float32 = 16 bytes).
WIDTH = 4
_ALIGN = 16


def address(arr: Any) -> int | None:
    """The address of element 0 of a NumPy array, a numba device array (real or simulated,
    also as a simulated kernel sees it); None for anything else (a traced array)."""
    inner = getattr(arr, "_item", arr)  # the simulator's in-kernel wrapper
    inner = getattr(inner, "_ary", inner)  # a simulated device array's NumPy memory
    if isinstance(inner, np.ndarray):
        return inner.ctypes.data
    pointer = getattr(arr, "device_ctypes_pointer", None)  # a real device array
    return None if pointer is None else (pointer.value or 0)


def check_aligned(name: str, arr: Any) -> None:
    """``ValueError`` naming ``name`` unless ``arr`` starts on a 16-byte boundary (every
    allocation does; a view that starts 1 to 3 float32 elements in does not)."""
    where = address(arr)
    if where is not None and where % _ALIGN:
        raise ValueError(f"{name} must start on a 16-byte boundary for 16-byte loads and "
                         f"stores; it starts {where % _ALIGN} bytes past one (a view into an "
                         "array?): use a variant with scalar loads")


def _check_vector_index(arr: Any, i: int) -> None:
    where = address(arr)
    offset = int(i) * 4 + (0 if where is None else where)
    if int(i) % WIDTH or offset % _ALIGN:
        raise ValueError(f"a 16-byte access at element {int(i)} is misaligned (it starts "
                         f"{offset % _ALIGN} bytes past a 16-byte boundary); on a GPU this "
                         "is CUDA_ERROR_MISALIGNED_ADDRESS")


def _sim_load4(arr: Any, i: int) -> tuple:
    """``(arr[i], arr[i + 1], arr[i + 2], arr[i + 3])``, ``i`` on a 16-byte boundary."""
    _check_vector_index(arr, i)
    return arr[i], arr[i + 1], arr[i + 2], arr[i + 3]


def _sim_store4(arr: Any, i: int, values: tuple) -> None:
    """``arr[i:i + 4] = values``, ``i`` on a 16-byte boundary."""
    _check_vector_index(arr, i)
    for k in range(WIDTH):
        arr[i + k] = values[k]


def _intrinsics() -> tuple[Any, Any]:
    """``load4`` and ``store4`` as numba intrinsics (the CUDA target only)."""
    from llvmlite import ir
    from numba import types
    from numba.cuda.extending import intrinsic

    vector = ir.VectorType(ir.FloatType(), WIDTH)

    def vector_pointer(context, builder, array_type, array, index_type, index):
        data = context.make_array(array_type)(context, builder, array).data
        i = context.cast(builder, index, index_type, types.uint64)
        return builder.bitcast(builder.gep(data, [i]), vector.as_pointer())

    def check(array, index) -> None:
        if not (isinstance(array, types.Array) and array.dtype == types.float32
                and array.ndim == 1 and isinstance(index, types.Integer)):
            raise TypeError(f"a 16-byte access needs a 1-D float32 array and an integer "
                            f"index, got {array} and {index}")

    @intrinsic
    def load4(typingctx, array, index):
        check(array, index)
        sig = types.UniTuple(types.float32, WIDTH)(array, index)

        def codegen(context, builder, sig, args):
            pointer = vector_pointer(context, builder, sig.args[0], args[0], sig.args[1],
                                     args[1])
            loaded = builder.load(pointer, align=_ALIGN)
            lanes = [builder.extract_element(loaded, ir.Constant(ir.IntType(32), k))
                     for k in range(WIDTH)]
            return context.make_tuple(builder, sig.return_type, lanes)

        return sig, codegen

    @intrinsic
    def store4(typingctx, array, index, values):
        check(array, index)
        sig = types.void(array, index, types.UniTuple(types.float32, WIDTH))

        def codegen(context, builder, sig, args):
            pointer = vector_pointer(context, builder, sig.args[0], args[0], sig.args[1],
                                     args[1])
            packed = ir.Constant(vector, ir.Undefined)
            for k in range(WIDTH):
                lane = builder.extract_value(args[2], k)
                packed = builder.insert_element(packed, lane, ir.Constant(ir.IntType(32), k))
            builder.store(packed, pointer, align=_ALIGN)
            return context.get_dummy_value()

        return sig, codegen

    return load4, store4


if backend.is_simulator():
    load4, store4 = _sim_load4, _sim_store4
else:
    load4, store4 = _intrinsics()
