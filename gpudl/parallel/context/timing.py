"""A ring-attention step timed on each rank, against the same computation without the ring and
against the naive ring that waits for each transfer.

Book section: *Chapter 11*, when the ring hides its transfers (the model is
:func:`gpudl.estimate.ring_step_time`; :mod:`gpudl.bench.context` stores the measurement).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from gpudl.checks import check_int
from gpudl.parallel.context.blocks import attend_block, empty_partial
from gpudl.parallel.context.layout import rank_segments
from gpudl.parallel.context.ring import ring_forward
from gpudl.parallel.spawn import Clock, device_and_sync

__all__ = ["ring_step_worker"]


def ring_step_worker(rank: int, world_size: int, chunk: int, heads: int, head_dim: int,
                     repeats: int = 5) -> dict[str, list[float]]:
    """Seconds per ring step on this rank (a pass over the ``world_size`` chunks, divided by
    their number), not causal, ``chunk`` tokens per rank, ``heads`` heads of ``head_dim``
    (bf16 on a GPU, float32 on the CPU): ``"compute"`` (the pass's computation alone, on this
    rank's own chunk ``world_size`` times), ``"overlapped"`` (:func:`.ring.ring_forward`)
    and ``"waiting"`` (the naive ring, ``overlap=False``); ``repeats`` samples each, after
    one warm-up pass."""
    for name, value in (("chunk", chunk), ("heads", heads), ("head_dim", head_dim),
                        ("repeats", repeats)):
        check_int(name, value, 1)
    device, sync = device_and_sync()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    generator = torch.Generator().manual_seed(rank)
    q, k, v = (torch.randn(heads, chunk, head_dim, generator=generator).to(device, dtype)
               for _ in range(3))
    segments = rank_segments(world_size * chunk, world_size, "contiguous")

    def compute_alone() -> None:
        running = empty_partial(q)
        for owner in range(world_size):
            attend_block(q, k, v, segments[rank], segments[owner], False, running)

    calls = {"compute": compute_alone,
             "overlapped": lambda: ring_forward(q, k, v, segments, False, True),
             "waiting": lambda: ring_forward(q, k, v, segments, False, False)}
    clock = Clock(device)
    times: dict[str, list[float]] = {}
    for name, call in calls.items():
        call()
        sync()
        samples = []
        for _ in range(repeats):
            dist.barrier()
            start = clock.mark()
            call()
            samples.append(clock.seconds(start, clock.mark()) / world_size)
        times[name] = samples
    return times
