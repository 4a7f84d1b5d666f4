"""Solutions to the exercises of Chapter 6, model parallelism.

Book section: Chapter 6, "Exercises": BERT-base's parameters and the memory its training
needs, the micro-batches a bubble target needs and the activations 1F1B saves, and the bytes
data, pipeline and tensor parallelism move in a step.
"""

from __future__ import annotations

import math

import torch

from gpudl.checks import check_int
from gpudl.estimate import (
    activation_memory,
    allreduce_bytes_per_rank,
    bubble_fraction,
    model_state_memory,
)
from gpudl.models import BERT_BASE, EncoderConfig, make_encoder
from gpudl.parallel.pipeline import schedule

#: BERT's WordPiece vocabulary, positions and segments (Devlin et al. 2019).
BERT_VOCAB, BERT_POSITIONS, BERT_SEGMENTS = 30_522, 512, 2


def bert_base_parameters() -> dict[str, int]:
    """BERT-base's parameters, part by part: the embeddings (tokens, positions, segments and
    their LayerNorm), the 12 encoder layers (counted on :func:`gpudl.models.make_encoder`
    built on the meta device, which allocates nothing) and the pooler; and the total."""
    h = BERT_BASE.hidden
    embeddings = (BERT_VOCAB + BERT_POSITIONS + BERT_SEGMENTS) * h + 2 * h
    with torch.device("meta"):
        encoder = sum(p.numel() for p in make_encoder(BERT_BASE).parameters())
    pooler = h * h + h
    return {"embeddings": embeddings, "encoder": encoder, "pooler": pooler,
            "total": embeddings + encoder + pooler}


def bert_base_training_memory(batch: int = 32, seq: int = 512) -> dict[str, float]:
    """Bytes to train BERT-base on one GPU with mixed-precision Adam: the model state
    (:func:`gpudl.estimate.model_state_memory`, 16 bytes per parameter) and the 12 layers'
    activations for ``batch`` sequences of ``seq`` tokens
    (:func:`gpudl.estimate.activation_memory`, nothing recomputed)."""
    state = model_state_memory(bert_base_parameters()["total"])
    activations = BERT_BASE.layers * activation_memory(seq, batch, BERT_BASE.hidden,
                                                       BERT_BASE.heads)
    return {"model_state": state, "activations": activations, "total": state + activations}


def min_microbatches(stages: int, max_idle: float) -> int:
    """The fewest micro-batches that bring the bubble of ``stages`` stages down to
    ``max_idle``: ``(p - 1) / (m + p - 1) <= t`` means ``m >= (p - 1)(1 - t) / t``."""
    check_int("stages", stages, 1)
    if not 0 < max_idle < 1:
        raise ValueError(f"max_idle must be a fraction in (0, 1), got {max_idle!r}")
    m = max(1, math.ceil((stages - 1) * (1 - max_idle) / max_idle))
    while m > 1 and bubble_fraction(stages, m - 1) <= max_idle:  # guard against rounding up
        m -= 1
    return m


def peak_activations(name: str, stages: int, microbatches: int) -> list[int]:
    """The most micro-batches whose activations each stage holds at once under schedule
    ``name``: every forward adds one, every backward frees one."""
    peaks = []
    for stage in range(stages):
        held = peak = 0
        for kind, _ in schedule(name, stage, stages, microbatches):
            held += 1 if kind == "F" else -1
            peak = max(peak, held)
        peaks.append(peak)
    return peaks


def step_traffic(config: EncoderConfig, batch: int, n_params: int, ways: int,
                 element_bytes: int = 2) -> dict[str, float]:
    """Bytes each GPU sends in one training step when ``ways`` GPUs share the model by each
    strategy (and receives as many), ``element_bytes`` per value:

    * ``data``: a ring all-reduce of all ``n_params`` gradients;
    * ``pipeline``: a middle stage sends one activation forward and one gradient backward
      per sample, ``2 b s h`` values, whatever the micro-batches;
    * ``tensor``: four all-reduces of a ``b s h`` activation per layer (two forward, two
      backward), each a ring of ``ways`` ranks.
    """
    for name, value in (("batch", batch), ("n_params", n_params), ("ways", ways),
                        ("element_bytes", element_bytes)):
        check_int(name, value, 1)
    activation = batch * config.seq * config.hidden * element_bytes
    return {
        "data": allreduce_bytes_per_rank(n_params * element_bytes, ways),
        "pipeline": 2.0 * activation,
        "tensor": 4 * config.layers * allreduce_bytes_per_rank(activation, ways),
    }
