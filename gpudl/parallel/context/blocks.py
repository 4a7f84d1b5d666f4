"""The maths of context parallelism on one rank: its queries against one chunk of keys and
values, forward (a partial merged by the online-softmax rule) and backward (FlashAttention-2's,
from the saved log-sum-exp), skipping what a causal mask hides.

Book section: *Chapter 11*, ring attention; the rule is Chapter 8's online softmax,
:func:`gpudl.kernels.online_softmax.merge`, and the backward pass is Chapter 8's exercise
(``gpudl.solutions.ch08``) written with torch's matrix products.

Tensors are ``(heads, tokens, d)``, a rank's tokens stored segment after segment
(:mod:`.layout`). For a query segment and a key segment, a causal mask hides either every
score (every key comes after every query: the pair is skipped), none (no mask is built) or
some (the diagonal: a mask by positions). With ``P = exp(S - lse)`` recomputed from the
forward's log-sum-exp and ``D_i = dO_i . O_i``: ``dV = P^T dO``, ``dS = P * (dO V^T - D)``,
``dQ = dS K / sqrt(d)``, ``dK = dS^T Q / sqrt(d)``, each a sum over chunks that the ring
adds up as the chunks travel.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from gpudl.kernels import online_softmax
from gpudl.kernels.online_softmax import Partial
from gpudl.parallel.context.layout import Segments

__all__ = ["segment_pairs", "empty_partial", "attend_block", "attend_block_backward"]


def segment_pairs(q_segments: Segments, k_segments: Segments, causal: bool,
                  device: torch.device | str = "cpu") -> Iterator[tuple[slice, slice,
                                                                          torch.Tensor | None]]:
    """For each pair of a query segment and a key segment with a score to compute: the
    query rows and the key rows (slices of the stored order) and the mask, ``True`` where a
    key comes after its query, or ``None`` where the pair needs none."""
    q_row = 0
    for q_start, q_end in q_segments:
        k_row = 0
        for k_start, k_end in k_segments:
            rows = slice(q_row, q_row + q_end - q_start)
            cols = slice(k_row, k_row + k_end - k_start)
            k_row = cols.stop
            if causal and k_start >= q_end:
                continue  # every key after every query
            mask = None
            if causal and k_end - 1 > q_start:  # the diagonal crosses the pair
                mask = (torch.arange(k_start, k_end, device=device)[None, :]
                        > torch.arange(q_start, q_end, device=device)[:, None])
            yield rows, cols, mask
        q_row = rows.stop


def _scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    x = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return x if mask is None else x.masked_fill(mask, -math.inf)


def empty_partial(q: torch.Tensor) -> Partial:
    """The partial of rows that have seen no key yet (``m = -inf``, ``l = 0``,
    ``acc = 0``), for the queries ``q``: merging a partial into it gives that partial."""
    heads, rows, _ = q.shape
    m = torch.full((heads, rows, 1), -math.inf, dtype=q.dtype, device=q.device)
    return Partial(m, torch.zeros_like(m), torch.zeros_like(q))


def attend_block(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_segments: Segments,
                 k_segments: Segments, causal: bool, running: Partial) -> int:
    """Attend the queries ``q`` (of ``q_segments``) to the chunk ``k``, ``v`` (of
    ``k_segments``): each visible pair's partial is merged into the rows of ``running``, in
    place. Returns the number of scores computed (heads x queries x keys)."""
    work = 0
    for rows, cols, mask in segment_pairs(q_segments, k_segments, causal, q.device):
        part = online_softmax.partial(_scores(q[:, rows], k[:, cols], mask), v[:, cols])
        merged = online_softmax.merge(Partial(*(t[:, rows] for t in running)), part)
        for mine, new in zip(running, merged, strict=True):
            mine[:, rows] = new
        work += q.shape[0] * (rows.stop - rows.start) * (cols.stop - cols.start)
    return work


def attend_block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, do: torch.Tensor,
                          lse: torch.Tensor, delta: torch.Tensor, q_segments: Segments,
                          k_segments: Segments, causal: bool
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """``(dq, dk, dv, work)``: this chunk's share of the gradient of the queries ``q`` and the
    whole gradient of the chunk ``k``, ``v`` from these queries, given the gradient ``do`` of
    the output, the forward's log-sum-exp ``lse`` ``(heads, queries)`` and ``delta``, the row
    sums of ``do * o``."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    scale = 1 / math.sqrt(q.shape[-1])
    work = 0
    for rows, cols, mask in segment_pairs(q_segments, k_segments, causal, q.device):
        p = torch.exp(_scores(q[:, rows], k[:, cols], mask) - lse[:, rows, None])
        dv[:, cols] += p.transpose(-1, -2) @ do[:, rows]
        ds = p * (do[:, rows] @ v[:, cols].transpose(-1, -2) - delta[:, rows, None])
        dq[:, rows] += ds @ k[:, cols] * scale
        dk[:, cols] += ds.transpose(-1, -2) @ q[:, rows] * scale
        work += q.shape[0] * (rows.stop - rows.start) * (cols.stop - cols.start)
    return dq, dk, dv, work
