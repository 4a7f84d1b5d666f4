"""Context parallelism's communication, from sends and receives: the ring's transfer, posted
before the computation it hides, and the all-to-all that switches between a slice of the
sequence with every head and the whole sequence with a slice of the heads.

Book section: *Chapter 11*, ring attention (:class:`RingTransfer`) and head-parallel attention
(:func:`all_to_all`, :func:`sequence_to_heads`, :func:`heads_to_sequence`).

A transfer notes what it does, in order, in an optional list of events (``("post kv", 2)``:
the key/value chunk for ring step 2 was posted), beside the computation's own notes: the
order shows which transfers were in flight while a chunk was computed.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["note", "RingTransfer", "all_to_all", "sequence_to_heads",
           "heads_to_sequence"]

# What a rank did, in order: (what, ring step).
Events = list[tuple[str, int]]


def note(events: Events | None, what: str, step: int) -> None:
    """Append ``(what, step)`` to ``events`` (nothing when it is ``None``)."""
    if events is not None:
        events.append((what, step))


class RingTransfer:
    """One transfer of a ring step, started when it is made: ``tensor`` to the next rank and
    a tensor of ``shape`` from the previous one, both in flight until :meth:`wait`. Notes
    ``"post <label>"`` now and ``"arrive <label>"`` when waited for."""

    def __init__(self, tensor: torch.Tensor, shape: tuple[int, ...], label: str, step: int,
                 events: Events | None = None) -> None:
        rank, world_size = dist.get_rank(), dist.get_world_size()
        self.incoming = torch.empty(shape, dtype=tensor.dtype, device=tensor.device)
        #: Bytes this rank sends in the transfer.
        self.bytes_sent = tensor.numel() * tensor.element_size()
        self._sending = tensor.contiguous()  # alive until the send completes
        self._works = dist.batch_isend_irecv([
            dist.P2POp(dist.isend, self._sending, (rank + 1) % world_size),
            dist.P2POp(dist.irecv, self.incoming, (rank - 1) % world_size)])
        self._note = (events, label, step)
        note(events, f"post {label}", step)

    def wait(self) -> torch.Tensor:
        """The received tensor, once both the send and the receive have completed (a second
        call returns it at once)."""
        if self._works:
            for work in self._works:
                work.wait()
            self._works = []
            events, label, step = self._note
            note(events, f"arrive {label}", step)
        return self.incoming


def all_to_all(parts: list[torch.Tensor], shapes: list[tuple[int, ...]]
               ) -> tuple[list[torch.Tensor], int]:
    """Send ``parts[j]`` to rank ``j`` and receive from each rank ``j`` a tensor of
    ``shapes[j]`` (this rank's own part stays here), every send and receive posted at once.
    Returns the tensors received, in rank order, and the bytes this rank sent. (gloo's
    ``all_to_all`` needs equal parts; these may differ, as a sequence's pieces do.)"""
    rank = dist.get_rank()
    received = [torch.empty(shape, dtype=parts[rank].dtype, device=parts[rank].device)
                for shape in shapes]
    received[rank] = parts[rank]
    ops = []
    for peer, part in enumerate(parts):
        if peer != rank:
            ops += [dist.P2POp(dist.isend, part.contiguous(), peer),
                    dist.P2POp(dist.irecv, received[peer], peer)]
    for work in dist.batch_isend_irecv(ops) if ops else []:
        work.wait()
    sent = sum(p.numel() * p.element_size() for peer, p in enumerate(parts) if peer != rank)
    return received, sent


def sequence_to_heads(x: torch.Tensor, counts: list[int]) -> tuple[torch.Tensor, int]:
    """``x`` ``(..., heads, tokens, d)``, this rank's tokens of every head, to the tokens of
    every rank (``counts[j]`` from rank ``j``, in rank order) of this rank's ``heads / W``
    heads; and the bytes sent."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    parts = list(x.chunk(world_size, dim=-3))
    shapes = [(*parts[rank].shape[:-2], n, x.shape[-1]) for n in counts]
    received, sent = all_to_all(parts, shapes)
    return torch.cat(received, dim=-2), sent


def heads_to_sequence(y: torch.Tensor, counts: list[int]) -> tuple[torch.Tensor, int]:
    """The inverse of :func:`sequence_to_heads`: ``y`` ``(..., heads / W, tokens of every
    rank, d)`` back to this rank's ``counts[rank]`` tokens of every head; and the bytes
    sent."""
    world_size, rank = dist.get_world_size(), dist.get_rank()
    parts = list(y.split(counts, dim=-2))
    shapes = [(*y.shape[:-2], counts[rank], y.shape[-1])] * world_size
    received, sent = all_to_all(parts, shapes)
    return torch.cat(received, dim=-3), sent
