"""The book's programs recorded with ``torch.profiler``: a DDP backward pass, two pipeline
schedules, a training step of the kernel MLP and Chapter 1's streams, stored trimmed in
``results/profiles/``; on a GPU, the same with CUDA activities and Chapter 9's decode step eager
against its CUDA graph's replay.

Book section: *Appendix E, "Reading a profile"*.

``python -m gpudl profiles record [NAME ...]`` (``make profiles``) records the profiles of
:data:`gpudl.profiles.STORED` on the simulator and gloo (:func:`record_stored`). On a GPU,
``python -m gpudl bench profiles`` (the topic ``profiles`` of ``bench all``) records the GPU
profiles and stores them inside ``results/profiles-cuda.json`` with rows counted and timed from
them (:func:`run`): what a box of Appendix E draws, or says is not yet measured.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from gpudl import backend

# isort: split
import numpy as np
import torch
from torch.profiler import record_function

from gpudl import models
from gpudl.bench import row
from gpudl.bench.profiler import profiled_worker, record, starts_us, trimmed, write
from gpudl.bench.timing import Timing
from gpudl.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_positive,
    check_widths,
)
from gpudl.estimate import bubble_fraction
from gpudl.hardware import describe
from gpudl.kernels.streams import saxpy_streamed
from gpudl.models import graphs
from gpudl.models.encoder import EncoderConfig
from gpudl.parallel.data.timeline import BACKWARD_RANGE, timeline_worker
from gpudl.parallel.one_process import TIMELINE_BATCH_PER_RANK, TIMELINE_DIMS
from gpudl.parallel.pipeline import PipelinePlan, idle_fraction, pipeline_worker, simulate
from gpudl.parallel.spawn import spawn
from gpudl.profiles import FOLDER, STORED, action_timelines, spans

__all__ = ["BARS", "VIEWS", "GPU_PROFILES", "GPU_STREAMS_N", "STREAMS_CHUNKS", "MLP_SIZES",
           "record_ddp", "record_pipeline", "record_mlp_step",
           "record_streams", "record_decode", "record_stored", "run"]

#: The topic's speed goals, none (its boxes show counts, and times beside a model).
BARS: tuple = ()
#: The boxes of Appendix E (``{gpudl-measured} profiles <view>``): launches counted in the GPU
#: profiles, and kernel times beside the bandwidth model.
VIEWS = {"launches": (), "kernels": ()}
#: The profiles the GPU run stores inside its record.
GPU_PROFILES = ("mlp-step-cuda", "streams-cuda", "decode-eager-cuda", "decode-graph-cuda")

#: The streams' elements on a GPU (2,048 on the simulator) and their chunks.
GPU_STREAMS_N, STREAMS_CHUNKS = 2**24, 8
#: The kernel MLP's layer widths, Chapter 3's network.
MLP_SIZES = (64, 32, 10)

_GPU_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
#: The range of one step in each profile of the topic: what its row counts and times.
_STEPS = ("training step", "saxpy_streamed", "decode step")
_API_WORDS = ("Launch", "Memcpy", "Memset", "Synchronize")


def _keeps(names: Sequence[str]) -> Callable[[dict], bool]:
    """Keep the events named by ``names`` (prefixes), the host ranges, and a GPU's kernels,
    copies, memsets and the runtime calls that launch, copy or wait for them."""
    def keep(event: dict) -> bool:
        name, category = event.get("name", ""), event.get("cat", "")
        return (name.startswith((*names, "gpudl:")) or category in _GPU_CATEGORIES
                or (category.startswith("cuda_") and any(w in name for w in _API_WORDS)))
    return keep


def _about(name: str, program: dict, **more: object) -> dict:
    return {"what": STORED.get(name, name), "program": program, **more}


# ------------------------------------------------------------------------------------------
# Chapter 5: a DDP backward pass
# ------------------------------------------------------------------------------------------

def record_ddp(world_size: int = 2, bucket_cap_mb: float = 0.25,
               dims: Sequence[int] = TIMELINE_DIMS, timeout: float = 180.0
               ) -> tuple[list[dict], dict]:
    """The timed backward pass of :func:`gpudl.parallel.data.timeline_worker` on every rank,
    with shapes recorded: events and what they show. Each bucket's ``c10d::allreduce_`` (DDP
    asks for it) and ``gloo:all_reduce`` (gloo's thread runs it) gets ``bucket``, each
    ``AddmmBackward0`` its ``layer`` (the order of the forward operations' sequence numbers);
    beside them the buckets' layers and the hooks' timeline of the same pass."""
    check_int("world_size", world_size, 2)
    check_positive("bucket_cap_mb", bucket_cap_mb)
    check_widths("dims", dims)
    check_positive("timeout", timeout)
    names = (BACKWARD_RANGE, "autograd::engine::evaluate_function", "c10d::allreduce_",
             "gloo:all_reduce")
    ranks = spawn(profiled_worker, world_size, timeline_worker, True, names, bucket_cap_mb,
                  tuple(dims), TIMELINE_BATCH_PER_RANK, timeout=timeout, backend="gloo")
    passes = [starts_us(r["trace"], BACKWARD_RANGE)[-1] for r in ranks]  # the timed one
    events = trimmed([r["trace"] for r in ranks], [f"rank {k}" for k in range(world_size)],
                     passes, _keeps(names))
    result = ranks[0]["result"]
    layer_of = {e["name"]: e["layer"] for e in result["events"] if e["kind"] == "grad_ready"}
    buckets = [{"bucket": e["bucket"], "numel": e["bytes"] // 4,
                "layers": sorted({layer_of[p] for p in e["params"]})}
               for e in result["events"] if e["kind"] == "allreduce"]
    bucket_of = {b["numel"]: b["bucket"] for b in buckets}
    for event in events:
        dims_in = event["args"].get("Input Dims")
        if event["name"] in ("gloo:all_reduce", "c10d::allreduce_") and dims_in:
            numel = dims_in[0][0] if event["name"] == "gloo:all_reduce" else dims_in[0][0][0]
            event["args"]["bucket"] = bucket_of[numel]
    for pid in range(world_size):
        matmuls = sorted((e for e in events if e["pid"] == pid and e["name"].endswith(
            "AddmmBackward0")), key=lambda e: e["args"]["Sequence number"])
        for layer, event in enumerate(matmuls):
            event["args"]["layer"] = layer
    hooks = [{"rank": r["result"]["rank"], "backward_s": r["result"]["backward_s"],
              "allreduce": [{k: e[k] for k in ("bucket", "start_s", "end_s")}
                            for e in r["result"]["events"] if e["kind"] == "allreduce"]}
             for r in ranks]
    return events, _about("ddp-gloo", {
        "worker": "gpudl.parallel.data.timeline_worker", "world_size": world_size,
        "bucket_cap_mb": bucket_cap_mb, "dims": list(dims),
        "batch_per_rank": TIMELINE_BATCH_PER_RANK}, buckets=buckets, hooks=hooks)


# ------------------------------------------------------------------------------------------
# Chapter 6: pipeline schedules
# ------------------------------------------------------------------------------------------

def record_pipeline(schedule: str, microbatches: int = 4, world_size: int = 4,
                    pace_s: float = 0.03, steps: int = 3, timeout: float = 300.0
                    ) -> tuple[list[dict], dict]:
    """``steps`` hand-written steps of ``schedule`` on ``world_size`` gloo stages (a block of
    the encoder each, every pass paced, :class:`gpudl.parallel.pipeline.PipelinePlan`); the
    step whose idle fraction is the median of the steps' is kept (a stall of the busy machine
    spoils one step, not the median). Kept: each pass's range (``forward 3``), the posted
    sends (``c10d::send``) and the waits for a message (``gloo:recv``); not ``gloo:send``,
    whose range lasts until the send is waited for at the end of the step."""
    check_choice("schedule", schedule, ("gpipe", "1f1b"))
    check_int("world_size", world_size, 1)
    check_int("steps", steps, 1)
    check_positive("pace_s", pace_s)  # paced: the formula's equal passes
    check_positive("timeout", timeout)
    plan = PipelinePlan(schedule, microbatches, steps=steps, pace_s=pace_s,
                        config=EncoderConfig(layers=world_size))
    names = ("forward ", "backward ", "gloo:recv", "c10d::send")
    ranks = spawn(profiled_worker, world_size, pipeline_worker, False, names, [plan],
                  timeout=timeout, backend="gloo")
    traces = [r["trace"] for r in ranks]
    per_step = 2 * microbatches  # each stage's actions in one step
    actions = [sorted(a for kind in ("forward", "backward") for i in range(microbatches)
                      for a in starts_us(trace, f"{kind} {i}")) for trace in traces]
    windows = [(min(a[j * per_step][0] for a in actions),
                max(a[(j + 1) * per_step - 1][1] for a in actions)) for j in range(steps)]
    idle = []
    for window in windows:
        step = trimmed(traces, [f"rank {k}" for k in range(world_size)], [window],
                       _keeps(names[:2]))
        idle.append(idle_fraction(action_timelines(_as_trace(step))))
    kept = sorted(range(steps), key=idle.__getitem__)[steps // 2]
    events = trimmed(traces, [f"rank {k}" for k in range(world_size)], [windows[kept]],
                     _keeps(names))
    return events, _about(f"pipeline-{schedule}-gloo", {
        "worker": "gpudl.parallel.pipeline.pipeline_worker", "schedule": schedule,
        "stages": world_size, "microbatches": microbatches, "pace_s": pace_s,
        "batch": plan.batch, "layers": plan.config.layers},
        bubble_fraction=bubble_fraction(world_size, microbatches),
        simulated_idle=idle_fraction(simulate(schedule, world_size, microbatches)),
        idle_by_step=idle, step_kept=kept)


def _as_trace(events: list[dict]) -> dict:
    """Events as a trace :mod:`gpudl.profiles` reads (before they are stored)."""
    return {"traceEvents": events, "gpudl": {"profile": "", "machine": {}, "date": ""}}


# ------------------------------------------------------------------------------------------
# Chapter 3: the kernel MLP's training step; Chapter 1: streams
# ------------------------------------------------------------------------------------------

def _single(name: str, function: Callable[[], object], step: str, names: Sequence[str]
            ) -> list[dict]:
    """``function`` recorded in this process; the events of its last range called ``step``."""
    _, trace = record(function)
    window = starts_us(trace, step)[-1]
    window = (window[0], window[1] + 1e3)  # the GPU's last work ends after the host's call
    process = "GPU run" if not backend.is_simulator() else "simulator"
    return trimmed([trace], [process], [window], _keeps((step, *names)))


def record_mlp_step(sizes: Sequence[int] = MLP_SIZES, batch: int = 32) -> tuple[list[dict],
                                                                                    dict]:
    """One training step of Chapter 3's :class:`gpudl.models.KernelMLP` as ``train`` takes
    it (host batches in, host gradients out; a first, unrecorded step before it): its parts
    (``forward``, ``loss``, ``backward``, ``update``), every launch, memset and copy."""
    sizes = check_widths("sizes", sizes)
    check_int("batch", batch, 1)
    model = models.KernelMLP(sizes)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, sizes[0])).astype(np.float32)
    labels = rng.integers(0, sizes[-1], batch)

    def steps() -> None:
        for _ in range(2):
            with record_function("training step"):
                model.loss_and_grads(x, labels)
                model.sgd_step(0.1)

    events = _single("mlp-step", steps, "training step",
                     ("forward", "loss", "backward", "update"))
    return events, _about(f"mlp-step-{backend.name()}", {
        "model": "gpudl.models.KernelMLP", "sizes": list(sizes), "batch": batch},
        launches_per_step=model.launches_per_step())


def record_streams(n: int | None = None, chunks: int = STREAMS_CHUNKS, streams: int = 2
                   ) -> tuple[list[dict], dict]:
    """One call of Chapter 1's :func:`gpudl.kernels.streams.saxpy_streamed` (after one
    unrecorded call): each chunk's two uploads, its memset, its kernel and its download, each
    with its stream. ``n`` elements: 2**24 on a GPU, 2,048 on the simulator."""
    n = backend.pick(gpu=GPU_STREAMS_N, sim=2048) if n is None else check_int("n", n, 1)
    check_int("chunks", chunks, 1)
    check_int("streams", streams, 1)
    rng = np.random.default_rng(0)
    x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))

    def calls() -> None:
        for _ in range(2):
            with record_function("saxpy_streamed"):
                saxpy_streamed(2.0, x, y, chunks, streams)

    events = _single("streams", calls, "saxpy_streamed", ())
    return events, _about(f"streams-{backend.name()}", {
        "function": "gpudl.kernels.streams.saxpy_streamed", "n": n, "chunks": chunks,
        "streams": streams}, synchronous=backend.is_simulator())


# ------------------------------------------------------------------------------------------
# Chapter 9: a decode step, eager and replayed (GPU only)
# ------------------------------------------------------------------------------------------

def record_decode(repeats: int = 5) -> dict[str, tuple[list[dict], dict]]:
    """The tiny decoder's step ``repeats`` times eagerly and ``repeats`` times as its CUDA
    graph's replay (captured before the recording), each a range, the steps rewound to
    position 0 between them. GPU only."""
    check_int("repeats", repeats, 1)
    if backend.is_simulator():
        raise RuntimeError("CUDA graphs need a GPU (gpudl.models.graphs)")
    from gpudl.bench.decode import rewind_kernel

    kernels = models.KernelDecoder(models.make_decoder())
    kernels.step()
    graph = graphs.capture(kernels.step)
    out = {}
    for name, step in (("decode-eager-cuda", kernels.step), ("decode-graph-cuda", graph.replay)):
        def steps(step: Callable[[], None] = step) -> None:
            for _ in range(repeats):
                rewind_kernel[1, 1](kernels.positions)
                torch.cuda.synchronize()
                with record_function("decode step"):
                    step()
                    torch.cuda.synchronize()

        _, trace = record(steps)
        first, last = starts_us(trace, "decode step")[0][0], starts_us(trace, "decode step")[-1]
        out[name] = (trimmed([trace], ["GPU run"], [(first, last[1])],
                             _keeps(("decode step",))),
                     _about(name, {"model": "gpudl.models.KernelDecoder", "repeats": repeats},
                            launches_per_step=models.launches_per_step(kernels)))
    return out


# ------------------------------------------------------------------------------------------
# Storing, and the topic's run
# ------------------------------------------------------------------------------------------

def _recorders() -> dict[str, Callable[[], tuple[list[dict], dict]]]:
    return {"ddp-gloo": record_ddp,
            "pipeline-gpipe-gloo": lambda: record_pipeline("gpipe"),
            "pipeline-1f1b-gloo": lambda: record_pipeline("1f1b"),
            "mlp-step-simulator": record_mlp_step, "streams-simulator": record_streams}


def record_stored(names: Sequence[str] = tuple(STORED), folder: str | Path = FOLDER
                  ) -> list[Path]:
    """Record the profiles ``names`` of :data:`gpudl.profiles.STORED` and store each in
    ``folder``; the simulator's need the simulator backend (``GPUDL_BACKEND=simulator``)."""
    check_instance("folder", folder, (str, os.PathLike))
    if isinstance(names, str) or not isinstance(names, Sequence):
        raise TypeError(f"names must be a list of profile names, got {names!r}")
    for name in names:
        check_choice("names", name, STORED)
        if name.endswith("-simulator") and not backend.is_simulator():
            raise ValueError(f"{name} is recorded on the simulator: run with "
                             "GPUDL_BACKEND=simulator")
    paths = []
    for name in names:
        events, about = _recorders()[name]()
        paths.append(write(name, events, about, folder))
        print(f"stored {paths[-1]} ({paths[-1].stat().st_size / 1e3:.0f} kB)", flush=True)
    return paths


def _timing(samples: list[float]) -> Timing:
    return Timing(tuple(samples), "profiler" if not backend.is_simulator() else "wall-clock",
                  not backend.is_simulator())


def run(n: int | None = None, sizes: Sequence[int] = MLP_SIZES, batch: int = 32,
        decode: bool = True) -> dict:
    """The GPU profiles (:data:`GPU_PROFILES`; on the simulator the MLP step's and the
    streams' at ``n`` and ``sizes``) and rows read from them: each step's time, and the
    launches, graph launches and kernels inside its first range (group ``launches``); the
    streams' kernel beside the bandwidth model (group ``kernels``, ``model_s``: its bytes at
    the device's peak bandwidth)."""
    if n is not None:
        check_int("n", n, 1)
    sizes = check_widths("sizes", sizes)
    check_int("batch", batch, 1)
    check_bool("decode", decode)
    recorded = {"mlp-step": record_mlp_step(sizes, batch), "streams": record_streams(n)}
    if decode and not backend.is_simulator():
        recorded |= {k.removesuffix("-cuda"): v for k, v in record_decode().items()}
    profiles = {f"{k}-{backend.name()}": {"traceEvents": e, "gpudl": a}
                for k, (e, a) in recorded.items()}
    rows = []
    for name, trace in profiles.items():
        every = spans(_as_trace(trace["traceEvents"]))
        step = next(s.name for s in every if s.name in _STEPS)
        ranges = [s for s in every if s.name == step]
        first = [s for s in every if ranges[0].start_s <= s.start_s <= ranges[0].end_s]
        rows.append(row(name, _timing([s.duration_s for s in ranges]), group="launches",
                        launches=sum(s.category == "kernel launch" for s in first),
                        kernels=sum(s.category == "kernel" for s in first),
                        graph_launches=sum("GraphLaunch" in s.name for s in first)))
    bandwidth = describe().peak_memory_bandwidth_gbs
    stream_spans = spans(_as_trace(profiles[f"streams-{backend.name()}"]["traceEvents"]))
    kind = "kernel" if not backend.is_simulator() else "kernel launch"
    times = [s.duration_s for s in stream_spans if s.category == kind]
    chunk = profiles[f"streams-{backend.name()}"]["gpudl"]["program"]
    nbytes = 12 * (chunk["n"] // chunk["chunks"])  # x and y read, out written, float32
    rows.append(row("saxpy_v1_naive, one chunk", _timing(times), nbytes, group="kernels",
                    model_s=nbytes / (bandwidth * 1e9) if bandwidth else None))
    return {"profiles": profiles, "rows": rows, "bars": []}
