"""Head-parallel attention (DeepSpeed-Ulysses): an all-to-all turns each rank's slice of the
sequence with every head into the whole sequence with a slice of the heads, attention runs
as on one GPU, and a second all-to-all turns the output back.

Book section: *Chapter 11*, head-parallel attention (Jacobs et al. 2023, *DeepSpeed
Ulysses*).

Forward: one all-to-all of ``q``, ``k`` and ``v`` packed together
(:func:`.comms.sequence_to_heads`), attention of this rank's ``heads / W`` heads over the
whole sequence (:func:`.blocks.attend_block`, one block), and one all-to-all of the output
and its log-sum-exp back (:func:`.comms.heads_to_sequence`). Backward: the gradient of the
output goes to the heads' ranks, the gradients of ``q``, ``k`` and ``v`` come back, packed.
Each all-to-all sends ``(W - 1) / W`` of what it moves, so a rank sends ``4 (W - 1) / W^2``
of the sequence's ``q``, ``k``, ``v`` and ``o`` per forward pass, less as ``W`` grows, where a
ring sends ``2 (W - 1) / W`` of the keys and values whatever ``W``
(:func:`gpudl.estimate.context_bytes_per_gpu`). The price: the heads must divide by ``W``
(with grouped-query attention, the key/value heads), nothing overlaps the all-to-alls, and
every rank talks to every other at once, which fast links inside a node carry well and a ring
of nodes does not need.
"""

from __future__ import annotations

import torch

from gpudl.kernels import online_softmax
from gpudl.parallel.context.blocks import attend_block, attend_block_backward, empty_partial
from gpudl.parallel.context.comms import heads_to_sequence, sequence_to_heads
from gpudl.parallel.context.layout import Segments, token_count

__all__ = ["ulysses_forward", "ulysses_backward"]


def ulysses_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, segments: list[Segments],
                    causal: bool) -> tuple[torch.Tensor, torch.Tensor, tuple, dict]:
    """``(o, lse, saved, stats)`` for this rank's tokens of ``q``, ``k``, ``v`` (every head);
    ``saved`` holds the head-sharded tensors :func:`ulysses_backward` needs, ``stats`` the
    ``work`` (scores computed) and ``bytes_sent``."""
    counts = [token_count(s) for s in segments]
    every = [segment for s in segments for segment in s]  # the sequence, as gathered
    qkv, sent = sequence_to_heads(torch.stack([q, k, v]), counts)
    running = empty_partial(qkv[0])
    work = attend_block(qkv[0], qkv[1], qkv[2], every, every, causal, running)
    o, lse = online_softmax.finish(running)
    back, sent_back = heads_to_sequence(torch.cat([o, lse[..., None]], dim=-1), counts)
    saved = (qkv, o, lse)
    return back[..., :-1], back[..., -1], saved, {"work": work, "bytes_sent": sent + sent_back}


def ulysses_backward(saved: tuple, do: torch.Tensor, segments: list[Segments], causal: bool
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict]:
    """``(dq, dk, dv, stats)`` for this rank's tokens, from what :func:`ulysses_forward`
    saved and the gradient ``do`` of this rank's output."""
    qkv, o, lse = saved
    counts = [token_count(s) for s in segments]
    every = [segment for s in segments for segment in s]
    do_heads, sent = sequence_to_heads(do, counts)
    delta = (do_heads * o).sum(-1)
    dq, dk, dv, work = attend_block_backward(qkv[0], qkv[1], qkv[2], do_heads, lse, delta,
                                             every, every, causal)
    grads, sent_back = heads_to_sequence(torch.stack([dq, dk, dv]), counts)
    return grads[0], grads[1], grads[2], {"work": work, "bytes_sent": sent + sent_back}
