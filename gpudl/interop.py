"""Run the book's Numba kernels on PyTorch tensors in place, without copies.

Book section: Chapter 4, "Kernels on a framework's tensors" (the optimizers) and Chapter 5
(the gradient-bucket kernel).

On a GPU a CUDA tensor exports ``__cuda_array_interface__``, and
:func:`numba.cuda.as_cuda_array` wraps the same device memory. The simulator has no device
memory: there a CPU tensor's memory (``tensor.numpy()`` shares it) is wrapped as a simulated
device array, which a launch passes to the kernel as it is, as a GPU passes a pointer. Either
way the kernel updates the tensor itself, as ``torch.optim`` does, and two arrays of one
memory are one memory on both backends. (A NumPy array given to a kernel would instead be
copied in and out by the simulator: :mod:`gpudl.aliasing`.)
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import torch
from numba import cuda

__all__ = ["KERNEL_DTYPES", "as_kernel_array", "check_device", "tensor_device"]

#: Tensors of these dtypes can be handed to a kernel. bfloat16 has no NumPy dtype, so
#: kernels see a bfloat16 tensor through ``tensor.view(torch.int16)`` (its bit pattern).
KERNEL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.int16, torch.int32,
                 torch.int64)


def tensor_device() -> torch.device:
    """Where tensors that kernels work on must live: ``cuda`` on a GPU, ``cpu`` simulated."""
    return torch.device("cpu" if backend.is_simulator() else "cuda")


def check_device(tensor: torch.Tensor, name: str = "tensor") -> None:
    """``ValueError`` naming ``name`` unless ``tensor`` is on :func:`tensor_device`."""
    if tensor.device.type != tensor_device().type:
        raise ValueError(f"{name} must be on {tensor_device().type} for the "
                         f"{backend.name()} backend, got a tensor on {tensor.device}")


def as_kernel_array(tensor: torch.Tensor, name: str = "tensor") -> object:
    """``tensor``'s own memory as an array a Numba kernel can write (no copy).

    The tensor must be contiguous, of a dtype in :data:`KERNEL_DTYPES`, and on
    :func:`tensor_device`; anything else is a ``TypeError`` or ``ValueError`` naming ``name``
    (a silent copy would make an in-place update write to the copy)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in KERNEL_DTYPES:
        raise TypeError(f"{name} must have a dtype in {[str(d) for d in KERNEL_DTYPES]}, got "
                        f"{tensor.dtype} (view bfloat16 as torch.int16)")
    check_device(tensor, name)
    if not tensor.is_contiguous():
        raise ValueError(f"{name} must be contiguous, got strides {tensor.stride()}")
    if backend.is_simulator():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(tensor.detach().numpy())
    return cuda.as_cuda_array(tensor.detach())
