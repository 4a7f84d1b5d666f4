"""The pipeline bubble: the share of a step each stage sits idle.

Book section: *Chapter 6, "The bubble"*.
"""

from __future__ import annotations

from gpudl.checks import check_int

__all__ = ["bubble_fraction"]


def bubble_fraction(stages: int, microbatches: int) -> float:
    """The fraction of a pipeline's time each stage sits idle: ``(p - 1) / (m + p - 1)``.

    Book section: *Chapter 6, "The bubble"*. With ``p`` stages of equal cost and a batch cut
    into ``m`` micro-batches, a GPipe or 1F1B step lasts ``m + p - 1`` forward-and-backward
    slots, of which each stage computes in ``m``: the first stage waits ``p - 1`` slots for the
    last one's first backward, the last waited ``p - 1`` slots for its first input (Huang et
    al. 2019). ``m = 1`` is the unpipelined split: ``(p - 1) / p`` idle, one stage busy at a
    time. The fraction falls below ``1/5`` once ``m >= 4 (p - 1)``.
    """
    p = check_int("stages", stages, 1)
    m = check_int("microbatches", microbatches, 1)
    return (p - 1) / (m + p - 1)
