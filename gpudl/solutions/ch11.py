"""Solutions to the exercises of Chapter 11, experts and long sequences.

Book section: Chapter 11, "Exercises": the choices a capacity drops with top-1 and top-2
routing, and the capacity factor that drops none (exercise 1); the work of causal ring
attention per rank and per step without the balanced layout (exercise 2); and the chunk at
which a ring hides its transfers when the keys and values have fewer heads than the queries,
over a slower link (exercise 3).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import torch

from gpudl.checks import check_bool, check_int, check_ints, check_positive
from gpudl.parallel.context import positions, rank_segments
from gpudl.parallel.experts import MoEConfig, MoELayer, moe_batch, route

# ------------------------------------------------------------------------------------------
# Exercise 1: what a capacity drops
# ------------------------------------------------------------------------------------------


def routed(top_k: int, capacity_factor: float, tokens: int = 64,
           config: MoEConfig | None = None) -> dict:
    """One group of ``tokens`` tokens of :func:`gpudl.parallel.experts.moe_batch` routed by
    the router of ``config`` (by default the untrained router the layer draws from its
    seed, without skew) with ``top_k`` and ``capacity_factor``:
    ``counts`` (choices per expert), ``capacity``, ``dropped`` and ``choices``."""
    config = replace(MoEConfig() if config is None else config, top_k=top_k,
                     capacity_factor=capacity_factor)  # checked there
    layer = MoELayer(config)
    x, _ = moe_batch(config, check_int("tokens", tokens, 1))
    with torch.no_grad():
        routing = route(x @ layer.router.T, top_k, capacity_factor)
    return {"counts": routing.counts.tolist(), "capacity": routing.capacity,
            "dropped": routing.dropped, "choices": top_k * tokens}


def no_drop_factor(counts: list[int], top_k: int) -> float:
    """The capacity factor at which the busiest expert's capacity, ``ceil(f k T / E)``, is
    its count of choices: ``max(counts) x E / (k T)``, with ``T`` tokens making ``k T``
    choices over ``E = len(counts)`` experts. No choice is dropped from it on."""
    counts = check_ints("counts", counts, 0)
    k = check_int("top_k", top_k, 1)
    if sum(counts) % k or not sum(counts):
        raise ValueError(f"counts must add up to a positive multiple of top_k ({k}): k "
                         f"choices per token, got {sum(counts)}")
    return max(counts) * len(counts) / sum(counts)


# ------------------------------------------------------------------------------------------
# Exercise 2: causal ring attention without the balanced layout
# ------------------------------------------------------------------------------------------


def causal_ring_work(seq_len: int, world_size: int, layout: str) -> dict:
    """The scores causal ring attention computes over ``seq_len`` tokens on ``world_size``
    ranks in ``layout`` (a query's keys up to its own position), counted: ``per_rank``
    (each rank's, over the whole ring) and ``critical_path`` (the sum over the ``W`` steps of
    the most any rank computes at that step: a step ends when its slowest rank is done)."""
    w = check_int("world_size", world_size, 1)
    segments = rank_segments(check_int("seq_len", seq_len, 1), w, layout)
    held = [positions(s).numpy() for s in segments]
    steps = np.zeros((w, w), dtype=np.int64)  # [step, rank]
    for step in range(w):
        for rank in range(w):
            keys = held[(rank - step) % w]  # the chunk rank holds at this step
            steps[step, rank] = int((keys[None, :] <= held[rank][:, None]).sum())
    return {"per_rank": steps.sum(0).tolist(), "critical_path": int(steps.max(1).sum())}


def contiguous_over_balanced(world_size: int) -> float:
    """How much longer the causal ring takes in the contiguous layout than in the balanced
    one, for long chunks: ``(2W - 1) / W`` (the contiguous ring's ``W - 1`` full chunks and
    a diagonal against the balanced ring's ``W`` half chunks)."""
    w = check_int("world_size", world_size, 1)
    return (2 * w - 1) / w


# ------------------------------------------------------------------------------------------
# Exercise 3: the chunk that hides the ring, with fewer key/value heads
# ------------------------------------------------------------------------------------------


def hiding_chunk_gqa(bandwidth: float, peak: float, heads: int, kv_heads: int,
                     bytes_per_element: int = 2, causal: bool = False) -> int:
    """The fewest tokens per rank at which a ring step's computation, ``4 c^2 a d`` flops
    over the ``a = heads`` query heads (half when causal), hides its transfer, the keys and
    values of the ``kv_heads`` heads only, ``2 c a_kv d e`` bytes:
    ``ceil(e F a_kv / (2 B a))``, twice that when causal.
    :func:`gpudl.estimate.hiding_chunk` is the case ``kv_heads = heads``."""
    check_positive("bandwidth", bandwidth)
    check_positive("peak", peak)
    a = check_int("heads", heads, 1)
    kv = check_int("kv_heads", kv_heads, 1, a)
    if a % kv:
        raise ValueError(f"kv_heads ({kv}) must divide heads ({a}): each key/value head "
                         "serves a group of query heads")
    e = check_int("bytes_per_element", bytes_per_element, 1)
    factor = 2 if check_bool("causal", causal) else 1
    return math.ceil(e * peak * kv * factor / (2 * bandwidth * a))
