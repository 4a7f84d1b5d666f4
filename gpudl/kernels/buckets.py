"""Gradient buckets: copy many gradient tensors into one flat buffer, scaled by 1/N, and back.

Book section: *Chapter 5, "Buckets by hand"*. Data-parallel training all-reduces its gradients;
one all-reduce per tensor pays the collective's fixed latency once per tensor, so the gradients
are first packed into a few large flat **buckets** (as ``DistributedDataParallel`` does), each
all-reduced at once, then unpacked. Packing also multiplies by ``1/N``, so that the all-reduced
sum is the average of the ranks' gradients.

:func:`pack` and :func:`unpack` work in place on 1-D float32 arrays: host NumPy arrays, or
numba device arrays, among them the memory of torch tensors reached through
``gpudl.interop.as_kernel_array``. The variants differ in how many launches a bucket
takes; both move each byte once, so both are bound by memory bandwidth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_choice,
    check_equal,
    check_float32_array,
    check_host_or_device,
    check_ints,
    check_real,
)
from gpudl.kernels.grid import blocks_to_cover, grid_stride_blocks

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "MAX_TENSORS_PER_LAUNCH",
    "THREADS_PER_BLOCK",
    "VARIANTS",
    "offsets",
    "pack",
    "reference_pack",
    "reference_unpack",
    "unpack",
    "v1_per_tensor",
    "v2_multi_tensor",
]

#: Threads per block of both variants (32 on the simulator, where every thread is a Python
#: thread).
THREADS_PER_BLOCK = backend.pick(gpu=256, sim=32)

#: Most blocks in a ``v2_multi_tensor`` launch: one wave of resident blocks on a GPU (see
#: :mod:`gpudl.kernels.elementwise`), 2 on the simulator, enough to cross block boundaries.
_MAX_BLOCKS = backend.pick(gpu=None, sim=2)

#: Tensors per launch in ``v2_multi_tensor``. A kernel's arguments travel in a parameter
#: block of at most 4 KB (before CUDA 12.1); a 1-D array argument takes 7 words (56 bytes),
#: so 32 tensors (1,792 bytes) and their 33 offsets (264 bytes) stay well inside it.
MAX_TENSORS_PER_LAUNCH = 32


def offsets(sizes: Sequence[int]) -> list[int]:
    """Where each tensor starts in the bucket, and the bucket's length last: the running sum
    ``[0, s0, s0 + s1, ...]`` of ``sizes`` (ints >= 0)."""
    out = [0]
    for size in check_ints("sizes", sizes, 0, minimum_count=0):
        out.append(out[-1] + size)
    return out


def reference_pack(grads: Sequence[np.ndarray], scale: float) -> np.ndarray:
    """The bucket in float64: the gradients one after another, each times ``scale``."""
    check_real("scale", scale)
    if isinstance(grads, str | bytes) or not isinstance(grads, Sequence):
        raise TypeError(f"grads must be a list of arrays, got {type(grads).__name__}")
    for i, g in enumerate(grads):
        check_array(f"grads[{i}]", g, 1)
    if not grads:
        return np.zeros(0)
    return np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads]) * scale


def reference_unpack(bucket: np.ndarray, sizes: Sequence[int]) -> list[np.ndarray]:
    """The pieces of ``bucket`` of lengths ``sizes``, in order (copies, float64)."""
    bounds = offsets(sizes)
    check_equal("bucket.size", check_array("bucket", bucket, 1).size, "sum(sizes)", bounds[-1])
    flat = np.asarray(bucket, dtype=np.float64)
    return [flat[start:end].copy() for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


# v1_per_tensor: one launch per gradient tensor, one thread per element, each thread copying
# its element to (or from) the tensor's place in the bucket. Simple, and every warp's loads
# and stores are coalesced; but a model has many small tensors (a bias has a few hundred
# elements), and each launch costs several microseconds of CPU time and a grid of its own,
# mostly idle threads: for small tensors the launches, not the bytes, set the time.
@registry.kernel("buckets_v1_pack", "void(float32[::1], float32[::1], int64, float32)",
                 reference="gpudl.kernels.buckets.reference_pack")
@cuda.jit
def _pack_one(grad, bucket, start, scale):
    i = cuda.grid(1)
    if i < grad.size:
        bucket[start + i] = grad[i] * scale


@registry.kernel("buckets_v1_unpack", "void(float32[::1], float32[::1], int64)",
                 reference="gpudl.kernels.buckets.reference_unpack")
@cuda.jit
def _unpack_one(bucket, grad, start):
    i = cuda.grid(1)
    if i < grad.size:
        grad[i] = bucket[start + i]


@registry.variant("buckets", "v1_per_tensor", kernels=("buckets_v1_pack", "buckets_v1_unpack"),
                  bytes_per_element=8)
def v1_per_tensor(grads: Sequence[Array], bucket: Array, scale: float, to_bucket: bool,
                  stream: Any = 0) -> None:
    """Copy between ``grads`` and ``bucket`` with one launch per non-empty tensor."""
    starts = offsets([g.size for g in grads])
    for grad, start in zip(grads, starts, strict=False):
        if grad.size == 0:
            continue
        blocks = blocks_to_cover(grad.size, THREADS_PER_BLOCK)
        if to_bucket:
            _pack_one[blocks, THREADS_PER_BLOCK, stream](grad, bucket, start, np.float32(scale))
        else:
            _unpack_one[blocks, THREADS_PER_BLOCK, stream](bucket, grad, start)


@cuda.jit(device=True)
def _tensor_of(starts, j):
    """The tensor that holds bucket element ``j``: the last ``t`` with ``starts[t] <= j``
    (binary search; empty tensors share their start with the next one and are skipped)."""
    lo = 0
    hi = len(starts) - 2
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if starts[mid] <= j:
            lo = mid
        else:
            hi = mid - 1
    return lo


# v2_multi_tensor: one launch for up to MAX_TENSORS_PER_LAUNCH tensors, which the kernel
# receives as a tuple of arrays with their offsets in the bucket ("multi-tensor apply", as in
# apex and PyTorch's foreach kernels). A fixed grid walks the bucket with a grid-stride loop;
# each thread finds the tensor of its element by a binary search over the offsets (5 steps
# for 32 tensors). Consecutive threads take consecutive elements, so loads and stores stay
# coalesced across tensor boundaries. One launch instead of one per tensor: for a bucket of
# many small tensors the launch overhead, which dominates v1, is paid once.
@registry.kernel("buckets_v2_pack",
                 "void(UniTuple(float32[::1], 1), UniTuple(int64, 2), float32[::1], float32)",
                 "void(UniTuple(float32[::1], 2), UniTuple(int64, 3), float32[::1], float32)",
                 "void(UniTuple(float32[::1], 32), UniTuple(int64, 33), float32[::1], float32)",
                 "void(UniTuple(float32[::1], 4), UniTuple(int64, 5), float32[::1], float32)",
                 "void(UniTuple(float32[::1], 5), UniTuple(int64, 6), float32[::1], float32)",
                 "void(UniTuple(float32[::1], 7), UniTuple(int64, 8), float32[::1], float32)",
                 reference="gpudl.kernels.buckets.reference_pack")
@cuda.jit
def _pack_multi(grads, starts, bucket, scale):
    first = starts[0]
    for j in range(first + cuda.grid(1), starts[len(starts) - 1], cuda.gridsize(1)):
        t = _tensor_of(starts, j)
        grad = grads[t]
        bucket[j] = grad[j - starts[t]] * scale


@registry.kernel("buckets_v2_unpack",
                 "void(float32[::1], UniTuple(int64, 2), UniTuple(float32[::1], 1))",
                 "void(float32[::1], UniTuple(int64, 3), UniTuple(float32[::1], 2))",
                 "void(float32[::1], UniTuple(int64, 5), UniTuple(float32[::1], 4))",
                 "void(float32[::1], UniTuple(int64, 6), UniTuple(float32[::1], 5))",
                 "void(float32[::1], UniTuple(int64, 8), UniTuple(float32[::1], 7))",
                 reference="gpudl.kernels.buckets.reference_unpack")
@cuda.jit
def _unpack_multi(bucket, starts, grads):
    first = starts[0]
    for j in range(first + cuda.grid(1), starts[len(starts) - 1], cuda.gridsize(1)):
        t = _tensor_of(starts, j)
        grad = grads[t]
        grad[j - starts[t]] = bucket[j]


@registry.variant("buckets", "v2_multi_tensor", kernels=("buckets_v2_pack", "buckets_v2_unpack"),
                  bytes_per_element=8)
def v2_multi_tensor(grads: Sequence[Array], bucket: Array, scale: float, to_bucket: bool,
                    stream: Any = 0) -> None:
    """Copy between ``grads`` and ``bucket`` with one launch per group of up to
    :data:`MAX_TENSORS_PER_LAUNCH` tensors."""
    starts = offsets([g.size for g in grads])
    for first in range(0, len(grads), MAX_TENSORS_PER_LAUNCH):
        group = tuple(grads[first:first + MAX_TENSORS_PER_LAUNCH])
        group_starts = tuple(starts[first:first + len(group) + 1])
        n = group_starts[-1] - group_starts[0]
        if n == 0:
            continue
        blocks = grid_stride_blocks(n, THREADS_PER_BLOCK, maximum=_MAX_BLOCKS)
        if to_bucket:
            _pack_multi[blocks, THREADS_PER_BLOCK, stream](group, group_starts, bucket,
                                                           np.float32(scale))
        else:
            _unpack_multi[blocks, THREADS_PER_BLOCK, stream](bucket, group_starts, group)


#: Key -> launcher(grads, bucket, scale, to_bucket, stream).
VARIANTS: dict[str, Callable[..., None]] = registry.variants("buckets")


def _check(grads: Sequence[Array], bucket: Array, variant: str) -> None:
    check_choice("variant", variant, VARIANTS)
    if isinstance(grads, (str, bytes)) or not isinstance(grads, Sequence):
        raise TypeError(f"grads must be a list of arrays, got {type(grads).__name__}")
    if not grads:
        raise ValueError("grads must list at least one gradient array, got none")
    arrays = {"bucket": bucket} | {f"grads[{i}]": grad for i, grad in enumerate(grads)}
    for name, x in arrays.items():
        check_float32_array(name, x, 1)
    check_host_or_device(arrays)
    total = sum(g.size for g in grads)
    if bucket.size != total:
        raise ValueError(f"bucket must hold exactly the {total} elements of grads, "
                         f"got {bucket.size}")


def pack(grads: Sequence[Array], bucket: Array, scale: float = 1.0,
         variant: str = "v2_multi_tensor", stream: Any = 0) -> None:
    """Write ``grads`` one after another into ``bucket``, each element times ``scale``.

    ``grads`` are 1-D float32 arrays and ``bucket`` a 1-D float32 array of their total
    length, all on the host or all on the device; ``bucket`` is overwritten in place. With
    ``scale = 1 / N`` an all-reduce (sum) of the bucket leaves the average of the ranks'
    gradients. ``stream`` is the CUDA stream to launch on (``0``: the default stream).
    """
    _check(grads, bucket, variant)
    scale = check_real("scale", scale, finite=True)
    VARIANTS[variant](grads, bucket, scale, True, stream)


def unpack(bucket: Array, grads: Sequence[Array], variant: str = "v2_multi_tensor",
           stream: Any = 0) -> None:
    """Copy the pieces of ``bucket`` back into ``grads`` (in place), the inverse of
    :func:`pack` with ``scale = 1``; the same rules for the arrays."""
    _check(grads, bucket, variant)
    VARIANTS[variant](grads, bucket, 1.0, False, stream)
