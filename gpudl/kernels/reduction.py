"""Sum reductions, from one atomic per element to one warp-shuffle pass.

Book section: Chapter 2, "Reductions, step by step", after Mark Harris, "Optimizing Parallel
Reduction in CUDA" (NVIDIA, 2007); Chapter 10, "Reductions inside a block" (v8, whose kernel is
:mod:`gpudl.kernels.tiles.reduction`'s).

Every variant sums a float32 vector into one float32 value, entirely on the device, and
accumulates in float32 as real kernels do. The variants that write one partial sum per block
(v2 to v5) launch again on those partials until a single block writes the result; their
partials arrays are poisoned with NaN first, so a block that never writes turns the sum into
NaN. The atomic variants (v1, v6) add into a zeroed accumulator: a block that never adds
shows up only as a wrong sum, which the tests catch with the variant's error bound.

How accurate each variant's sum is: :mod:`gpudl.kernels.reduction_error`.

NaN in the input gives NaN, ``inf - inf`` gives NaN and a lone ``inf`` gives ``inf``, as in
NumPy; a sum past the float32 range overflows to ``inf``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

from gpudl import backend

# isort: split
import numpy as np
from numba import cuda, float32, int32, uint64
from numba.cuda.cudadrv import driver

from gpudl import registry
from gpudl.checks import check_float32_array
from gpudl.kernels.arrays import Array, poisoned, to_device
from gpudl.kernels.grid import blocks_to_cover, grid_stride_blocks
from gpudl.kernels.tiles import reduction as tiled

__all__ = [
    "THREADS_PER_BLOCK",
    "VARIANTS",
    "reference_sum",
    "v1_atomic",
    "v2_interleaved",
    "v3_sequential",
    "v4_first_add_grid_stride",
    "v5_warp_shuffle",
    "v6_one_pass_atomic",
    "v7_last_block",
    "LOADS",
    "ACCUMULATORS",
    "atomic_pass",
    "grid_stride_passes",
    "check_variant",
    "reduce_sum",
    "tree_passes",
    "workspace",
    "zero_accumulator",
]

#: Threads per block. The trees halve the number of active threads at each step, so this
#: must be a power of two, and v5/v6 need at least two warps (64) before the warp stage.
THREADS_PER_BLOCK = TPB = 256
if TPB & (TPB - 1) or not 64 <= TPB <= 1024:
    raise ValueError(f"THREADS_PER_BLOCK must be a power of two in [64, 1024], got {TPB}")
LOG2_TPB = TPB.bit_length() - 1  # levels of a block's tree: 8 for 256 threads
WARP = backend.WARP_SIZE
FULL_MASK = 0xFFFFFFFF


def reference_sum(x: Array) -> float:
    """The exact sum of ``x``, correctly rounded to float64 (``math.fsum``); with NaN or
    infinities in ``x``, what NumPy gives (NaN, or the infinity)."""
    on_device = check_float32_array("x", x, 1)
    host = (x.copy_to_host() if on_device else x).astype(np.float64)
    if not np.isfinite(host).all():
        with np.errstate(invalid="ignore"):  # inf - inf is NaN, as intended
            return float(host.sum())
    return math.fsum(host)


# ------------------------------------------------------------------------------------------
# The kernels, in the order of the story
# ------------------------------------------------------------------------------------------


# v1_atomic: one thread per element, each adding its element straight into one global
# accumulator. Correct, but every addition is a read-modify-write of the same address, which
# the memory system serialises: n additions one after another, however many threads wait.
@registry.kernel("reduce_v1_atomic", "void(float32[::1], float32[::1])", threads_per_block=TPB,
                 reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v1_atomic(x, out):
    i = cuda.grid(1)
    if i < x.size:
        cuda.atomic.add(out, 0, x[i])


# v2_interleaved: each block loads 256 elements into shared memory and sums them as a tree
# in 8 steps, so the additions of a step run in parallel; thread 0 writes the block's
# partial sum. Interleaved addressing: at step s the threads with tid % (2 * s) == 0 work,
# so every warp keeps running with most of its lanes idle (divergence), and the modulo
# itself is slow. Better than v1: n / 256 global writes instead of n serialised atomics.
@registry.kernel("reduce_v2_interleaved", "void(float32[::1], float32[::1])", threads_per_block=TPB,
                 reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v2_interleaved(x, partials):
    shared = cuda.shared.array(TPB, float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    shared[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    s = 1
    while s < TPB:
        if tid % (2 * s) == 0:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partials[cuda.blockIdx.x] = shared[0]


@cuda.jit(device=True)
def _tree_sequential(shared, tid):
    """Sum ``shared[:TPB]`` into ``shared[0]``: step s adds the upper half onto the lower."""
    s = TPB // 2
    while s > 0:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2


# v3_sequential: the same tree with sequential addressing: at step s the first s threads add
# shared[tid + s] onto shared[tid]. The working threads are contiguous, so whole warps are
# either busy or idle (no divergence until fewer than 32 remain), and the 32 lanes of a warp
# touch 32 consecutive words, one per shared-memory bank (no bank conflicts).
@registry.kernel("reduce_v3_sequential", "void(float32[::1], float32[::1])", threads_per_block=TPB,
                 reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v3_sequential(x, partials):
    shared = cuda.shared.array(TPB, float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    shared[tid] = x[i] if i < x.size else float32(0)
    cuda.syncthreads()
    _tree_sequential(shared, tid)
    if tid == 0:
        partials[cuda.blockIdx.x] = shared[0]


@cuda.jit(device=True)
def _thread_sum(x):
    """This thread's float32 sum of x[i], x[i + gridsize], x[i + 2 * gridsize], ..."""
    acc = float32(0)
    for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
        acc += x[i]
    return acc


# v4_first_add_grid_stride: a fixed grid (as many blocks as fit on the GPU at once) instead
# of one thread per element. Each thread first adds up its elements with a grid-stride loop
# while loading them (sequential, coalesced reads, several loads in flight once the compiler
# unrolls the loop), and only then do the block's threads meet for the v3 tree. Most of the
# work is now plain loads and adds in registers; the tree and its syncthreads run once per
# thread instead of once per 256 elements, and the second pass has only grid-size partials.
@registry.kernel("reduce_v4_first_add_grid_stride", "void(float32[::1], float32[::1])",
                 threads_per_block=TPB, reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v4_first_add_grid_stride(x, partials):
    shared = cuda.shared.array(TPB, float32)
    tid = cuda.threadIdx.x
    shared[tid] = _thread_sum(x)
    cuda.syncthreads()
    _tree_sequential(shared, tid)
    if tid == 0:
        partials[cuda.blockIdx.x] = shared[0]


@cuda.jit(device=True)
def _tree_warp_shuffle(shared, tid):
    """Sum ``shared[:TPB]``; the result is returned in thread 0 (other threads get junk).

    Shared-memory steps until 64 values remain, then warp 0 adds the two halves and
    finishes with five register-to-register shuffles: all 32 of its lanes take part in
    each one (full mask), and no syncthreads is needed inside a warp."""
    s = TPB // 2
    while s > WARP:
        if tid < s:
            shared[tid] += shared[tid + s]
        cuda.syncthreads()
        s //= 2
    total = float32(0)
    if tid < WARP:
        total = shared[tid] + shared[tid + WARP]
        offset = WARP // 2
        while offset > 0:
            total += cuda.shfl_down_sync(FULL_MASK, total, offset)
            offset //= 2
    return total


# v5_warp_shuffle: v4 with the end of the tree done by warp shuffles. The shared-memory tree
# stops at 64 values (two barriers instead of eight); warp 0 adds their two halves into its
# 32 registers, and each shfl_down_sync reads a register of another lane directly, so the
# last five steps need neither shared memory nor a block-wide syncthreads (and warps 1 to 7
# can leave early).
@registry.kernel("reduce_v5_warp_shuffle", "void(float32[::1], float32[::1])",
                 threads_per_block=TPB, reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v5_warp_shuffle(x, partials):
    shared = cuda.shared.array(TPB, float32)
    tid = cuda.threadIdx.x
    shared[tid] = _thread_sum(x)
    cuda.syncthreads()
    total = _tree_warp_shuffle(shared, tid)
    if tid == 0:
        partials[cuda.blockIdx.x] = total


# v6_one_pass_atomic: v5, but each block adds its partial sum to the result with a single
# atomic instead of writing it out for another launch. One launch reads the data once; the
# grid-size atomics on one address are few enough not to matter (unlike v1's n of them).
@registry.kernel("reduce_v6_one_pass_atomic", "void(float32[::1], float32[::1])",
                 threads_per_block=TPB,
                 reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v6_one_pass_atomic(x, out):
    shared = cuda.shared.array(TPB, float32)
    tid = cuda.threadIdx.x
    shared[tid] = _thread_sum(x)
    cuda.syncthreads()
    total = _tree_warp_shuffle(shared, tid)
    if tid == 0:
        cuda.atomic.add(out, 0, total)


#: Loads in flight per thread in v7's loop, and the accumulators they are added into.
LOADS = 8
ACCUMULATORS = 4
_NAN = np.float32(np.nan)


@cuda.jit(device=True)
def _thread_sum_in_flight(x):
    """``_thread_sum`` with LOADS loads issued before any addition, into 4 accumulators."""
    n = uint64(x.size)
    stride = uint64(cuda.gridsize(1))
    i = uint64(cuda.grid(1))
    acc = cuda.local.array(ACCUMULATORS, float32)
    v = cuda.local.array(LOADS, float32)
    for k in range(ACCUMULATORS):
        acc[k] = float32(0)
    while i + uint64(LOADS - 1) * stride < n:
        for k in range(LOADS):  # unrolled: LOADS loads in flight
            v[k] = x[i + uint64(k) * stride]
        for k in range(LOADS):  # four independent chains of additions, not one
            acc[k % ACCUMULATORS] += v[k]
        i += uint64(LOADS) * stride
    while i < n:  # fewer than LOADS elements left for this thread
        acc[0] += x[i]
        i += stride
    return (acc[0] + acc[1]) + (acc[2] + acc[3])


# v7_last_block: v6's one launch without its memset, and with more bytes in flight. Each
# thread keeps LOADS loads in flight (v6's loop waits for each addition's input in turn) and
# adds them into four accumulators, so that the additions do not wait for each other either.
# Each block writes its partial sum into a preallocated array, then takes a ticket from a
# counter; the block that draws the last ticket knows that every other partial is written,
# sums them (poisoning them again), writes out[0] and sets the counter back to 0 for the next
# launch. No allocation, no memset, one launch. The fences order the memory: a block's
# partial is visible to every block before its ticket is taken (writer's threadfence), and
# the last block reads the partials only after it saw the count (reader's threadfence), as
# in CUDA's threadFenceReduction sample.
@registry.kernel("reduce_v7_last_block",
                 "void(float32[::1], float32[::1], float32[::1], int32[::1])",
                 threads_per_block=TPB, reference="gpudl.kernels.reduction.reference_sum")
@cuda.jit
def v7_last_block(x, out, partials, arrived):
    shared = cuda.shared.array(TPB, float32)
    last = cuda.shared.array(1, int32)
    tid = cuda.threadIdx.x
    shared[tid] = _thread_sum_in_flight(x)
    cuda.syncthreads()
    total = _tree_warp_shuffle(shared, tid)
    if tid == 0:
        partials[cuda.blockIdx.x] = total
        cuda.threadfence()
        last[0] = cuda.atomic.add(arrived, 0, 1) == cuda.gridDim.x - 1
    cuda.syncthreads()
    if last[0]:  # the same for every thread of the block
        cuda.threadfence()
        acc = float32(0)
        for b in range(tid, cuda.gridDim.x, TPB):
            acc += partials[b]
            partials[b] = _NAN  # poisoned again: a block that never writes shows next time
        shared[tid] = acc
        cuda.syncthreads()
        total = _tree_warp_shuffle(shared, tid)
        if tid == 0:
            out[0] = total
            arrived[0] = 0


# ------------------------------------------------------------------------------------------
# Launchers: device input (size >= 1) in, the sum left in out[0] (a device array)
# ------------------------------------------------------------------------------------------


def zero_accumulator(out: Array) -> None:
    """Set the accumulator of an atomic variant to 0, on the device."""
    driver.device_memset(out, 0, out.nbytes)


def tree_passes(kernel: Callable, x: Array, out: Array) -> None:
    """One thread per element: n values -> ceil(n / 256) partials -> ... -> out[0]."""
    while x.size > TPB:
        partials = poisoned(blocks_to_cover(x.size, TPB))
        kernel[partials.size, TPB](x, partials)
        x = partials
    kernel[1, TPB](x, out)


def grid_stride_passes(kernel: Callable, x: Array, out: Array) -> None:
    """A fixed grid writes one partial per block; one block then sums them into out[0]."""
    blocks = grid_stride_blocks(x.size, TPB)
    if blocks > 1:
        partials = poisoned(blocks)
        kernel[blocks, TPB](x, partials)
        x = partials
    kernel[1, TPB](x, out)


def atomic_pass(kernel: Callable, blocks: Callable[[int, int], int], x: Array,
                out: Array) -> None:
    """Zero the accumulator out[0], then one launch of ``blocks(x.size, TPB)`` blocks whose
    threads or blocks add into it."""
    zero_accumulator(out)
    kernel[blocks(x.size, TPB), TPB](x, out)


_WORKSPACES: dict[object, tuple[Array, Array]] = {}


def workspace() -> tuple[Array, Array]:
    """v7's partial sums (one per block of a full wave, poisoned) and its arrival counter
    (int32, 0 between launches), allocated once per device. Launches that share them must
    run one after another (on one stream), as the book's do."""
    key = "simulator" if backend.is_simulator() else cuda.get_current_device().id
    if key not in _WORKSPACES:
        counter = cuda.to_device(np.zeros(1, dtype=np.int32))
        _WORKSPACES[key] = (poisoned(grid_stride_blocks(1 << 62, TPB)), counter)
    return _WORKSPACES[key]


def _last_block_pass(x: Array, out: Array) -> None:
    """One launch of v7 over a wave of blocks, with the preallocated workspace."""
    partials, arrived = workspace()
    v7_last_block[grid_stride_blocks(x.size, TPB), TPB](x, out, partials, arrived)


# Each variant reads its 4-byte elements once and does one addition per element.
for _key, _launch in (
        ("v1_atomic", functools.partial(atomic_pass, v1_atomic, blocks_to_cover)),
        ("v2_interleaved", functools.partial(tree_passes, v2_interleaved)),
        ("v3_sequential", functools.partial(tree_passes, v3_sequential)),
        ("v4_first_add_grid_stride", functools.partial(grid_stride_passes,
                                                       v4_first_add_grid_stride)),
        ("v5_warp_shuffle", functools.partial(grid_stride_passes, v5_warp_shuffle)),
        ("v6_one_pass_atomic", functools.partial(atomic_pass, v6_one_pass_atomic,
                                                 grid_stride_blocks)),
        ("v7_last_block", _last_block_pass)):
    registry.variant("reduce", _key, bytes_per_element=4, flops_per_element=1)(_launch)
# v8_triton_block: v5 in Triton (gpudl.kernels.tiles.reduction): blocks of running sums in a
# grid-stride loop, one tl.sum per program, then one program over the partials.
registry.variant("reduce", "v8_triton_block", bytes_per_element=4, flops_per_element=1,
                 requires="triton")(tiled.sum_passes)
#: Variant name -> launcher(x, out) on device arrays (x.size >= 1); the sum ends in out[0].
VARIANTS: dict[str, Callable[[Array, Array], None]] = registry.variants("reduce")


def reduce_sum(x: Array, variant: str = "v6_one_pass_atomic") -> float:
    """The sum of a float32 vector (host or device array) on the GPU, as a Python float.

    The result is the float32 value the kernel ``VARIANTS[variant]`` computed; an empty
    vector gives 0.0 without a launch.
    """
    check_variant(variant)
    check_float32_array("x", x, 1)
    if x.size == 0:
        return 0.0
    out = poisoned(1)
    VARIANTS[variant](to_device(x), out)
    return float(out.copy_to_host()[0])


# ------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------


def check_variant(variant: str) -> None:
    """``ValueError`` unless ``variant`` is a key of :data:`VARIANTS` (``ModuleNotFoundError``
    for a Triton variant where Triton is not installed)."""
    registry.check_variant("reduce", variant, VARIANTS)

