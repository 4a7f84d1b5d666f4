"""Solutions to the exercises of Chapter 7, a case study and choosing a GPU.

Book section: Chapter 7, "Exercises": the tokens a GPU budget can train on, the largest model
that fits under each ZeRO stage, the longest sequence whose activations fit, and the energy of
one job in BF16 and in FP32. Each is the chapter's calculators (:mod:`gpudl.estimate`) run
backwards or combined.
"""

from __future__ import annotations

import math

from gpudl.checks import check_int
from gpudl.estimate import (
    activation_memory,
    model_state_memory,
    training_energy,
    training_flops,
    training_time,
)
from gpudl.hardware import SPECS, peak_flops


def tokens_in_budget(n_params: float, seconds: float, n_gpus: int, peak_flops_per_gpu: float,
                     mfu: float) -> float:
    """Tokens that ``n_gpus`` GPUs at ``mfu`` of their peak train a model of ``n_params`` on
    in ``seconds`` (exercise 1): ``training_time`` solved for ``D`` in ``C = 6 N D``."""
    one_token = training_time(training_flops(n_params, 1), n_gpus, peak_flops_per_gpu, mfu)
    return seconds / one_token


def largest_model(memory_bytes: float, n_gpus: int, zero_stage: int, *,
                  optimizer: str = "adam", precision: str = "mixed",
                  reserve_bytes: float = 0.0) -> float:
    """The most parameters whose model state fits in ``memory_bytes`` per GPU after keeping
    ``reserve_bytes`` for activations and buffers (exercise 2). Model state is linear in the
    parameter count, so one parameter's bytes per GPU divide the room left."""
    if not 0 <= reserve_bytes < memory_bytes:
        raise ValueError(f"reserve_bytes must be in [0, memory_bytes), got {reserve_bytes!r} "
                         f"of {memory_bytes!r}")
    per_param = model_state_memory(1, n_gpus=n_gpus, zero_stage=zero_stage,
                                   optimizer=optimizer, precision=precision)
    return (memory_bytes - reserve_bytes) / per_param


def longest_sequence(memory_bytes: float, hidden: int, n_heads: int, n_layers: int,
                     batch_size: int = 1, recompute: str = "none",
                     fused_attention: bool = False) -> int:
    """The longest sequence whose activations, over ``n_layers`` layers, fit in
    ``memory_bytes`` (exercise 3); 0 if not even one token fits.

    Per layer the bytes are ``c1 s + c2 s^2`` (Korthikanti et al. 2022), with ``c2 = 5 a b``
    only without recomputation and without fused attention (which adds ``4 a b`` to ``c1``
    instead): a quadratic (or linear) inequality in ``s``, solved in closed form and then
    checked against :func:`gpudl.estimate.activation_memory` itself.
    """
    layers = check_int("n_layers", n_layers, 1)
    activation_memory(1, batch_size, hidden, n_heads, recompute=recompute,
                      fused_attention=fused_attention)  # checks the rest
    if not 0 < memory_bytes < math.inf:
        raise ValueError(f"memory_bytes must be > 0 and finite, got {memory_bytes!r}")

    def fits(s: int) -> bool:
        return s == 0 or layers * activation_memory(
            s, batch_size, hidden, n_heads, recompute=recompute,
            fused_attention=fused_attention) <= memory_bytes

    fused = fused_attention and recompute == "none"
    c1 = (2 if recompute == "full" else 34) * batch_size * hidden + (
        4 * n_heads * batch_size if fused else 0)
    c2 = 5 * n_heads * batch_size if recompute == "none" and not fused else 0
    room = memory_bytes / layers
    s = room / c1 if c2 == 0 else (-c1 + math.sqrt(c1 * c1 + 4 * c2 * room)) / (2 * c2)
    s = max(int(s), 0)
    while not fits(s):  # the closed form can land one step high after rounding
        s -= 1
    while fits(s + 1):
        s += 1
    return s


def energy_per_job(flops: float, gpu: str, precision: str, mfu: float) -> float:
    """Joules the GPUs draw at their board power for a job of ``flops`` model flops run at
    ``mfu`` of the ``precision`` peak of ``gpu`` (exercise 4). The GPU count cancels: n GPUs
    for t/n seconds use the energy of one for t."""
    seconds = training_time(flops, 1, peak_flops(gpu, precision), mfu)
    return training_energy(seconds, 1, SPECS[gpu].tdp_watts)
