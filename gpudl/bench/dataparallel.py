"""Chapter 5's measurements: the step time of each data-parallel strategy at each world size,
beside the cost model's prediction.

Book section: *Chapter 5, "A cost model for a step"* and its "Measured on GPUs" box.

The strategies are :mod:`gpudl.parallel.data`'s (``manual``, ``bucketed``, ``ddp``);
:func:`step_times` times them on spawned ranks and :func:`predicted_step_time` applies
:func:`gpudl.estimate.data_parallel_step_time` to what it measured. ``python -m gpudl bench
dataparallel`` runs :func:`run` and stores ``results/dataparallel-<backend>.json``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gpudl import backend, estimate

# isort: split
import torch
import torch.distributed as dist
from torch import nn

from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import Timing
from gpudl.checks import check_choice, check_instance, check_int, check_ints
from gpudl.parallel import data as data_parallel
from gpudl.parallel.spawn import spawn

__all__ = ["BARS", "VIEWS", "GPU_DIMS", "GPU_SAMPLES_PER_RANK", "GPU_WORLD_SIZES",
           "predicted_step_time", "run", "step_times", "step_times_worker"]

#: The MLP's layer widths, the samples each rank takes and the world sizes timed on GPUs
#: (those the machine has GPUs for).
GPU_DIMS, GPU_SAMPLES_PER_RANK, GPU_WORLD_SIZES = (2048,) * 8, 1024, (1, 2, 4, 8)

_FIT_BYTES = 4 << 20  # the largest all-reduce step_times_worker fits the ring model to

#: The speed goal of the issue on GPU speed, at each world size measured.
BARS = (
    {"name": "bucketed_vs_ddp_x{ws}",
     "what": "time of a bucketed step over DDP's, same model and data (within 10%)",
     "numerator": "bucketed step x{ws}", "denominator": "ddp step x{ws}", "threshold": 1.10,
     "compare": "<=", "rate": "median_s"},
)
#: The book's boxes of this topic (``{gpudl-measured} dataparallel <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"steps": ("bucketed_vs_ddp_x{ws}",)}


def step_times_worker(rank: int, world_size: int, strategies: Sequence[str],
                      setup: data_parallel.Setup, steps: int, warmup: int) -> dict:
    """Time training steps of each distributed strategy on this rank's share of a fixed
    global batch, and what the cost model needs.

    Each timed step starts after a barrier (and a ``cuda.synchronize`` on a GPU) and lasts
    until the update has finished; a step takes as long as its slowest rank (max-reduced),
    and the median over ``steps`` timed steps (after ``warmup``) is reported. Returns
    ``step_s`` per strategy (and ``timings``, their samples), ``compute_s`` (the same step with
    no communication at all), ``backward_fraction`` (the backward pass's share of
    ``compute_s``), ``grad_bytes``, ``n_buckets``, and ``allreduce`` (sizes and fastest times of
    all-reduces of one bucket, of all the gradients and of at least 4 MiB, to fit the ring
    model to), with ``world_size`` and ``backend``.
    """
    _check_times(strategies, setup, world_size, steps, warmup)
    device, sync = data_parallel.rank_device()
    generator = torch.Generator().manual_seed(rank)
    share = setup.global_batch // world_size
    x = torch.randn(share, setup.dims[0], generator=generator).to(device)
    y = torch.randn(share, setup.dims[-1], generator=generator).to(device)

    def timed(step: Callable[[], object]) -> Timing:
        times = []
        for i in range(warmup + steps):
            dist.barrier()
            sync()
            start = time.perf_counter()
            step()
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        slowest = torch.tensor(times, dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        return Timing(tuple(slowest.tolist()), "wall-clock", True)

    out: dict = {"world_size": world_size, "backend": dist.get_backend(), "step_s": {},
                 "timings": {}}
    for strategy in strategies:
        if strategy == "single":
            continue
        replica = data_parallel.Replica(strategy, setup, rank, world_size, device)
        out["timings"][strategy] = timed(lambda replica=replica: replica.step(x, y))
        out["step_s"][strategy] = out["timings"][strategy].median

    alone = data_parallel.Replica("single", setup, rank, world_size, device)
    out["compute_s"] = timed(lambda: alone.step(x, y)).median
    model = alone.model
    backward = []
    for i in range(warmup + steps):
        loss = nn.functional.mse_loss(model(x), y)
        sync()
        start = time.perf_counter()
        loss.backward()
        sync()
        if i >= warmup:
            backward.append(time.perf_counter() - start)
    out["backward_fraction"] = min(1.0, statistics.median(backward) / out["compute_s"])
    sizes = [p.numel() * p.element_size() for p in model.parameters()][::-1]
    groups = data_parallel.expected_buckets(sizes, setup.bucket_cap_mb)
    out["grad_bytes"], out["n_buckets"] = sum(sizes), len(groups)
    out["allreduce"] = []
    # one bucket, all the gradients, and at least 4 MiB: small messages measure the latency,
    # large ones the bandwidth
    bucket = out["grad_bytes"] // len(groups) // 4 * 4
    for n_bytes in sorted({bucket, out["grad_bytes"], max(out["grad_bytes"], _FIT_BYTES)}):
        buffer = torch.ones(n_bytes // 4, device=device)
        out["allreduce"].append({"size_bytes": n_bytes, "time_s": timed(  # fastest: the
            lambda buffer=buffer: dist.all_reduce(buffer)).min})  # link, not a busy CPU
    return out


def step_times(world_size: int, setup: data_parallel.Setup,
               strategies: Sequence[str] = data_parallel.STRATEGIES[1:], steps: int = 5,
               warmup: int = 2,
               timeout: float = 180.0) -> dict:
    """Spawn ``world_size`` ranks running :func:`step_times_worker`; rank 0's result (every
    rank's times are the slowest rank's)."""
    _check_times(strategies, setup, world_size, steps, warmup)
    return spawn(step_times_worker, world_size, tuple(strategies), setup, steps, warmup,
                 timeout=timeout)[0]


def _check_times(strategies: object, setup: object, world_size: object, steps: object,
                 warmup: object) -> None:
    """What a timing run needs: distributed strategies, a plan ``world_size`` ranks can
    share, at least one timed step."""
    if isinstance(strategies, str) or not isinstance(strategies, Sequence):
        raise TypeError(f"strategies must be a list of strategy names, got {strategies!r}")
    for i, strategy in enumerate(strategies):
        check_choice(f"strategies[{i}]", strategy, data_parallel.STRATEGIES[1:])
    data_parallel.check_plan(setup, world_size)
    check_int("steps", steps, 1)
    check_int("warmup", warmup, 0)


def predicted_step_time(times: dict) -> float:
    """The cost model's step time for a :func:`step_times` result: the ring all-reduce's
    latency and bandwidth fitted to its all-reduce timings (:func:`gpudl.estimate.fit_allreduce`),
    then :func:`gpudl.estimate.data_parallel_step_time` with its compute time, backward
    fraction, gradient bytes and buckets. One rank: the compute time."""
    check_instance("times", times, dict)
    world_size = times["world_size"]
    if world_size == 1:
        return times["compute_s"]
    latency, bandwidth = estimate.fit_allreduce([r["size_bytes"] for r in times["allreduce"]],
                                                [r["time_s"] for r in times["allreduce"]],
                                                world_size)
    return estimate.data_parallel_step_time(times["compute_s"], times["grad_bytes"],
                                            world_size, bandwidth, latency,
                                            times["backward_fraction"], times["n_buckets"])


def run(world_sizes: Sequence[int] | None = None,
        setup: data_parallel.Setup | None = None) -> dict:
    """Step times of the manual, bucketed and DDP strategies at each world size, the same
    share of the batch per rank (weak scaling), beside the cost model; and the speed goal:
    the bucketed step within 10% of DDP's.

    On GPUs: layer widths 2048 x 8 (29 million parameters, 117 MB of float32 gradients),
    1,024 samples per rank, DDP's default buckets, world sizes 1, 2, 4, 8 up to the number of
    GPUs (NCCL), 20 timed steps. On the simulator: the lab's tiny
    :class:`~gpudl.parallel.data.Setup` on 1, 2 and
    4 CPU processes (gloo), 5 timed steps; the times are then CPU times. One row per strategy
    and world size; ``runs`` keeps each :func:`step_times` result with its prediction
    (``predicted_step_s``, ``None`` where the all-reduce times were too noisy to fit)."""
    on_gpu = not backend.is_simulator()
    if world_sizes is not None:
        check_ints("world_sizes", world_sizes, 1)
    if setup is not None:
        check_instance("setup", setup, data_parallel.Setup)
    if world_sizes is None:
        gpus = torch.cuda.device_count() if on_gpu else 0
        world_sizes = [n for n in GPU_WORLD_SIZES if n <= gpus] if on_gpu else [1, 2, 4]
    base = setup or (data_parallel.Setup(dims=GPU_DIMS, bucket_cap_mb=None) if on_gpu
                     else data_parallel.Setup())
    share = backend.pick(gpu=GPU_SAMPLES_PER_RANK, sim=base.global_batch // 4)
    steps, warmup = backend.pick(gpu=(20, 5), sim=(5, 2))
    rows, bars, runs = [], [], []
    for world_size in world_sizes:
        print(f"[dataparallel] world size {world_size} ...", flush=True)
        times = step_times(world_size, replace(base, global_batch=share * world_size),
                           steps=steps, warmup=warmup, timeout=600)
        ws_rows = [row(f"{name} step x{world_size}", timing, world_size=world_size,
                       strategy=name, backend=times["backend"])
                   for name, timing in times.pop("timings").items()]
        try:
            times["predicted_step_s"] = predicted_step_time(times)
        except ValueError as err:  # all-reduce times too noisy to fit (a busy CPU): no model
            print(f"  no model for world size {world_size}: {err}", flush=True)
            times["predicted_step_s"] = None
        runs.append(times)
        rows += ws_rows
        bars += evaluate_bars(BARS, ws_rows, ws=world_size)
    return {"dims": list(base.dims), "samples_per_rank": share, "steps": steps,
            "warmup": warmup, "rows": rows, "bars": bars, "runs": runs}
