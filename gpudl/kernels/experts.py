"""Mixture of experts' own kernels: the top-k router, and the token permutation that gathers
each expert's tokens and adds its outputs back, weighted by their gates.

Book section: *Chapter 11, The router and the permutation, as kernels*.

:func:`route_top_k` is the router of :func:`gpudl.parallel.experts.router.route` without the
capacity: each token's softmax over the ``E`` experts' logits, its ``k`` best experts (a
larger logit first, the lower index on a tie) and their gates, renormalized over the ``k``.
:func:`permute_rows` gathers the tokens into rows sorted by expert (``rows[i] =
x[sources[i]]``) and :func:`unpermute_rows` adds each token's rows back, weighted
(``y[t] = sum_j gates[t, j] * rows[slots[t, j]]``, a dropped choice, ``slots = -1``, adding
nothing). The permutation does no arithmetic worth the name, one multiply-add per value moved:
it is memory-bound, and the GPU's bandwidth sets its time.

Host functions take host NumPy arrays (and return host arrays) or numba device arrays (and
return device arrays). Float outputs are allocated poisoned (NaN) and the router's choices
filled with -1 before the launch, so an element a kernel forgets to write is caught. The
indices are checked on the host before a launch (a kernel has no bounds check).

NaN, as the torch twins (``torch.softmax``, ``torch.topk``, ``index_add``): a row of logits
holding a NaN gives NaN probabilities and gates for that token (its choices: the NaN logits
first), a NaN row or gate gives NaN where it is added, and a dropped choice's gate is never
read.
"""

from __future__ import annotations

import math
from typing import Any

from gpudl import backend  # noqa: F401  (decides GPU or simulator before numba is imported)

# isort: split
import numpy as np
from numba import cuda, float32
from numba.cuda.cudadrv import driver

from gpudl import registry
from gpudl.checks import (
    check_array,
    check_float32_array,
    check_host_or_device,
    check_int,
    check_kernel_array,
)
from gpudl.kernels.arrays import launch_into_poisoned, poisoned, returned, to_device, zeros
from gpudl.kernels.grid import blocks_to_cover

# A NumPy array or a numba device array (whose class differs between GPU and simulator).
Array = Any

__all__ = ["THREADS_PER_BLOCK", "permute_rows", "reference_permute", "reference_route",
           "reference_unpermute", "route_top_k", "unpermute_rows", "v1_gather_rows",
           "v1_thread_per_token", "v1_weighted_sum"]

#: Threads per block of the three kernels.
THREADS_PER_BLOCK = 128
_NEG_INF = float32(-np.inf)
_NAN = float32(np.nan)


# ------------------------------------------------------------------------------------------
# The references, in float64 on the host
# ------------------------------------------------------------------------------------------


def _order(row: np.ndarray) -> np.ndarray:
    """The experts of one row of logits, best first: NaN first, then larger, then lower."""
    nan = np.isnan(row)
    return np.lexsort((np.arange(len(row)), -np.where(nan, 0, row), ~nan))


def reference_route(logits: np.ndarray, top_k: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(probs, choices, gates)`` in float64: each row's softmax, its ``top_k`` best experts
    (a larger logit first, the lower index on a tie; NaN first) and their probabilities
    divided by their sum."""
    check_array("logits", logits, 2)
    check_int("top_k", top_k, 1, logits.shape[1])
    values = logits.astype(np.float64)
    with np.errstate(invalid="ignore"):
        top = np.where(np.isnan(values), -np.inf, values).max(1, keepdims=True)
        exps = np.exp(values - top)
        probs = exps / exps.sum(1, keepdims=True)
    choices = np.array([_order(row)[:top_k] for row in values], np.int64).reshape(-1, top_k)
    chosen = np.take_along_axis(probs, choices, 1)
    return probs, choices, chosen / chosen.sum(1, keepdims=True)


def reference_permute(x: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """``x[sources]`` in float64: row ``i`` is token ``sources[i]``."""
    check_array("x", x, 2)
    return x.astype(np.float64)[_checked(sources, 1, 0, len(x), "sources", "tokens")]


def reference_unpermute(rows: np.ndarray, slots: np.ndarray, gates: np.ndarray) -> np.ndarray:
    """``y[t] = sum_j gates[t, j] * rows[slots[t, j]]`` in float64, over the kept choices
    (``slots >= 0``)."""
    check_array("rows", rows, 2)
    check_array("gates", gates, 2)
    slots = _checked(slots, 2, -1, len(rows), "slots", "rows")
    _check_same_shape(slots, gates)
    kept = slots >= 0
    picked = rows.astype(np.float64)[np.where(kept, slots, 0)]
    weighted = np.where(kept[..., None], gates.astype(np.float64)[..., None] * picked, 0.0)
    return weighted.sum(1)


def _checked(index: object, ndim: int, low: int, count: int, name: str, what: str
             ) -> np.ndarray:
    """``index`` on the host, after checking it is an int32 array of rank ``ndim`` (on the
    host or the device) with every entry from ``low`` to ``count - 1``, a row of the
    ``count`` ``what``."""
    on_device = check_kernel_array(name, index, ndim, np.int32)
    host = index.copy_to_host() if on_device else index
    bad = host[(host < low) | (host >= count)]
    if bad.size:
        raise ValueError(f"each of {name} must be from {low} to {count - 1} (one of the "
                         f"{count} {what}), got {sorted(set(bad.tolist()))[:5]}")
    return host


def _check_same_shape(slots: Array, gates: Array) -> None:
    if slots.shape != gates.shape:
        raise ValueError(f"slots and gates must have one shape (tokens, k), got {slots.shape} "
                         f"and {gates.shape}")


# ------------------------------------------------------------------------------------------
# The kernels
# ------------------------------------------------------------------------------------------


@cuda.jit(device=True)
def _before(v1, i1, v2, i2):
    """Whether expert ``i1`` of logit ``v1`` ranks before expert ``i2`` of logit ``v2``: a
    NaN first (as ``torch.topk`` puts it), then the larger logit, then the lower index."""
    n1 = v1 != v1
    n2 = v2 != v2
    if n1 or n2:
        return n1 and (not n2 or i1 < i2)
    return v1 > v2 or (v1 == v2 and i1 < i2)


# v1_thread_per_token: one thread per token, E values each, so no thread talks to another.
# Softmax in three passes over the row (its largest logit, the sum of exp(l - max), each
# probability), then k passes of selection, each finding the best expert ranked after the
# previous choice, which needs no list of those already chosen, then the gates renormalized.
# The row is read about k + 3 times, from L1: a router's E is tens to hundreds, and its cost
# is small next to the experts' products, whatever the kernel.
@registry.kernel("moe_router_v1_thread_per_token",
                 "void(float32[:, ::1], float32[:, ::1], int32[:, ::1], float32[:, ::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.experts.reference_route")
@cuda.jit
def v1_thread_per_token(logits, probs, choices, gates):
    t = cuda.grid(1)
    tokens, experts = logits.shape
    if t < tokens:
        top = _NEG_INF
        nan = False
        for e in range(experts):
            v = logits[t, e]
            if v != v:
                nan = True
            elif v > top:
                top = v
        total = float32(0)
        for e in range(experts):
            p = math.exp(logits[t, e] - top)
            probs[t, e] = p
            total += p
        if nan:
            total = _NAN
        for e in range(experts):
            probs[t, e] = probs[t, e] / total
        chosen = float32(0)
        last, last_v = -1, float32(0)
        for j in range(choices.shape[1]):
            best, best_v = -1, float32(0)
            for e in range(experts):
                v = logits[t, e]
                if (last < 0 or _before(last_v, last, v, e)) and (
                        best < 0 or _before(v, e, best_v, best)):
                    best, best_v = e, v
            choices[t, j] = best
            gates[t, j] = probs[t, best]
            chosen += probs[t, best]
            last, last_v = best, best_v
        for j in range(choices.shape[1]):
            gates[t, j] = gates[t, j] / chosen


# v1_gather_rows: one thread per value moved, consecutive threads along a row: each warp
# reads 32 consecutive values of one token and writes them to consecutive places of its row,
# both coalesced. Each value is read once and written once: 8 bytes per float32 moved, and a
# 4-byte index per row, read by every thread of the row (from L1 after the first).
@registry.kernel("moe_permute_v1_gather_rows",
                 "void(float32[:, ::1], int32[::1], float32[:, ::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.experts.reference_permute")
@cuda.jit
def v1_gather_rows(x, sources, rows):
    i = cuda.grid(1)
    n, width = rows.shape
    if i < n * width:
        r = i // width
        c = i - r * width
        rows[r, c] = x[sources[r], c]


# v1_weighted_sum: the scatter back written as a gather: one thread per value of the output,
# reading the k rows of its token (a row of a dropped choice not at all) and adding them,
# weighted. Every output value is written once, by one thread, so no atomic addition is
# needed, and the sum's order is fixed (choice 0 first).
@registry.kernel("moe_unpermute_v1_weighted_sum",
                 "void(float32[:, ::1], int32[:, ::1], float32[:, ::1], float32[:, ::1])",
                 threads_per_block=THREADS_PER_BLOCK,
                 reference="gpudl.kernels.experts.reference_unpermute")
@cuda.jit
def v1_weighted_sum(rows, slots, gates, y):
    i = cuda.grid(1)
    tokens, width = y.shape
    if i < tokens * width:
        t = i // width
        c = i - t * width
        acc = float32(0)
        for j in range(slots.shape[1]):
            s = slots[t, j]
            if s >= 0:
                acc += gates[t, j] * rows[s, c]
        y[t, c] = acc


# ------------------------------------------------------------------------------------------
# The entry points
# ------------------------------------------------------------------------------------------


def route_top_k(logits: Array, top_k: int) -> tuple[Array, Array, Array]:
    """``(probs, choices, gates)`` of float32 ``logits`` (tokens, experts) by
    ``v1_thread_per_token``: float32 probabilities (tokens, experts), int32 choices and
    float32 gates (tokens, top_k), as :func:`reference_route` computes them."""
    on_device = check_float32_array("logits", logits, 2)
    tokens, experts = logits.shape
    if experts < 1:
        raise ValueError(f"logits must have one column per expert, at least one, got shape "
                         f"{logits.shape}")
    check_int("top_k", top_k, 1, experts)
    if tokens == 0:
        return (zeros((0, experts), on_device), _filled_choices((0, top_k), on_device),
                zeros((0, top_k), on_device))
    probs, gates = poisoned((tokens, experts)), poisoned((tokens, top_k))
    choices = _filled_choices((tokens, top_k), True)
    v1_thread_per_token[blocks_to_cover(tokens, THREADS_PER_BLOCK), THREADS_PER_BLOCK](
        to_device(logits), probs, choices, gates)
    return tuple(returned(out, on_device) for out in (probs, choices, gates))


def _filled_choices(shape: tuple[int, int], on_device: bool) -> Array:
    """int32 choices of ``shape``, every one -1 (no expert), on the device or the host."""
    if not on_device:
        return np.full(shape, -1, np.int32)
    out = cuda.device_array(shape, np.int32)
    if out.size:
        driver.device_memset(out, 0xFF, out.nbytes)
    return out


def permute_rows(x: Array, sources: Array) -> Array:
    """``x[sources]`` by ``v1_gather_rows``: float32 ``x`` (tokens, hidden), int32
    ``sources`` (rows,) each a token; float32 rows (rows, hidden)."""
    on_device = check_float32_array("x", x, 2)
    check_host_or_device({"x": x, "sources": sources})
    _checked(sources, 1, 0, len(x), "sources", "tokens")
    shape = (len(sources), x.shape[1])

    def launch(x_: Array, sources_: Array, rows: Array) -> None:
        blocks = blocks_to_cover(rows.size, THREADS_PER_BLOCK)
        v1_gather_rows[blocks, THREADS_PER_BLOCK](x_, sources_, rows)

    return launch_into_poisoned(launch, [x, sources], [shape], on_device)[0]


def unpermute_rows(rows: Array, slots: Array, gates: Array) -> Array:
    """``y[t] = sum_j gates[t, j] * rows[slots[t, j]]`` over the kept choices (``slots[t, j]
    >= 0``) by ``v1_weighted_sum``: float32 ``rows`` (rows, hidden), int32 ``slots`` and
    float32 ``gates`` (tokens, k); float32 y (tokens, hidden)."""
    on_device = check_float32_array("rows", rows, 2)
    check_float32_array("gates", gates, 2)
    check_host_or_device({"rows": rows, "slots": slots, "gates": gates})
    _checked(slots, 2, -1, len(rows), "slots", "rows")
    _check_same_shape(slots, gates)
    shape = (len(slots), rows.shape[1])

    def launch(rows_: Array, slots_: Array, gates_: Array, y: Array) -> None:
        blocks = blocks_to_cover(y.size, THREADS_PER_BLOCK)
        v1_weighted_sum[blocks, THREADS_PER_BLOCK](rows_, slots_, gates_, y)

    return launch_into_poisoned(launch, [rows, slots, gates], [shape], on_device)[0]
