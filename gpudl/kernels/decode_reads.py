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

from gpudl.checks import check_choice, check_int
from gpudl.kernels.decode import (
    MAX_HEAD_DIM,
    SPLIT_SIZE,
    TRACEABLE,
    check_lengths,
    decode_attention,
)

__all__ = ["cache_reads", "traced_cache_reads"]


def cache_reads(lengths: np.ndarray, heads: int, kv_heads: int, d: int) -> dict:
    """Elements each variant loads from each cache, as ``{(array, b, g, position): n}``:
    every query head of cache head ``g``'s group reads each of the ``lengths[b]`` positions'
    ``d`` values once, and no position at or past the length is read."""
    check_lengths(lengths)
    check_int("d", d, 1, MAX_HEAD_DIM)
    if check_int("heads", heads, 1) % check_int("kv_heads", kv_heads, 1):
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
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

    check_choice("variant", variant, TRACEABLE)
    counts: dict[tuple, int] = {}

    def traced(kernel: Any, griddim: Any, blockdim: Any, *args: Any) -> None:
        run = trace(kernel, griddim, blockdim, *args)
        for a in run.accesses:
            if a.kind == "global" and a.op == "load" and a.array in ("k_cache", "v_cache"):
                position = run.parameters.index(a.array)
                flat = (a.address - ((position + 1) << 32)) // a.size
                b, g, pos, _ = np.unravel_index(flat, k_cache.shape)
                key = (a.array, int(b), int(g), int(pos))
                counts[key] = counts.get(key, 0) + 1

    decode_attention(q, k_cache, v_cache, lengths, variant, split_size, launch=traced)
    return counts
