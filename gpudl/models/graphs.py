"""CUDA graphs: a step of many small kernels captured once and replayed with one launch.

Book section: *Chapter 9, "Launches and CUDA graphs"*.

A decode step of a small model is dozens of tiny kernels, each costing the host tens of
microseconds to launch (Chapter 4, "What a launch costs"), more than the GPU takes to run it.
A CUDA graph records the launches of a step once, with their arguments, and replays them all
from one call: the host's work per step is one launch. :func:`capture` records a step
written as ``step(launch)`` (every kernel through ``launch(kernel, griddim, blockdim, *args)``,
as :meth:`gpudl.models.kernel_decoder.KernelDecoder.step`) into a ``torch.cuda.CUDAGraph``: PyTorch
captures the stream it makes current, and Numba launches on that same stream through
``numba.cuda.external_stream``. What changes between steps (the token, the positions, the
lengths) must live in device memory, since the graph replays the arguments it recorded.

Numba's simulator has no streams to capture and no graphs: there :func:`capture` refuses,
and a step's launches can only be counted (:func:`gpudl.models.kernel_decoder.launches_per_step`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gpudl import backend

# isort: split
from numba import cuda

from gpudl.checks import check_bool, check_callable

__all__ = ["capture", "stream_launch"]

Launch = Callable[..., None]


def stream_launch(stream: Any) -> Launch:
    """A ``launch`` that starts each kernel on ``stream``."""

    def launch(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        kernel[griddim, blockdim, stream](*args)

    return launch


def capture(step: Callable[[Launch], None], warmup: bool = True) -> Any:
    """A ``torch.cuda.CUDAGraph`` holding the launches of ``step(launch)``; its
    ``replay()`` runs them again on PyTorch's current stream. With ``warmup`` the step runs
    once first, eagerly (Numba compiles a kernel at its first launch, which a capture must
    not do): that run changes the step's state like any step. GPU only."""
    check_callable("step", step)
    check_bool("warmup", warmup)
    if backend.is_simulator():
        raise RuntimeError("CUDA graphs need a GPU: Numba's simulator runs each launch at "
                           "once as Python threads and has no streams to capture")
    import torch

    if warmup:
        step(lambda kernel, griddim, blockdim, *args: kernel[griddim, blockdim](*args))
        cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        stream = cuda.external_stream(torch.cuda.current_stream().cuda_stream)
        step(stream_launch(stream))
    return graph
