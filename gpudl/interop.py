"""Run the book's Numba kernels on PyTorch tensors in place, without copies.

Book section: appendix D, "Torch tensors as kernel arrays" (used by Chapter 4's optimizers,
Chapter 5's gradient-bucket kernel and Chapter 6's fused bias and GeLU).

On a GPU a CUDA tensor exports ``__cuda_array_interface__``, and
:func:`numba.cuda.as_cuda_array` wraps the same device memory. The simulator has no device
memory: there a CPU tensor's memory (``tensor.numpy()`` shares it) is wrapped as a simulated
device array, which a launch passes to the kernel as it is, as a GPU passes a pointer. Either
way the kernel updates the tensor itself, as ``torch.optim`` does, and two arrays of one
memory are one memory on both backends. (A NumPy array given to a kernel would instead be
copied in and out by the simulator: :mod:`gpudl.aliasing`.)

:func:`as_tensor` goes the other way, for Triton's kernels (:mod:`gpudl.kernels.tiles`), which
take torch tensors: a numba device array's memory as a tensor, a CUDA tensor on a GPU and, on
the simulator, a CPU tensor sharing the simulated array's NumPy memory (Triton's interpreter
runs on CPU tensors), so that a Triton kernel writes the array it is given, as a Numba kernel
does.

Making that array costs host time at every call (on a GPU, numba builds a new device array and
its type from the tensor's ``__cuda_array_interface__``). :class:`KernelArrays` keeps the
arrays of the tensors a program passes again and again (an optimizer's parameters, gradients
and moments), keyed by what an array describes: the data pointer, shape and dtype.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict

from gpudl import backend
from gpudl.checks import check_bool, check_int, check_tensor, is_device_array

# isort: split
import numpy as np
import torch
from numba import cuda

__all__ = ["KERNEL_DTYPES", "KernelArrays", "as_kernel_array", "as_tensor", "check_device",
           "tensor_device"]

#: Tensors of these dtypes can be handed to a kernel. bfloat16 has no NumPy dtype, so
#: kernels see a bfloat16 tensor through ``tensor.view(torch.int16)`` (its bit pattern).
KERNEL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int16, torch.int32,
                 torch.int64)


def tensor_device() -> torch.device:
    """Where tensors that kernels work on must live: ``cuda`` on a GPU, ``cpu`` simulated."""
    return torch.device("cpu" if backend.is_simulator() else "cuda")


def check_device(tensor: torch.Tensor, name: str = "tensor") -> None:
    """``ValueError`` naming ``name`` unless ``tensor`` is on :func:`tensor_device`
    (``TypeError`` if it is not a tensor)."""
    check_tensor(name, tensor)
    if tensor.device.type != tensor_device().type:
        raise ValueError(f"{name} must be on {tensor_device().type} for the "
                         f"{backend.name()} backend, got a tensor on {tensor.device}")


def as_kernel_array(tensor: torch.Tensor, name: str = "tensor", *, owned: bool = True) -> object:
    """``tensor``'s own memory as an array a Numba kernel can write (no copy).

    The tensor must be contiguous, of a dtype in :data:`KERNEL_DTYPES`, and on
    :func:`tensor_device`; anything else is a ``TypeError`` or ``ValueError`` naming ``name``
    (a silent copy would make an in-place update write to the copy). With ``owned=False`` the
    array does not keep the tensor alive: it describes the memory at the tensor's address, and
    must only be used while a tensor holds that memory (:class:`KernelArrays` ensures it)."""
    check_tensor(name, tensor)
    check_bool("owned", owned)
    if tensor.dtype not in KERNEL_DTYPES:
        raise TypeError(f"{name} must have a dtype in {[str(d) for d in KERNEL_DTYPES]}, got "
                        f"{tensor.dtype} (view bfloat16 as torch.int16)")
    check_device(tensor, name)
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tensor.stride()}")
    if backend.is_simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        if owned:
            return FakeCUDAArray(tensor.detach().numpy())
        memory = (ctypes.c_byte * (tensor.numel() * tensor.element_size())).from_address(
            tensor.data_ptr())
        dtype = np.dtype(str(tensor.dtype).removeprefix("torch."))
        return FakeCUDAArray(np.frombuffer(memory, dtype=dtype).reshape(tuple(tensor.shape)))
    if owned:
        return cuda.as_cuda_array(tensor.detach())
    return cuda.from_cuda_array_interface(tensor.detach().__cuda_array_interface__, owner=None,
                                          sync=False)


def as_tensor(array: object, name: str = "array") -> torch.Tensor:
    """The memory of the numba device array ``array`` as a torch tensor (no copy): on a GPU a
    CUDA tensor (through ``__cuda_array_interface__``), on the simulator a CPU tensor of the
    simulated array's NumPy memory. ``TypeError`` naming ``name`` for anything else (a NumPy
    array included: a kernel's arrays are on the device)."""
    if not is_device_array(array):
        raise TypeError(f"{name} must be a numba device array, got {type(array).__name__}")
    if backend.is_simulator():
        return torch.from_numpy(array._ary)
    return torch.as_tensor(array, device="cuda")


class KernelArrays:
    """Kernel arrays of tensors, made once per memory and kept: ``get(tensor)`` returns the
    array made for the last tensor with the same data pointer, shape, dtype and device, and
    makes one (:func:`as_kernel_array`, counted in ``conversions``) only for a memory it
    has not seen. The arrays do not keep the tensors alive (a key names memory a live tensor
    holds whenever it is looked up), and the least recently used are dropped past
    ``capacity``."""

    def __init__(self, capacity: int = 1024) -> None:
        self.capacity = check_int("capacity", capacity, 1)
        self.conversions = 0
        self._arrays: OrderedDict[tuple, object] = OrderedDict()

    def get(self, tensor: torch.Tensor, name: str = "tensor") -> object:
        """The kernel array of ``tensor``'s memory (checked as :func:`as_kernel_array`)."""
        check_tensor(name, tensor)
        key = (tensor.data_ptr(), tuple(tensor.shape), tensor.dtype, tensor.device,
               tensor.is_contiguous())
        array = self._arrays.get(key)
        if array is None:
            array = self._arrays[key] = as_kernel_array(tensor, name, owned=False)
            self.conversions += 1
            while len(self._arrays) > self.capacity:
                self._arrays.popitem(last=False)
        else:
            self._arrays.move_to_end(key)
        return array
