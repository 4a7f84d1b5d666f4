"""Mixture of experts, counted: an expert's capacity, the parameters a token uses, and the bytes
its two all-to-alls move, beside the all-reduces of tensor parallelism.

Book section: *Chapter 11, Mixture of experts* and *What the all-to-all costs*. Units: bytes,
seconds, and bytes per second (not bits, not GB/s).

A router sends each token to ``k`` of ``E`` experts. An expert takes at most its **capacity**
of them (:func:`expert_capacity`); a token's choices beyond it are dropped. Only ``k`` experts
run per token, so a token costs the flops of the **active** parameters
(:func:`active_parameters`), not of all of them. With the experts spread over ``P`` ranks
(expert parallelism), each token travels to the rank of each of its experts and back: one
all-to-all dispatches, another combines, and the backward pass runs both again
(:func:`moe_all_to_all_bytes`). Megatron-LM's tensor parallelism moves whole activations
through four all-reduces per layer instead (:func:`tensor_parallel_bytes`); with ``k = 2``
over ``P = t`` ranks the two move the same bytes.
"""

from __future__ import annotations

import math

from gpudl.checks import check_int, check_positive, check_real
from gpudl.estimate.collectives import allreduce_bytes_per_rank

__all__ = ["active_parameters", "all_to_all_bytes_per_rank", "all_to_all_time",
           "expert_capacity", "moe_all_to_all_bytes", "tensor_parallel_bytes"]


def _check_top_k(top_k: object, experts: object) -> tuple[int, int]:
    """``(top_k, experts)`` if both are counts and ``top_k <= experts``."""
    e = check_int("experts", experts, 1)
    k = check_int("top_k", top_k, 1)
    if k > e:
        raise ValueError(f"top_k ({k}) must be at most the number of experts ({e}): a token "
                         "goes to k different experts")
    return k, e


def expert_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """How many of ``tokens`` tokens' choices one expert takes (GShard, Lepikhin et al. 2020;
    Switch Transformer, Fedus et al. 2021): the even share of the ``top_k x tokens``
    choices, times ``capacity_factor``, rounded up::

        capacity = ceil(capacity_factor x top_k x tokens / experts)

    A factor of 1 leaves no slack: any imbalance drops tokens. A factor of
    ``experts / top_k`` or more drops none (an expert then takes every token)."""
    t = check_int("tokens", tokens, 1)
    k, e = _check_top_k(top_k, experts)
    factor = check_positive("capacity_factor", capacity_factor)
    return math.ceil(factor * k * t / e)


def active_parameters(n_params: float, expert_params: float, experts: int,
                      top_k: int) -> float:
    """The parameters one token uses in a mixture-of-experts model of ``n_params`` parameters,
    ``expert_params`` of them in ``experts`` experts per layer of which each token uses
    ``top_k``: the dense ones, and ``top_k / experts`` of the experts'. Training flops are
    ``6 x active x tokens`` (:func:`gpudl.estimate.training_flops` of this)."""
    total = check_positive("n_params", n_params)
    in_experts = check_real("expert_params", expert_params, 0)
    if in_experts > total:
        raise ValueError(f"expert_params ({in_experts:g}) must be at most n_params "
                         f"({total:g}): the experts' parameters are some of the model's")
    k, e = _check_top_k(top_k, experts)
    return total - in_experts + in_experts * k / e


def all_to_all_bytes_per_rank(n_bytes: float, world_size: int) -> float:
    """Bytes each rank sends (and receives) in an all-to-all of ``n_bytes`` per rank spread
    evenly over the ``N`` ranks: it keeps its own ``1 / N`` and sends the rest,
    ``(N - 1) / N x n_bytes``: at most the buffer once, where a ring all-reduce sends it
    almost twice."""
    check_real("n_bytes", n_bytes, 0)
    n = check_int("world_size", world_size, 1)
    return (n - 1) / n * n_bytes


def all_to_all_time(n_bytes: float, world_size: int, bandwidth: float,
                    latency: float = 0.0) -> float:
    """Seconds for an all-to-all of ``n_bytes`` per rank over ``world_size`` ranks, each
    rank's link carrying ``bandwidth`` bytes/s one way, with ``latency`` per message of the
    ``N - 1`` each rank sends::

        time = (N - 1) / N x n_bytes / bandwidth + (N - 1) x latency

    Measured all-to-alls report the bandwidth this model implies as *bus bandwidth*,
    ``algbw x (N - 1) / N`` (nccl-tests' convention), so that it can be set beside an
    all-reduce's."""
    check_int("world_size", world_size, 1)
    check_real("bandwidth", bandwidth, 0, strict=True)
    check_real("latency", latency, 0)
    return (all_to_all_bytes_per_rank(n_bytes, world_size) / bandwidth
            + (world_size - 1) * latency)


def moe_all_to_all_bytes(tokens: int, hidden: int, top_k: int, expert_degree: int,
                         bytes_per_value: float = 2, capacity_factor: float | None = None
                         ) -> float:
    """Bytes one rank sends through the all-to-alls of one mixture-of-experts layer in a
    training step, its ``tokens`` tokens of ``hidden`` values routed to ``top_k`` experts
    spread over ``expert_degree`` ranks, evenly:
    ``4 x (P - 1) / P x rows x hidden x bytes_per_value``. The four all-to-alls are the
    dispatch and the combine, forward and again backward (their gradients travel the other
    way); each moves one row per choice, ``rows = top_k x tokens``. With a
    ``capacity_factor``, every expert's buffer is sent whole, padding included (GShard's
    fixed-size dispatch): ``rows = capacity_factor x top_k x tokens``."""
    t = check_int("tokens", tokens, 1)
    h = check_int("hidden", hidden, 1)
    k = check_int("top_k", top_k, 1)
    p = check_int("expert_degree", expert_degree, 1)
    size = check_positive("bytes_per_value", bytes_per_value)
    rows = k * t if capacity_factor is None else (
        check_positive("capacity_factor", capacity_factor) * k * t)
    return 4 * all_to_all_bytes_per_rank(rows * h * size, p)


def tensor_parallel_bytes(tokens: int, hidden: int, tensor_degree: int,
                          bytes_per_value: float = 2) -> float:
    """Bytes one rank sends through the all-reduces of one Transformer layer split Megatron's
    way over ``tensor_degree`` ranks in a training step, on ``tokens`` tokens of ``hidden``
    values: two all-reduces forward (after attention and after the feed-forward network) and
    two backward, each of the whole activation (Shoeybi et al. 2019, Chapter 6's ``f`` and
    ``g``): ``4 x 2 (t - 1) / t x tokens x hidden x bytes_per_value``."""
    t = check_int("tokens", tokens, 1)
    h = check_int("hidden", hidden, 1)
    degree = check_int("tensor_degree", tensor_degree, 1)
    size = check_positive("bytes_per_value", bytes_per_value)
    return 4 * allreduce_bytes_per_rank(t * h * size, degree)
