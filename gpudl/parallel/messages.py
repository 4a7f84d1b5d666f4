"""The messages every rank sends when a collective is measured or checked, and the exact
results each rank must get back.

Book section: *Chapter 5, "What connects GPUs"*; the all-to-all's, *Chapter 11, Two
all-to-alls*. The bandwidth benchmarks that send these messages are
:mod:`gpudl.bench.allreduce`'s; :mod:`gpudl.parallel.data.comms` checks its ring all-reduce
with them.
"""

from __future__ import annotations

import torch

from gpudl.checks import check_int, check_tensor

__all__ = ["ITEMSIZE", "check_all_to_all", "check_allreduce", "check_p2p", "expected_all_to_all",
           "expected_sum", "rank_input"]

#: Bytes per element of a message (the messages are float32).
ITEMSIZE = 4


def rank_input(rank: int, numel: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Rank ``rank``'s message: element ``i`` is ``i % 1024 + 1024 * rank`` (float32).

    Every rank and element differ, so a chunk sent to the wrong place shows; the values are
    small integers, so the sum is exact in float32 whatever order the ranks add in.
    """
    check_int("rank", rank, 0)
    i = torch.arange(check_int("numel", numel, 0), device=device)
    return (i % 1024 + 1024 * rank).to(torch.float32)


def expected_sum(world_size: int, numel: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The sum over all ranks of :func:`rank_input`: what every rank must hold afterwards."""
    check_int("world_size", world_size, 1)
    i = torch.arange(check_int("numel", numel, 0), device=device)
    return (world_size * (i % 1024) + 1024 * (world_size * (world_size - 1) // 2)).to(
        torch.float32
    )


def _check_exact(result: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    wrong = (result.flatten() != expected).nonzero().flatten()
    if len(wrong):
        first = int(wrong[0])
        raise RuntimeError(
            f"{what} is wrong at {len(wrong)} of {result.numel()} elements; the first is "
            f"index {first}: got {result.flatten()[first].item()}, "
            f"expected {expected[first].item()}"
        )


def check_allreduce(result: torch.Tensor, world_size: int) -> None:
    """Raise ``RuntimeError`` unless ``result`` is exactly the all-reduced sum of the inputs."""
    check_tensor("result", result)
    expected = expected_sum(world_size, result.numel(), result.device)
    _check_exact(result, expected, f"all-reduce over {world_size} ranks")


def check_p2p(received: torch.Tensor, sender: int) -> None:
    """Raise ``RuntimeError`` unless ``received`` is exactly rank ``sender``'s message."""
    check_tensor("received", received)
    check_int("sender", sender, 0)
    expected = rank_input(sender, received.numel(), received.device)
    _check_exact(received, expected, f"message from rank {sender}")


def expected_all_to_all(rank: int, world_size: int, numel: int,
                        device: torch.device | str = "cpu") -> torch.Tensor:
    """What rank ``rank`` holds after an all-to-all of every rank's :func:`rank_input` of
    ``numel`` elements cut into ``world_size`` equal parts: part ``rank`` of each rank's
    message, in rank order. ``ValueError`` unless ``world_size`` divides ``numel``."""
    check_int("rank", rank, 0, check_int("world_size", world_size, 1) - 1)
    if check_int("numel", numel, 0) % world_size:
        raise ValueError(f"numel ({numel}) must be divisible by the world size ({world_size}): "
                         "an all-to-all sends each rank an equal part")
    part = numel // world_size
    return torch.cat([rank_input(sender, numel, device)[rank * part:(rank + 1) * part]
                      for sender in range(world_size)])


def check_all_to_all(result: torch.Tensor, rank: int, world_size: int) -> None:
    """Raise ``RuntimeError`` unless ``result`` is exactly what rank ``rank`` of
    ``world_size`` must hold after the all-to-all of :func:`expected_all_to_all`."""
    check_tensor("result", result)
    expected = expected_all_to_all(rank, world_size, result.numel(), result.device)
    _check_exact(result, expected, f"all-to-all over {world_size} ranks, rank {rank}")
