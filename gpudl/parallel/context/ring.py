"""Ring attention: each rank keeps its queries, and the key/value chunks travel round the ring
while every rank computes; the partial results are merged by the online-softmax rule.

Book section: *Chapter 11*, ring attention (Liu et al. 2023, *Ring Attention with Blockwise
Transformers*; the backward pass as FlashAttention-2's, Dao 2023).

**Forward.** ``W`` steps. At step ``t`` rank ``r`` holds the chunk of rank ``r - t`` (mod
``W``): before computing on it, it posts the transfer of that chunk to rank ``r + 1`` and of
the next one from rank ``r - 1`` (:class:`.comms.RingTransfer`), then attends its queries to
the chunk (:func:`.blocks.attend_block`, merging the partial into its running maximum, sum and
output) while the transfer is in flight, and waits for it only afterwards. After ``W`` steps
every query has seen every key: ``o = acc / l``, and the log-sum-exp ``lse = m + log l`` is
kept for the backward pass. A rank never holds more than two chunks.

**Backward.** The chunks travel round again, each with the sum of its gradients so far: at
step ``t`` rank ``r`` computes, from the saved ``lse``, its share of ``dQ`` (kept) and the
chunk's ``dK``, ``dV`` from its queries, adds them to what the ranks before it summed (which
arrived during the computation) and passes them on. After the last step the sums travel one
more hop, to the chunk's owner. Nothing is differentiated through the sends and receives.

With ``overlap=False`` (the naive ring) each transfer is posted only after the computation
and waited for at once: the same results, with every transfer's time added to the step's.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from gpudl.kernels import online_softmax
from gpudl.parallel.context.blocks import attend_block, attend_block_backward, empty_partial
from gpudl.parallel.context.comms import Events, RingTransfer, note
from gpudl.parallel.context.layout import Segments, token_count

__all__ = ["ring_forward", "ring_backward"]


def _chunk_shape(x: torch.Tensor, segments: Segments) -> tuple[int, ...]:
    """The shape of ``x`` ``(..., tokens, d)`` for the tokens of ``segments``."""
    return (*x.shape[:-2], token_count(segments), x.shape[-1])


def ring_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: list[Segments],
                 causal: bool, overlap: bool = True, events: Events | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """``(o, lse, stats)`` for this rank's queries ``q`` and its chunk ``k``, ``v``, each
    ``(heads, tokens, d)`` with the tokens of ``segments[rank]`` (``segments``: every
    rank's, :func:`.layout.rank_segments`). ``stats``: ``work`` (scores computed) and
    ``bytes_sent``."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    running = empty_partial(q)
    chunk, owner = torch.stack([k, v]), rank
    work = sent = 0
    for step in range(world_size):
        following = (owner - 1) % world_size  # whose chunk comes next
        transfer = None
        if overlap and step < world_size - 1:
            transfer = RingTransfer(chunk, _chunk_shape(chunk, segments[following]), "kv",
                                    step + 1, events)
        note(events, "compute", step)
        work += attend_block(q, chunk[0], chunk[1], segments[rank], segments[owner], causal,
                             running)
        note(events, "computed", step)
        if step < world_size - 1:
            transfer = transfer or RingTransfer(chunk, _chunk_shape(chunk, segments[following]),
                                                "kv", step + 1, events)
            sent += transfer.bytes_sent
            chunk, owner = transfer.wait(), following
    o, lse = online_softmax.finish(running)
    return o, lse, {"work": work, "bytes_sent": sent}


def ring_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
                  lse: torch.Tensor, do: torch.Tensor, segments: list[Segments], causal: bool,
                  overlap: bool = True, events: Events | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """``(dq, dk, dv, stats)`` for this rank's tokens, from its ``q``, ``k``, ``v``, the
    forward's ``o`` and ``lse`` (:func:`ring_forward`) and the gradient ``do`` of the
    output."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    delta = (do * o).sum(-1)
    dq = torch.zeros_like(q)
    chunk, owner = torch.stack([k, v]), rank
    sums: RingTransfer | None = None  # brings the gradients of the chunk held, summed so far
    work = sent = 0
    for step in range(world_size):
        following = (owner - 1) % world_size
        shape = _chunk_shape(chunk, segments[following])
        transfer = None
        if overlap and step < world_size - 1:
            transfer = RingTransfer(chunk, shape, "kv", step + 1, events)
        note(events, "compute", step)
        dq_part, dk, dv, done = attend_block_backward(
            q, chunk[0], chunk[1], do, lse, delta, segments[rank], segments[owner], causal)
        note(events, "computed", step)
        work += done
        dq += dq_part
        grads = torch.stack([dk, dv])
        if sums is not None:
            grads += sums.wait()
        if step < world_size - 1:
            transfer = transfer or RingTransfer(chunk, shape, "kv", step + 1, events)
            sent += transfer.bytes_sent
            chunk, owner = transfer.wait(), following
        if world_size > 1:  # on to the next rank; after the last step, to the chunk's owner
            sums = RingTransfer(grads, shape, "grads", step, events)
            sent += sums.bytes_sent
            if not overlap:
                sums.wait()
    dk, dv = sums.wait() if sums is not None else grads
    return dq, dk, dv, {"work": work, "bytes_sent": sent}
