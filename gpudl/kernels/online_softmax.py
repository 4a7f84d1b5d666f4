"""The online-softmax rule, written once: the partial result of attention over some of the keys
(running maximum, running sum, unnormalised output), and the merge of two partials.

Book section: *Chapter 8, "v2: one fused kernel with online softmax"* (the rule the fused kernel
applies tile by tile), *Chapter 9, "Split-KV decoding"* (the combine step merges the chunks'
partials with it) and *Chapter 11*'s ring attention (each rank merges the partial of every
key/value chunk that passes by).

For one query row with scores ``x_j`` over a set of keys, the partial is ``m = max_j x_j``,
``l = sum_j exp(x_j - m)`` and ``acc = sum_j exp(x_j - m) v_j`` (:func:`partial`). Two
partials over disjoint sets of keys merge into the partial over their union (:func:`merge`)::

    M = max(m_a, m_b)
    l = exp(m_a - M) l_a + exp(m_b - M) l_b
    acc = exp(m_a - M) acc_a + exp(m_b - M) acc_b

and ``o = acc / l``, ``lse = m + log l`` finish it (:func:`finish`). Merging is associative
and commutative up to rounding, so the keys may be cut anywhere and the pieces merged in any
order: tiles of a fused kernel, chunks of a KV cache, chunks travelling round a ring.

Who calls it: :func:`gpudl.kernels.attention.reference_online` (Chapter 8's fused walk, in
NumPy), :func:`gpudl.kernels.decode.reference_split_kv` (Chapter 9's split-KV partials and
their combine, in NumPy) and :mod:`gpudl.parallel.context`'s blocks (ring and head-parallel
attention, in torch). The Numba kernels (``attention_v2_fused``, the decode kernels'
``online_softmax_step``, ``decode_v2_combine_splits``) keep their own copy of these lines: a
kernel cannot call Python.

The functions take NumPy arrays or torch tensors, the same lines for both (both libraries
accept NumPy's names, ``axis`` and ``keepdims``). A key a query must not see has the score
``-inf``: its weight is exactly 0, and a row that sees no key has ``m = -inf``, ``l = 0``,
``acc = 0``, the partial that changes nothing when merged. A NaN score makes its row NaN.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from gpudl.checks import check_instance

__all__ = ["Partial", "partial", "merge", "finish"]

# A NumPy array or a torch tensor.
Array = Any


class Partial(NamedTuple):
    """Attention over some of the keys, per query row: ``m`` and ``l`` of shape
    ``(..., rows, 1)``, ``acc`` of shape ``(..., rows, d)``."""

    m: Array
    l: Array  # noqa: E741  (the book's name for the running sum)
    acc: Array


def _namespace(x: Array) -> ModuleType:
    """``torch`` for a torch tensor, ``numpy`` otherwise."""
    if type(x).__module__.startswith("torch"):
        import torch

        return torch
    return np


def _check_block(name: str, x: object) -> ModuleType:
    """``x``'s library, after checking that it is a NumPy array or a torch tensor of floats
    with a row and a column axis at least."""
    xp = _namespace(x)
    if not isinstance(x, np.ndarray) and not (xp is not np and hasattr(x, "is_floating_point")):
        raise TypeError(f"{name} must be a NumPy array or a torch tensor, got "
                        f"{type(x).__name__}")
    if not (x.is_floating_point() if xp is not np else x.dtype.kind == "f"):
        raise TypeError(f"{name} must hold floating-point numbers, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"{name} must have two axes at least, got shape {tuple(x.shape)}")
    return xp


def _weight(xp: ModuleType, x: Array, m: Array) -> Array:
    """``exp(x - m)``, with ``m = -inf`` (a row that sees no key) read as 0, so that the
    masked scores' ``-inf - (-inf)`` gives 0, not NaN."""
    return xp.exp(x - xp.where(m == -np.inf, 0.0, m))


def partial(scores: Array, v: Array) -> Partial:
    """The partial of attention with ``scores`` ``(..., rows, keys)`` (``-inf`` where masked)
    over values ``v`` ``(..., keys, d)``."""
    xp = _check_block("scores", scores)
    if _check_block("v", v) is not xp:
        raise TypeError(f"scores and v must both be NumPy arrays or both torch tensors, got "
                        f"{type(scores).__name__} and {type(v).__name__}")
    if scores.shape[:-2] != v.shape[:-2] or scores.shape[-1] != v.shape[-2]:
        raise ValueError(f"scores (..., rows, keys) and v (..., keys, d) must agree, got "
                         f"shapes {tuple(scores.shape)} and {tuple(v.shape)}")
    m = xp.amax(scores, axis=-1, keepdims=True)
    weights = _weight(xp, scores, m)
    return Partial(m, xp.sum(weights, axis=-1, keepdims=True), weights @ v)


def merge(a: Partial, b: Partial) -> Partial:
    """The partial over the keys of ``a`` and of ``b`` together: each rescaled by
    ``exp(m - M)`` to the larger maximum ``M``, then added."""
    check_instance("a", a, Partial)
    check_instance("b", b, Partial)
    if a.acc.shape != b.acc.shape:
        raise ValueError(f"a and b must be partials of the same rows, got outputs of shapes "
                         f"{tuple(a.acc.shape)} and {tuple(b.acc.shape)}")
    xp = _namespace(a.m)
    top = xp.maximum(a.m, b.m)
    scale_a, scale_b = _weight(xp, a.m, top), _weight(xp, b.m, top)
    return Partial(top, scale_a * a.l + scale_b * b.l, scale_a * a.acc + scale_b * b.acc)


def finish(p: Partial) -> tuple[Array, Array]:
    """``(o, lse)``: the output ``acc / l`` ``(..., rows, d)`` and each row's log-sum-exp of
    scores ``m + log l`` ``(..., rows)``."""
    xp = _namespace(check_instance("p", p, Partial).m)
    return p.acc / p.l, (p.m + xp.log(p.l))[..., 0]
