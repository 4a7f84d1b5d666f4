"""Chapter 11's measurement: a ring-attention step against its attention computation alone, and
against the naive ring that waits for each transfer.

Book section: *Chapter 11, "When the ring hides its transfers"*, and its "Measured on GPUs"
box (``{gpudl-measured} context ring``).

:func:`run` spawns one rank per GPU (:func:`gpudl.parallel.context.ring_step_worker`) at a
chunk the cost model says hides the ring on every GPU of its table
(:func:`gpudl.estimate.hiding_chunks`), and holds the steps to :data:`BARS`. With fewer GPUs
than ranks it stores nothing and says so; on the simulator the ranks are CPU processes at
tiny sizes and every verdict is ``None``.
"""

from __future__ import annotations

import math

from gpudl import backend
from gpudl.bench import evaluate_bars, row
from gpudl.bench.environment import gpus_missing
from gpudl.bench.timing import Timing
from gpudl.checks import check_int
from gpudl.estimate import hiding_chunks, ring_step_bytes, ring_step_flops
from gpudl.parallel.context import ring_step_worker
from gpudl.parallel.spawn import spawn

__all__ = ["BARS", "GPU_CHUNK", "VIEWS", "run"]

#: Tokens per GPU on GPUs, the power of two at or above the longest chunk that hides the ring
#: on a GPU of the cost model's table (2,198 tokens on an H100 or H200, not causal): 4,096.
GPU_CHUNK = 2 ** math.ceil(math.log2(max(hiding_chunks().values())))

#: The speed goals, time ratios per ring step at :data:`GPU_CHUNK` tokens per GPU.
BARS = (
    {"name": "ring_step_within_1_15x_of_compute",
     "what": "a ring-attention step's time over its attention computation alone, at {chunk} "
             "tokens per GPU, BF16, not causal: a chunk at which the cost model says the "
             "computation hides the transfer",
     "numerator": "ring overlapped chunk={chunk}", "denominator": "compute alone chunk={chunk}",
     "threshold": 1.15, "compare": "<=", "rate": "median_s"},
    {"name": "overlap_faster_than_waiting",
     "what": "a ring-attention step's time with the next chunk's transfer posted before the "
             "computation, over the naive ring's that waits for each transfer, at {chunk} "
             "tokens per GPU (below 1: the overlap pays)",
     "numerator": "ring overlapped chunk={chunk}", "denominator": "ring waiting chunk={chunk}",
     "threshold": 1.0, "compare": "<=", "rate": "median_s"},
)

#: The book's box of this topic (``{gpudl-measured} context ring``) and the bars it is held to.
VIEWS = {"ring": ("ring_step_within_1_15x_of_compute", "overlap_faster_than_waiting")}

_ROWS = {"compute": "compute alone", "overlapped": "ring overlapped", "waiting": "ring waiting"}


def run(world_size: int = 2, chunk: int | None = None, heads: int | None = None,
        head_dim: int | None = None, repeats: int = 5) -> dict:
    """One row per way of running a ring step on ``world_size`` ranks (``"compute alone"``,
    ``"ring overlapped"``, ``"ring waiting"``), ``chunk`` tokens per rank (default
    :data:`GPU_CHUNK`; 8 on the simulator), ``heads`` heads (16; 2) of ``head_dim`` (128; 8),
    each the slowest rank's time per step over ``repeats`` samples, and the bars of
    :data:`BARS`. Skipped, with its reason, where the machine has fewer GPUs than ranks."""
    check_int("world_size", world_size, 2)
    chunk = backend.pick(gpu=GPU_CHUNK, sim=8) if chunk is None else chunk
    heads = backend.pick(gpu=16, sim=2) if heads is None else heads
    head_dim = backend.pick(gpu=128, sim=8) if head_dim is None else head_dim
    for name, value in (("chunk", chunk), ("heads", heads), ("head_dim", head_dim),
                        ("repeats", repeats)):
        check_int(name, value, 1)
    missing = gpus_missing(world_size)
    if missing:
        print(f"[context] world size {world_size} skipped: {missing}", flush=True)
        return {"rows": [], "bars": evaluate_bars(BARS, [], chunk=chunk), "skipped": missing}
    per_rank = spawn(ring_step_worker, world_size, chunk, heads, head_dim, repeats)
    on_gpus = not backend.is_simulator()
    element = 2 if on_gpus else 4  # bf16 on GPUs, float32 on the CPU
    rows = []
    for key, label in _ROWS.items():
        slowest = tuple(max(times[key][i] for times in per_rank) for i in range(repeats))
        timing = Timing(slowest, "cuda-events" if on_gpus else "wall-clock", on_gpus)
        sent = None if key == "compute" else int(ring_step_bytes(chunk, heads, head_dim,
                                                                 element))
        rows.append(row(f"{label} chunk={chunk}", timing, sent,
                        ring_step_flops(chunk, heads, head_dim), ranks=world_size))
    return {"rows": rows, "bars": evaluate_bars(BARS, rows, chunk=chunk)}
