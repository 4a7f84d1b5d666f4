"""SAXPY in chunks on several CUDA streams, so that one chunk's copies can overlap another
chunk's kernel.

Book section: Chapter 1, "Streams: a copy and a kernel at once" (and the overlap of
communication with computation in Chapters 5 and 6, which rests on the same queues).

A stream is a queue of work on the GPU: its copies and kernels run in the order they were
issued, while the work of different streams may run at the same time, a copy engine moving one
chunk's data while the SMs compute on another's. :func:`saxpy_streamed` issues each chunk's
upload, kernel and download on one stream, the chunks taking the streams in turn, from page-
locked ("pinned") host memory, which the copy engines read and write without the CPU. On
Numba's simulator streams exist but every operation runs to completion when it is issued: the
result is checked there, and the overlap happens only on a GPU.
"""

from __future__ import annotations

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda
from numba.cuda.cudadrv import driver

from gpudl.checks import (
    check_equal,
    check_float32_array,
    check_instance,
    check_int,
    check_real,
)
from gpudl.kernels.elementwise import saxpy_v1_naive
from gpudl.kernels.grid import blocks_to_cover, check_threads_per_block

__all__ = ["chunk_bounds", "pinned_copy", "saxpy_streamed"]


def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of ``chunks`` consecutive slices of ``range(n)`` as even as possible
    (the first ``n % chunks`` one element longer), leaving out empty ones."""
    check_int("n", n, 0)
    check_int("chunks", chunks, 1)
    size, extra = divmod(n, chunks)
    bounds, start = [], 0
    for k in range(chunks):
        stop = start + size + (k < extra)
        if stop > start:
            bounds.append((start, stop))
        start = stop
    return bounds


def pinned_copy(a: np.ndarray) -> np.ndarray:
    """A copy of the host array ``a`` in page-locked memory (``cuda.pinned_array``)."""
    check_instance("a", a, np.ndarray)
    out = cuda.pinned_array(a.shape, dtype=a.dtype)
    out[...] = a
    return out


def saxpy_streamed(alpha: float, x: np.ndarray, y: np.ndarray, chunks: int = 8,
                   streams: int = 2, threads_per_block: int = 256) -> np.ndarray:
    """``alpha * x + y`` for float32 host vectors, computed in ``chunks`` chunks on
    ``streams`` CUDA streams: each chunk's upload, ``saxpy_v1_naive`` and download go on the
    stream ``k % streams``; the result (a pinned host array) is returned once every stream
    has finished. Equal, bit for bit, to :func:`gpudl.kernels.elementwise.saxpy`."""
    check_real("alpha", alpha)
    for name, a in (("x", x), ("y", y)):
        if check_float32_array(name, a, 1):
            raise TypeError(f"{name} must be a host NumPy array (the copies are the point), "
                            "got a device array")
    check_equal("x.size", x.size, "y.size", y.size)
    check_int("chunks", chunks, 1)
    check_int("streams", streams, 1)
    check_threads_per_block(threads_per_block)
    if x.size == 0:
        return np.empty(0, dtype=np.float32)
    x_host, y_host = pinned_copy(x), pinned_copy(y)  # a program would allocate them pinned
    out = pinned_copy(np.full(x.size, np.nan, dtype=np.float32))
    queues = [cuda.stream() for _ in range(streams)]
    bounds = chunk_bounds(x.size, chunks)
    # every device buffer is allocated before any work is queued: an allocation may wait for
    # the GPU, and the queues must not wait for anything but their own work
    buffers = [[cuda.device_array(stop - start, dtype=np.float32) for _ in range(3)]
               for start, stop in bounds]
    for k, (start, stop) in enumerate(bounds):
        stream, (x_dev, y_dev, out_dev) = queues[k % streams], buffers[k]
        x_dev.copy_to_device(x_host[start:stop], stream=stream)
        y_dev.copy_to_device(y_host[start:stop], stream=stream)
        driver.device_memset(out_dev, 0xFF, out_dev.nbytes, stream=stream)  # NaN: poisoned
        blocks = blocks_to_cover(stop - start, threads_per_block)
        saxpy_v1_naive[blocks, threads_per_block, stream](np.float32(alpha), x_dev, y_dev,
                                                        out_dev)
        out_dev.copy_to_host(out[start:stop], stream=stream)
    for stream in queues:
        stream.synchronize()
    return out
