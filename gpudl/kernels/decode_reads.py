"""Which cache positions decode attention reads: by formula, and counted on the simulator.

Book section: *Chapter 9, "The bytes of a decode step"*.

Every query head reads each of its sequence's cached positions once, all ``d`` values of the
key and of the value, and nothing at or past the sequence's length (whatever those positions
hold). :func:`cache_reads` writes that down per position; :func:`traced_cache_reads` runs a
variant of :mod:`gpudl.kernels.decode` under :func:`gpudl.trace.trace` and counts the loads
of each cache per position, and the tests require the two to be equal.
"""

from __future__ import annotations

from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda

from gpudl.kernels.arrays import poisoned
from gpudl.kernels.decode import SPLIT_SIZE, VARIANTS

__all__ = ["cache_reads", "traced_cache_reads"]




def cache_reads(lengths: np.ndarray, heads: int, kv_heads: int, d: int) -> dict:
    """Elements each variant loads from each cache, as ``{(array, b, g, position): n}``:
    every query head of cache head ``g``'s group reads each of the ``lengths[b]`` positions'
    ``d`` values once, and no position at or past the length is read."""
    group = heads // kv_heads
    return {(name, b, g, pos): group * d for name in ("k_cache", "v_cache")
            for b, length in enumerate(np.asarray(lengths).tolist())
            for g in range(kv_heads) for pos in range(length)}


def traced_cache_reads(variant: str, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray,
                       lengths: np.ndarray, split_size: int = SPLIT_SIZE) -> dict:
    """Run ``variant`` under :func:`gpudl.trace.trace` (simulator only: wrap the call in
    :func:`gpudl.trace.on_simulator` on a GPU) and count the elements it loads from each
    cache, per position, as :func:`cache_reads` gives them."""
    from gpudl.trace import trace

    counts: dict[tuple, int] = {}
    shape = k_cache.shape

    def traced(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        run = trace(kernel, griddim, blockdim, *args)
        for a in run.accesses:
            if a.kind == "global" and a.op == "load" and a.array in ("k_cache", "v_cache"):
                position = run.parameters.index(a.array)
                flat = (a.address - ((position + 1) << 32)) // a.size
                b, g, pos, _ = np.unravel_index(flat, shape)
                key = (a.array, int(b), int(g), int(pos))
                counts[key] = counts.get(key, 0) + 1

    extra = {"split_size": split_size} if variant == "v2_split_kv" else {}
    VARIANTS[variant](*(cuda.to_device(x) for x in (q, k_cache, v_cache, lengths)),
                      poisoned(q.shape), launch=traced, **extra)
    return counts
