"""Latency and bandwidth per level of the GPU memory hierarchy, measured by kernels.

Book section: Chapter 2, "Latency and bandwidth per level".

Two questions, two kinds of kernel:

* **Latency** (how long one load takes when nothing hides it): one thread follows a pointer
  chain, ``j = chain[j]``, through a working set sized to fit one level (L1, L2, or nothing:
  HBM), or through shared memory. Each load needs the result of the one before, so the hops
  cannot overlap and the time per hop is the latency of the level that holds the chain.
* **Bandwidth** (how many bytes per second a level delivers when every SM keeps it busy):
  many threads read independent values and sum them, from a large array (HBM), from a small
  array read over and over (L2) or from a shared-memory array (shared memory).

This module holds the kernels, their launchers and references; :mod:`gpudl.bench.hierarchy`
times them (``latency``, ``bandwidth``) and sets the ratios next to the claim of the articles
the book corrects (their Table 1: shared memory "2-10x", registers "20-30x" faster than global
memory). On Numba's CUDA simulator the kernels run at tiny sizes on the CPU: their results are
checked (the final index of every chase, the sums of every bandwidth kernel).
"""

from __future__ import annotations

from typing import Any

from gpudl import backend, registry
from gpudl.checks import (
    check_array,
    check_bool,
    check_equal,
    check_float32_array,
    check_int,
    check_kernel_array,
)
from gpudl.kernels.grid import check_threads_per_block, resident_blocks

# isort: split
import numpy as np
from numba import cuda, float32, int32, njit, uint64

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = [
    "KiB",
    "MiB",
    "GiB",
    "LINE_BYTES",
    "MAX_SHARED_CHAIN_BYTES",
    "SHARED_WORDS",
    "THREADS",
    "make_chain",
    "reference_chase",
    "check_chase",
    "launch_chase",
    "pointer_chase",
    "reference_read_sums",
    "launch_read",
    "read_sums",
    "reference_shared_sums",
    "launch_shared_read",
    "shared_sums",
]

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

#: Bytes between two slots of a chain, one L1 cache line (128 bytes, four 32-byte sectors),
#: so every hop lands on a line (and a sector) that the previous hop did not bring in.
LINE_BYTES = 128


#: The largest chain the shared-memory chase takes, the 48 KiB of dynamic shared memory a
#: block gets without opting in to more.
MAX_SHARED_CHAIN_BYTES = 48 * KiB

#: Threads per block of the multi-thread kernels (the shared-memory chase's copy, the
#: bandwidth kernels).
THREADS = backend.pick(gpu=256, sim=32)


# ------------------------------------------------------------------------------------------
# Latency: pointer chasing
# ------------------------------------------------------------------------------------------


def make_chain(n_elements: int, stride_elements: int, seed: int = 0) -> np.ndarray:
    """A pointer chain: one random cycle through the slots ``0, stride, 2 stride, ...``.

    ``chain[s]`` is the slot after slot ``s``; following it from any slot visits every slot
    once before coming back. The other elements hold -1 (never read by a correct chase).
    Slots one cache line apart (``stride_elements * itemsize >= 128`` bytes) put every hop
    on a new line. The order is a random permutation rather than ``s -> s + stride``: a
    regular stride lets the hardware (and the compiler) guess the next address, a random
    order leaves it nothing to predict. int32 when the indices fit, else int64.
    """
    n = check_int("n_elements", n_elements, 1)
    stride = check_int("stride_elements", stride_elements, 1)
    check_int("seed", seed, 0)
    dtype = np.int32 if n <= np.iinfo(np.int32).max else np.int64
    slots = np.arange(0, n, stride, dtype=dtype)
    order = slots[np.random.default_rng(seed).permutation(slots.size)]
    chain = np.full(n, -1, dtype=dtype)
    chain[order] = np.roll(order, -1)
    return chain


# Each hop's index is checked before it is read: compiled code has no bounds check, and a
# negative index would wrap around as in Python. Returns the index reached and the hops done
# (fewer than steps where the chain leads outside itself or to an empty slot).
@njit
def _host_chase(chain, start, steps):
    j = start
    for hop in range(steps):
        if j < 0 or j >= chain.size or chain[j] < 0:
            return j, hop
        j = chain[j]
    return j, steps


def reference_chase(chain: np.ndarray, steps: int, start: int = 0) -> int:
    """The index reached after ``steps`` hops from ``start``, followed on the CPU.
    ``ValueError`` if a hop leads outside the chain or to an empty slot (-1)."""
    _check_chain(chain)
    check_int("steps", steps, 1)
    if not 0 <= check_int("start", start, 0) < chain.size or chain[start] < 0:
        raise ValueError(f"start must be a slot of the chain, got {start}")
    end, hops = _host_chase(chain, chain.dtype.type(start), steps)
    if hops < steps or not 0 <= end < chain.size:
        raise ValueError(f"chain: hop {hops + 1} of {steps} from slot {start} leads to index "
                         f"{end}, which is not a slot of the chain (size {chain.size})")
    return int(end)


# x[i] for an index i >= 0, read as unsigned: numba wraps negative indices around (x[-1] is
# the last element), which costs three integer instructions before every load of a signed
# index; an unsigned one leaves only the address computation (one multiply-add).
@cuda.jit(device=True)
def _load(x, i):
    return x[uint64(i)]


# One thread, because a latency is the time of one load that nothing overlaps: with more
# threads the SM would issue their loads while the first one is in flight and we would time
# throughput. The chase starts at pos[0] and leaves its final index there: the store keeps
# the compiler from dropping the loads, and the next launch carries on where this one
# stopped, so repeated launches over the HBM working set keep reaching lines that no earlier
# launch left in L2. Between two loads there is only the address computation, as in a
# pointer chase written in CUDA C: a few cycles, part of every hop's time on every level.
@registry.kernel("hierarchy_chase", "void(int32[::1], int64, int32[::1])",
                 reference="gpudl.kernels.hierarchy.reference_chase")
@cuda.jit
def _chase_kernel(chain, steps, pos):
    j = pos[0]
    for _ in range(steps):
        j = _load(chain, j)
    pos[0] = j


# The same chase inside shared memory: the block first copies the chain into dynamic shared
# memory (all its threads, coalesced), then thread 0 alone chases it. Shared memory has no
# lines and no cache in front of it, so every hop costs the same.
@registry.kernel("hierarchy_shared_chase", "void(int32[::1], int64, int32[::1])",
                 reference="gpudl.kernels.hierarchy.reference_chase")
@cuda.jit
def _shared_chase_kernel(chain, steps, pos):
    s = cuda.shared.array(0, dtype=int32)
    for i in range(cuda.threadIdx.x, chain.size, cuda.blockDim.x):
        s[i] = chain[i]
    cuda.syncthreads()
    if cuda.threadIdx.x == 0:
        j = pos[0]
        for _ in range(steps):
            j = _load(s, j)
        pos[0] = j


def launch_chase(chain: Array, steps: int, pos: Array, shared: bool) -> None:
    """One launch of the chase on device arrays: ``steps`` hops from ``pos[0]``, the final
    index left in ``pos[0]``; in shared memory (a block of :data:`THREADS` copies the chain)
    or in device memory (one thread)."""
    if shared:
        _shared_chase_kernel[1, THREADS, 0, chain.nbytes](chain, steps, pos)
    else:
        _chase_kernel[1, 1](chain, steps, pos)


def _check_chain(chain: object, shared: bool = False) -> None:
    if not isinstance(chain, np.ndarray):
        raise TypeError(f"chain must be a NumPy array from make_chain, got {type(chain).__name__}")
    check_kernel_array("chain", chain, 1, np.int32 if shared else (np.int32, np.int64))
    if chain.size == 0:
        raise ValueError("chain must not be empty")
    if shared and chain.nbytes > MAX_SHARED_CHAIN_BYTES:
        raise ValueError(
            f"a shared-memory chain must fit in {MAX_SHARED_CHAIN_BYTES} bytes, "
            f"got {chain.nbytes}"
        )


def check_chase(got: int, chain: np.ndarray, steps: int) -> None:
    """Raise ``RuntimeError`` unless ``got`` is where ``steps`` hops from slot 0 end."""
    check_int("got", got, 0)
    expected = reference_chase(chain, steps)
    if got != expected:
        raise RuntimeError(
            f"the chase ended at index {got} after {steps} hops, the CPU at {expected}"
        )


def pointer_chase(chain: np.ndarray, steps: int, shared: bool = False) -> int:
    """Follow ``chain`` for ``steps`` hops from slot 0 in one GPU thread; the final index.

    ``shared=True`` chases a copy of the chain in shared memory (int32, at most
    :data:`MAX_SHARED_CHAIN_BYTES`). The result is checked against :func:`reference_chase`
    (a mismatch raises ``RuntimeError``).
    """
    _check_chain(chain, shared)
    check_bool("shared", shared)
    reference_chase(chain, steps)  # refuses a chain whose hops would leave it, before a launch
    pos = cuda.to_device(np.zeros(1, dtype=chain.dtype))
    launch_chase(cuda.to_device(chain), steps, pos, shared)
    got = int(pos.copy_to_host()[0])
    check_chase(got, chain, steps)
    return got


# ------------------------------------------------------------------------------------------
# Bandwidth: HBM and L2 (one kernel), shared memory
# ------------------------------------------------------------------------------------------


# Many threads, each summing every T-th float of the array (T: the threads of the grid), so
# a warp's 32 loads are 32 consecutive floats (coalesced) and the whole GPU reads at once.
# Four independent loads per iteration: a thread issues all four before it needs the first,
# which puts enough bytes in flight to cover the memory latency. Each thread writes its sum
# once: a load whose value nobody uses would be removed by the compiler. With reps > 1 the
# array is read again and again (the L2 measurement, on an array that fits in L2); in each
# repetition thread g takes the part of the array that thread g + B took in the previous one
# (B: threads per block), so an SM does not find its previous repetition's data in its own
# L1 and the reads are served by L2.
@registry.kernel("hierarchy_read", "void(float32[::1], float32[::1], int64)",
                 reference="gpudl.kernels.hierarchy.reference_read_sums")
@cuda.jit
def _read_kernel(a, out, reps):
    g = cuda.grid(1)
    n_threads = cuda.gridsize(1)
    v = g
    acc = float32(0.0)
    for _ in range(reps):
        i = v
        while i + 3 * n_threads < a.size:
            acc += (_load(a, i) + _load(a, i + n_threads)) + (
                _load(a, i + 2 * n_threads) + _load(a, i + 3 * n_threads)
            )
            i += 4 * n_threads
        while i < a.size:
            acc += _load(a, i)
            i += n_threads
        v += cuda.blockDim.x
        if v >= n_threads:
            v -= n_threads
    out[g] = acc


def reference_read_sums(
    a: np.ndarray, reps: int, blocks: int, threads_per_block: int
) -> np.ndarray:
    """What :func:`read_sums` computes, in float64 on the host: thread g's sum over the
    repetitions r of the elements ``v, v + T, v + 2T, ...`` with ``v = (g + r B) mod T``."""
    check_array("a", a, 1)
    _check_launch(reps=reps, blocks=blocks, threads_per_block=threads_per_block)
    n_threads = blocks * threads_per_block
    padded = np.zeros(-(-a.size // n_threads) * n_threads)
    padded[: a.size] = a
    per_start = padded.reshape(-1, n_threads).sum(axis=0)
    g = np.arange(n_threads)
    return sum(per_start[(g + r * threads_per_block) % n_threads] for r in range(reps))


def launch_read(a: Array, out: Array, reps: int, blocks: int) -> None:
    """One launch of the HBM/L2 read kernel on device arrays: ``blocks`` blocks of
    :data:`THREADS`, one sum per thread into ``out``."""
    _read_kernel[blocks, THREADS](a, out, reps)


def read_sums(
    a: Array, reps: int = 1, blocks: int | None = None, threads_per_block: int = THREADS
) -> Array:
    """Run the HBM/L2 read kernel on the float32 vector ``a``: one sum per thread.

    ``blocks`` defaults to one full wave, as many as all SMs hold at once
    (:func:`gpudl.kernels.grid.resident_blocks`; 4 on the simulator). Host input gives a
    host result, a device array a device array.
    """
    _check_launch(reps=reps, threads_per_block=threads_per_block)
    if blocks is None:
        blocks = resident_blocks(threads_per_block)
    check_int("blocks", blocks, 1)
    on_device = _check_vector("a", a)
    a_dev = a if on_device else cuda.to_device(a)
    out = cuda.to_device(np.full(blocks * threads_per_block, np.nan, dtype=np.float32))
    _read_kernel[blocks, threads_per_block](a_dev, out, reps)
    return out if on_device else out.copy_to_host()


#: Floats in the shared array of the shared-memory bandwidth kernel (4 KiB, a power of two:
#: an offset wraps around with a mask). Each block holds it twice over, 8 KiB.
SHARED_WORDS = 1024
_SHARED_MASK = SHARED_WORDS - 1
_SHARED_ARRAY = 2 * SHARED_WORDS  # a name, not an expression: numba needs a constant size
_PER_THREAD = SHARED_WORDS // THREADS  # words each thread reads per iteration


# Each block copies SHARED_WORDS floats into shared memory twice over (s[i] = src[i mod
# SHARED_WORDS] for i < 2 * SHARED_WORDS), then in iteration it every thread t reads the
# words base + k * THREADS, k < _PER_THREAD, with base = t + (32 * it mod SHARED_WORDS), and
# sums them. Conflict-free: shared memory has 32 banks of 4 bytes and the 32 lanes of a warp
# read 32 consecutive words, one per bank, so each warp's load is served in one pass. The
# block size is a compile-time constant and the array is doubled so that no index wraps:
# the loads of an iteration sit at constant offsets from one base address, with no index
# arithmetic between them. The base moves each iteration, or the compiler would load the
# words once and reuse them from registers; one sum is written per thread so that no load
# is dead. Launch with exactly THREADS threads per block.
@registry.kernel("hierarchy_shared_read", "void(float32[::1], float32[::1], int64)",
                 reference="gpudl.kernels.hierarchy.reference_shared_sums")
@cuda.jit
def _shared_read_kernel(src, out, iters):
    s = cuda.shared.array(_SHARED_ARRAY, dtype=float32)
    t = cuda.threadIdx.x
    for k in range(2 * _PER_THREAD):
        s[t + k * THREADS] = src[(t + k * THREADS) & _SHARED_MASK]
    cuda.syncthreads()
    acc = float32(0.0)
    for it in range(iters):
        base = t + ((32 * it) & _SHARED_MASK)
        for k in range(_PER_THREAD):
            acc += _load(s, base + k * THREADS)
    out[cuda.grid(1)] = acc


def reference_shared_sums(src: np.ndarray, iters: int, blocks: int) -> np.ndarray:
    """What :func:`shared_sums` computes, in float64 on the host: thread t of every block
    sums ``src[(t + 32 it + k T) mod SHARED_WORDS]`` over ``it < iters`` and
    ``k < SHARED_WORDS / T`` (T: threads per block)."""
    _check_launch(iters=iters, blocks=blocks)
    check_equal("src.size", check_array("src", src, 1).size, "SHARED_WORDS", SHARED_WORDS)
    t = np.arange(THREADS)[:, None, None]
    it = np.arange(iters)[None, :, None]
    k = np.arange(_PER_THREAD)[None, None, :]
    words = np.asarray(src, dtype=np.float64)[(t + 32 * it + k * THREADS) % SHARED_WORDS]
    return np.tile(words.sum(axis=(1, 2)), blocks)


def launch_shared_read(src: Array, out: Array, iters: int, blocks: int) -> None:
    """One launch of the shared-memory read kernel on device arrays (``src``:
    :data:`SHARED_WORDS` floats; ``out``: one sum per thread)."""
    _shared_read_kernel[blocks, THREADS](src, out, iters)


def shared_sums(src: Array, iters: int, blocks: int | None = None) -> Array:
    """Run the shared-memory read kernel on ``src`` (:data:`SHARED_WORDS` float32 values,
    copied into every block's shared array): one sum per thread, 256 threads per block (32
    on the simulator)."""
    blocks = resident_blocks(THREADS) if blocks is None else blocks
    _check_launch(iters=iters, blocks=blocks)
    on_device = _check_vector("src", src)
    check_equal("src.size", src.size, "SHARED_WORDS", SHARED_WORDS)
    src_dev = src if on_device else cuda.to_device(src)
    out = cuda.to_device(np.full(blocks * THREADS, np.nan, dtype=np.float32))
    _shared_read_kernel[blocks, THREADS](src_dev, out, iters)
    return out if on_device else out.copy_to_host()


# ------------------------------------------------------------------------------------------
# Input checks
# ------------------------------------------------------------------------------------------


def _check_launch(**counts: object) -> None:
    for name, value in counts.items():
        check_int(name, value, 1)
    if "threads_per_block" in counts:
        check_threads_per_block(counts["threads_per_block"])


def _check_vector(name: str, x: object) -> bool:
    """Check a non-empty, 1-D, contiguous float32 vector; return True if it is on the device."""
    on_device = check_float32_array(name, x, 1)
    if x.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {x.shape}")
    return on_device
