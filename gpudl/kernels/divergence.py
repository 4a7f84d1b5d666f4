"""Warp divergence: the same work, with the branch chosen per lane or per warp.

Book section: *Chapter 1, "Divergence"*.

When the lanes of a warp disagree at a branch, the warp runs both sides one after the other.
:func:`divergence` runs the same integer work on every thread with the path chosen by the
lane's parity (every warp diverges) or by its warp (none does); :func:`divergence_paths`
reads back how many paths each warp took, which the simulator can show although it cannot
time them.
"""

from __future__ import annotations

from gpudl import backend, registry
from gpudl.checks import check_choice, check_int
from gpudl.kernels.arrays import Array
from gpudl.kernels.grid import blocks_to_cover, check_threads_per_block

# isort: split
import numpy as np
from numba import cuda

__all__ = [
    "DEFAULT_WORK",
    "MODES",
    "divergence",
    "divergence_paths",
    "launch_divergence",
    "reference_divergence",
]

MODES = ("parity", "warp")
WARP_SIZE = backend.WARP_SIZE
_MASK31 = 0x7FFFFFFF
DEFAULT_WORK = backend.pick(gpu=2048, sim=16)


# Each thread runs `work` steps of one of two integer recurrences (exact, so the reference
# matches bit for bit). In both modes half the threads take each path, so the total work is
# the same. With "parity" the two paths alternate lane by lane: every warp has threads on
# both, and a warp runs path 0 with the odd lanes masked off, then path 1 with the even
# lanes masked off, costing c0 + c1. With "warp" each warp's 32 threads agree: half the
# warps cost c0 and half c1, (c0 + c1) / 2 on average. When issuing instructions is the
# bottleneck (the loops touch no memory), parity mode takes about twice as long.
@registry.kernel("divergence_paths", "void(int64[::1], boolean, int64)",
                 reference="gpudl.kernels.divergence.reference_divergence")
@cuda.jit
def _divergence_kernel(out, by_warp, work):
    i = cuda.grid(1)
    if i < out.size:
        if by_warp:
            path = (cuda.threadIdx.x // WARP_SIZE) % 2
        else:
            path = cuda.threadIdx.x % 2
        x = i + 1
        if path == 0:
            for _ in range(work):  # path 0: a linear congruential step
                x = (x * 1103515245 + 12345) & _MASK31
        else:
            for _ in range(work):  # path 1: a xorshift step
                x ^= (x << 13) & _MASK31
                x ^= x >> 17
                x ^= (x << 5) & _MASK31
        out[i] = x


@registry.kernel("divergence_branch_ids", "void(int32[::1], boolean)")
@cuda.jit
def _branch_ids_kernel(ids, by_warp):
    i = cuda.grid(1)
    if i < ids.size:  # the same choice of path as in _divergence_kernel
        if by_warp:
            ids[i] = (cuda.threadIdx.x // WARP_SIZE) % 2
        else:
            ids[i] = cuda.threadIdx.x % 2


def reference_divergence(
    n: int, mode: str, work: int = DEFAULT_WORK, threads_per_block: int = 256
) -> np.ndarray:
    """What :func:`divergence` computes, in NumPy (int64, exact)."""
    _check_divergence_args(n, mode, work, threads_per_block)
    lane = np.arange(n) % threads_per_block
    path = (lane // WARP_SIZE) % 2 if mode == "warp" else lane % 2
    x = np.arange(1, n + 1, dtype=np.int64)
    p0, p1 = x[path == 0], x[path == 1]
    for _ in range(work):
        p0 = (p0 * 1103515245 + 12345) & _MASK31
        p1 ^= (p1 << 13) & _MASK31
        p1 ^= p1 >> 17
        p1 ^= (p1 << 5) & _MASK31
    x[path == 0], x[path == 1] = p0, p1
    return x


def launch_divergence(out: Array, mode: str, work: int, threads_per_block: int) -> None:
    """Launch the divergence kernel, one thread per element of the int64 device array."""
    _check_divergence_args(out.size, mode, work, threads_per_block)
    blocks = blocks_to_cover(out.size, threads_per_block)
    _divergence_kernel[blocks, threads_per_block](out, mode == "warp", work)


def divergence(
    n: int, mode: str, work: int = DEFAULT_WORK, threads_per_block: int = 256
) -> np.ndarray:
    """Run the divergence kernel on ``n`` threads; ``mode`` is ``"parity"`` or ``"warp"``."""
    _check_divergence_args(n, mode, work, threads_per_block)
    out = cuda.to_device(np.full(n, -1, dtype=np.int64))  # poisoned: results are >= 0
    launch_divergence(out, mode, work, threads_per_block)
    return out.copy_to_host()


def divergence_paths(mode: str, n_threads: int, threads_per_block: int = 256) -> np.ndarray:
    """Number of distinct paths taken inside each warp, read back from a kernel.

    The kernel records each thread's branch; the host groups the records by warp (32
    consecutive threads of a block). ``"parity"`` gives 2 everywhere, ``"warp"`` 1.
    """
    _check_divergence_args(n_threads, mode, 1, threads_per_block, "n_threads")
    ids = cuda.to_device(np.full(n_threads, -1, dtype=np.int32))
    blocks = blocks_to_cover(n_threads, threads_per_block)
    _branch_ids_kernel[blocks, threads_per_block](ids, mode == "warp")
    host = ids.copy_to_host()
    if (host < 0).any():
        raise RuntimeError("the branch-id kernel left threads unrecorded")
    warps = np.split(host, range(WARP_SIZE, n_threads, WARP_SIZE))
    return np.array([np.unique(w).size for w in warps])


def _check_divergence_args(n: int, mode: str, work: int, threads_per_block: int,
                           name: str = "n") -> None:
    check_choice("mode", mode, MODES)
    check_int(name, n, 1)
    check_int("work", work, 1)
    check_threads_per_block(threads_per_block)
