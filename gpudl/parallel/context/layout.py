"""Which tokens of the sequence each rank holds: the contiguous layout and the load-balanced
one of causal attention, and what a world size must be for a sequence (and heads) to split.

Book section: *Chapter 11, "Splitting the sequence"*.

The sequence of ``seq_len`` tokens is cut into pieces whose lengths differ by at most one
(piece ``i`` of ``n`` is ``[i * seq_len // n, (i + 1) * seq_len // n)``), never padded, so
that no rank computes on tokens that are not there:

* ``"contiguous"``: ``W`` pieces, rank ``r`` holds piece ``r``. Causal attention is then
  unbalanced: the last rank's queries see every chunk, the first rank's only their own, so
  rank ``W - 1`` computes ``W`` chunks' scores where rank 0 computes one (the naive layout);
* ``"balanced"``: ``2 W`` pieces, rank ``r`` holds pieces ``r`` and ``2 W - 1 - r``, an
  early piece and a late one, so that under a causal mask every rank computes the same
  number of scores (exactly, when ``2 W`` divides the length; within a row or so otherwise).

A rank's tokens are a list of *segments*, ``(start, end)`` ranges of positions, stored one
after the other. A layout needs every piece non-empty: ``seq_len >= W`` for the contiguous
layout and ``seq_len >= 2 W`` for the balanced one; the head-parallel strategy (DeepSpeed-
Ulysses) also needs the heads to divide by ``W``, the context-parallel degree, which
:class:`gpudl.parallel.degrees.ParallelDegrees` checks as it checks every degree.
:func:`check_context_plan` says so before any process starts.
"""

from __future__ import annotations

import torch

from gpudl.checks import check_choice, check_int
from gpudl.parallel.degrees import ParallelDegrees

__all__ = ["LAYOUTS", "STRATEGIES", "check_context_plan", "rank_segments",
           "positions", "token_count"]

#: How the sequence is laid out over the ranks.
LAYOUTS = ("contiguous", "balanced")
#: The two ways to split attention over the ranks, by the sequence (ring attention) or by the
#: heads (DeepSpeed-Ulysses' all-to-all).
STRATEGIES = ("ring", "ulysses")

# A rank's tokens: (start, end) ranges of positions, in the order the rank stores them.
Segments = list[tuple[int, int]]


def check_context_plan(seq_len: int, heads: int, world_size: int, strategy: str = "ring",
                       layout: str = "contiguous") -> None:
    """``ValueError`` unless ``world_size`` ranks can split attention over ``seq_len`` tokens
    and ``heads`` heads by ``strategy`` in ``layout``: every piece of the layout holds a
    token, and for ``"ulysses"`` the heads divide by the world size, the context-parallel
    degree (:meth:`gpudl.parallel.degrees.ParallelDegrees.check_divides`)."""
    check_int("seq_len", seq_len, 1)
    check_int("heads", heads, 1)
    check_int("world_size", world_size, 1)
    check_choice("strategy", strategy, STRATEGIES)
    check_choice("layout", layout, LAYOUTS)
    pieces = world_size * (2 if layout == "balanced" else 1)
    if seq_len < pieces:
        raise ValueError(
            f"seq_len = {seq_len} tokens cannot be split over world size {world_size} in the "
            f"{layout} layout: it cuts the sequence into {pieces} pieces of at least one "
            f"token each (use at most {seq_len // (pieces // world_size)} rank(s))")
    if strategy == "ulysses":  # head-parallel attention gives each rank whole heads
        ParallelDegrees(context=world_size).check_divides("context", "the heads", heads)


def _piece(i: int, n: int, seq_len: int) -> tuple[int, int]:
    return i * seq_len // n, (i + 1) * seq_len // n


def rank_segments(seq_len: int, world_size: int, layout: str) -> list[Segments]:
    """Each rank's segments of a sequence of ``seq_len`` tokens in ``layout`` (rank order)."""
    check_context_plan(seq_len, 1, world_size, "ring", layout)
    if layout == "contiguous":
        return [[_piece(r, world_size, seq_len)] for r in range(world_size)]
    n = 2 * world_size
    return [[_piece(r, n, seq_len), _piece(n - 1 - r, n, seq_len)] for r in range(world_size)]


def positions(segments: Segments) -> torch.Tensor:
    """The positions of the tokens of ``segments``, in the order they are stored (int64)."""
    return torch.cat([torch.arange(start, end) for start, end in segments])


def token_count(segments: Segments) -> int:
    """How many tokens ``segments`` hold."""
    return sum(end - start for start, end in segments)
