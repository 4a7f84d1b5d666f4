"""Data parallelism's collectives: the ring all-reduce built from sends and receives, and the
broadcast and check that make the replicas start alike.

Book section: *Chapter 5, "The ring all-reduce, from send and receive"* (its cost model is
:func:`gpudl.estimate.allreduce_time`); :func:`check_replicas` is *"Replicas that start
apart"*.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from gpudl.checks import check_instance, check_int, check_ints, largest_difference, within
from gpudl.parallel.messages import ITEMSIZE, check_allreduce, rank_input
from gpudl.parallel.spawn import device_and_sync, spawn

__all__ = [
    "broadcast_parameters",
    "check_replicas",
    "ring_all_reduce",
    "ring_all_reduce_check",
    "ring_all_reduce_worker",
    "ring_chunks",
]


def ring_chunks(numel: int, world_size: int) -> list[tuple[int, int]]:
    """The ring all-reduce's ``world_size`` chunks of a tensor of ``numel`` elements, as
    ``(start, end)``: contiguous, in order, their sizes differing by at most one (some are
    empty when ``numel < world_size``)."""
    check_int("numel", numel, 0)
    check_int("world_size", world_size, 1)
    return [(i * numel // world_size, (i + 1) * numel // world_size) for i in range(world_size)]


def ring_all_reduce(tensor: torch.Tensor) -> int:
    """Sum ``tensor`` over all ranks, in place, by a ring of sends and receives; return the
    bytes this rank sent.

    Called on every rank of the default process group, like ``dist.all_reduce``. The tensor
    is cut into ``N`` chunks (:func:`ring_chunks`); rank ``r`` sends to ``r + 1`` and receives
    from ``r - 1``. **Reduce-scatter**, ``N - 1`` steps: at step ``s`` rank ``r`` sends chunk
    ``r - s`` and adds the chunk ``r - s - 1`` it receives to its own, so that afterwards it
    holds the complete sum of chunk ``r + 1``. **All-gather**, ``N - 1`` more steps: at step
    ``s`` it sends chunk ``r + 1 - s``, complete, and receives chunk ``r - s`` in its place
    (indices modulo ``N``). Each step's send and receive are posted together
    (``batch_isend_irecv``), so no rank waits for a receive that nobody has posted.

    Every rank sends ``2 (N - 1)`` chunks: ``2 (N - 1) / N`` of the tensor's bytes when ``N``
    divides its length, :func:`gpudl.estimate.allreduce_bytes_per_rank`; all ranks together
    send exactly ``2 (N - 1)`` times the tensor.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype == torch.bool or tensor.is_complex():
        raise TypeError(f"tensor must have a real numeric dtype to be summed, got {tensor.dtype}")
    if not tensor.is_contiguous():
        raise ValueError(f"tensor must be contiguous (it is summed in place), got strides "
                         f"{tensor.stride()}")
    if not dist.is_initialized():
        raise RuntimeError("ring_all_reduce needs a process group: call it inside a worker "
                           "started by gpudl.parallel.spawn.spawn or torchrun")
    world_size, rank = dist.get_world_size(), dist.get_rank()
    if world_size == 1:
        return 0
    flat = tensor.view(-1)
    chunks = ring_chunks(flat.numel(), world_size)
    incoming = torch.empty(max(end - start for start, end in chunks), dtype=tensor.dtype,
                           device=tensor.device)
    right, left = (rank + 1) % world_size, (rank - 1) % world_size
    sent = 0

    def exchange(send: int, receive: int) -> torch.Tensor:
        nonlocal sent
        (s0, s1), (r0, r1) = chunks[send], chunks[receive]
        ops = []  # an empty chunk is skipped by its sender and its receiver alike
        if s1 > s0:
            ops.append(dist.P2POp(dist.isend, flat[s0:s1], right))
            sent += s1 - s0
        if r1 > r0:
            ops.append(dist.P2POp(dist.irecv, incoming[:r1 - r0], left))
        for work in dist.batch_isend_irecv(ops) if ops else []:
            work.wait()
        return incoming[:r1 - r0]

    for step in range(world_size - 1):  # reduce-scatter
        receive = (rank - step - 1) % world_size
        start, end = chunks[receive]
        flat[start:end] += exchange((rank - step) % world_size, receive)
    for step in range(world_size - 1):  # all-gather
        receive = (rank - step) % world_size
        start, end = chunks[receive]
        flat[start:end].copy_(exchange((rank + 1 - step) % world_size, receive))
    return sent * tensor.element_size()


def _check_numels(numels: list[int]) -> None:
    check_ints("numels", numels, 1)


def ring_all_reduce_worker(rank: int, world_size: int, numels: list[int]) -> list[dict]:
    """For each length in ``numels``, all-reduce this rank's :func:`rank_input` with
    :func:`ring_all_reduce` and with ``dist.all_reduce``, and check both against
    :func:`gpudl.parallel.messages.expected_sum` exactly.

    Rows: ``numel``, ``bytes`` (of the tensor), ``bytes_sent`` (by this rank, counted by the
    ring) and ``equal`` (the two results are identical).
    """
    _check_numels(numels)
    device, _ = device_and_sync()
    rows = []
    for numel in numels:
        ours, theirs = (rank_input(rank, numel, device) for _ in range(2))
        sent = ring_all_reduce(ours)
        dist.all_reduce(theirs)
        for buffer in (ours, theirs):
            check_allreduce(buffer, world_size)
        rows.append({"numel": numel, "bytes": numel * ITEMSIZE, "bytes_sent": sent,
                     "equal": bool(torch.equal(ours, theirs))})
    return rows


def ring_all_reduce_check(
    world_size: int = 4, numels: list[int] | None = None, timeout: float = 120.0
) -> list[list[dict]]:
    """Spawn ``world_size`` ranks running :func:`ring_all_reduce_worker`; one list of rows per
    rank. The default lengths include ones the world size does not divide and ones smaller
    than it."""
    numels = [1, 3, 1000, 1001, 4099] if numels is None else numels
    _check_numels(numels)
    return spawn(ring_all_reduce_worker, world_size, numels, timeout=timeout)


def check_replicas(module: torch.nn.Module) -> None:
    """Raise ``RuntimeError`` on every rank unless all ranks hold the same parameters, none
    of them NaN.

    Each parameter's elementwise maximum and minimum over the ranks are all-reduced; they are
    equal exactly when every rank holds the same values. A NaN compares with nothing, so a
    reduction may or may not pass it on: each rank also counts its own NaNs, and the counts
    are summed. All ranks reach the same verdict, so all of them raise (none is left waiting
    in a later collective).
    """
    check_instance("module", module, nn.Module)
    for name, param in module.named_parameters():
        high, low = param.detach().clone(), param.detach().clone()
        nans = torch.isnan(param.detach()).sum().to(torch.float64).reshape(1)
        dist.all_reduce(high, op=dist.ReduceOp.MAX)
        dist.all_reduce(low, op=dist.ReduceOp.MIN)
        dist.all_reduce(nans)
        spread = largest_difference(high, low)
        if nans.item() or not within(spread, 0.0):
            raise RuntimeError(
                f"the replicas start from different weights: parameter {name!r} differs "
                f"between ranks by up to {spread:.3g} ({int(nans.item())} NaN element(s) "
                "over all ranks). Broadcast rank 0's parameters (DistributedDataParallel "
                "does so when it is built) or seed every rank alike")


def broadcast_parameters(module: nn.Module) -> None:
    """Copy rank 0's parameters to every rank (as ``DistributedDataParallel`` does when it is
    built)."""
    check_instance("module", module, nn.Module)
    for param in module.parameters():
        dist.broadcast(param.detach(), src=0)
