"""Ring and head-parallel attention run on spawned ranks for host tensors: every argument
checked before any process starts, each rank given its tokens, the results put back in
sequence order.

Book section: *Chapter 11*, ring attention and head-parallel attention; the
one-process attention they must equal is
:func:`gpudl.parallel.one_process.attention_gradients`.

:func:`context_attention` runs one job; :func:`run_context_jobs` runs several on one set of
ranks (starting processes costs seconds, computing these sizes milliseconds). A job
(:class:`ContextJob`) is ``q``, ``k``, ``v`` of shape ``(heads, seq, d)``, float32 or
float64 on the host, ``causal``, an optional gradient ``grad_out`` of the output (the
backward pass runs only with one), the ``strategy`` (``"ring"`` or ``"ulysses"``), the
``layout`` (default: ``"balanced"`` when causal, else ``"contiguous"``) and, for the ring,
``overlap``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from gpudl.checks import (
    check_bool,
    check_choice,
    check_instance,
    check_int,
    check_positive,
    check_tensor,
)
from gpudl.parallel.context.comms import Events
from gpudl.parallel.context.layout import (
    LAYOUTS,
    STRATEGIES,
    check_context_plan,
    positions,
    rank_segments,
)
from gpudl.parallel.context.ring import ring_backward, ring_forward
from gpudl.parallel.context.ulysses import ulysses_backward, ulysses_forward
from gpudl.parallel.spawn import device_and_sync, spawn

__all__ = ["ContextJob", "ContextResult", "context_worker", "run_context_jobs",
           "context_attention"]

_DTYPES = (torch.float32, torch.float64)


@dataclass(frozen=True, eq=False)
class ContextJob:
    """One attention to split over the ranks (see the module's docstring); checked when
    made."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    causal: bool = False
    grad_out: torch.Tensor | None = None
    strategy: str = "ring"
    layout: str | None = None
    overlap: bool = True

    def __post_init__(self) -> None:
        named = {"q": self.q, "k": self.k, "v": self.v}
        if self.grad_out is not None:
            named["grad_out"] = self.grad_out
        for name, t in named.items():
            check_tensor(name, t, _DTYPES, ndim=3)
            if t.device.type != "cpu":
                raise ValueError(f"{name} must be on the host (the CPU), got {t.device}")
            if t.shape != self.q.shape or t.dtype != self.q.dtype:
                raise ValueError(f"q, k, v and grad_out must have one shape (heads, seq, d) "
                                 f"and dtype; q is {tuple(self.q.shape)} {self.q.dtype}, "
                                 f"{name} {tuple(t.shape)} {t.dtype}")
        if min(self.q.shape) < 1:
            raise ValueError(f"q must hold at least one head, token and dimension, got shape "
                             f"{tuple(self.q.shape)}")
        check_bool("causal", self.causal)
        check_choice("strategy", self.strategy, STRATEGIES)
        check_choice("layout", self.layout, (None, *LAYOUTS))
        check_bool("overlap", self.overlap)

    @property
    def resolved_layout(self) -> str:
        """The layout to use, the one given or else ``"balanced"`` when causal and
        ``"contiguous"`` when not."""
        return self.layout or ("balanced" if self.causal else "contiguous")

    def check_world_size(self, world_size: int) -> None:
        """``ValueError`` unless ``world_size`` ranks can split this job
        (:func:`.layout.check_context_plan`)."""
        heads, seq_len, _ = self.q.shape
        check_context_plan(seq_len, heads, world_size, self.strategy, self.resolved_layout)


@dataclass
class ContextResult:
    """A job's results in sequence order: ``out`` ``(heads, seq, d)``, ``lse``
    ``(heads, seq)``, the gradients ``grad_q``, ``grad_k``, ``grad_v`` (``None`` without
    ``grad_out``), and per rank (``ranks``) its ``work`` and ``bytes_sent`` forward and
    backward and its ``events`` (:mod:`gpudl.parallel.context.comms`: the order of its transfers and
    computations)."""

    out: torch.Tensor
    lse: torch.Tensor
    grad_q: torch.Tensor | None
    grad_k: torch.Tensor | None
    grad_v: torch.Tensor | None
    ranks: list[dict] = field(default_factory=list)


def _run_job(rank: int, world_size: int, job: ContextJob, device: torch.device) -> dict:
    """This rank's share of ``job``: its outputs, on the host, and what it did."""
    segments = rank_segments(job.q.shape[1], world_size, job.resolved_layout)
    mine = positions(segments[rank])
    q, k, v = (x[:, mine].to(device) for x in (job.q, job.k, job.v))
    events: Events = []
    if job.strategy == "ring":
        o, lse, forward = ring_forward(q, k, v, segments, job.causal, job.overlap, events)
    else:
        o, lse, saved, forward = ulysses_forward(q, k, v, segments, job.causal)
    record = {"out": o.cpu(), "lse": lse.cpu(), "grads": None, "events": events,
              "work": forward["work"], "bytes_sent": forward["bytes_sent"]}
    if job.grad_out is not None:
        do = job.grad_out[:, mine].to(device)
        if job.strategy == "ring":
            *grads, backward = ring_backward(q, k, v, o, lse, do, segments, job.causal,
                                             job.overlap, events)
        else:
            *grads, backward = ulysses_backward(saved, do, segments, job.causal)
        record |= {"grads": [g.cpu() for g in grads], "work_backward": backward["work"],
                   "bytes_sent_backward": backward["bytes_sent"]}
    return record


def context_worker(rank: int, world_size: int, jobs: Sequence[ContextJob]) -> list[dict]:
    """Run every job of ``jobs`` on this rank (a worker for
    :func:`gpudl.parallel.spawn.spawn`): one record per job, with this rank's ``out``,
    ``lse`` and ``grads`` (``[dq, dk, dv]`` or ``None``) for its tokens, its ``work`` and
    ``bytes_sent`` (and ``work_backward``, ``bytes_sent_backward``) and its ``events``."""
    _check_jobs(jobs, world_size)
    check_int("rank", rank, 0, world_size - 1)
    device, _ = device_and_sync()
    return [_run_job(rank, world_size, job, device) for job in jobs]


def _check_jobs(jobs: object, world_size: int) -> list[ContextJob]:
    if isinstance(jobs, ContextJob | str) or not isinstance(jobs, Sequence):
        raise TypeError(f"jobs must be a list of ContextJob, got {type(jobs).__name__}")
    if not jobs:
        raise ValueError("jobs must hold at least one ContextJob, got none")
    for i, job in enumerate(jobs):
        check_instance(f"jobs[{i}]", job, ContextJob)
        job.check_world_size(world_size)
    return list(jobs)


def run_context_jobs(jobs: Sequence[ContextJob], world_size: int = 2, timeout: float = 120.0
                     ) -> list[ContextResult]:
    """Run ``jobs`` on ``world_size`` spawned ranks (every job checked against the world size
    first) and put each job's results back in sequence order."""
    check_positive("timeout", timeout)
    jobs = _check_jobs(jobs, world_size)
    per_rank = spawn(context_worker, world_size, jobs, timeout=timeout)
    results = []
    for i, job in enumerate(jobs):
        records = [ranks[i] for ranks in per_rank]
        segments = rank_segments(job.q.shape[1], world_size, job.resolved_layout)
        out, lse = torch.empty_like(job.q), torch.empty_like(job.q[..., 0])
        grads = [torch.empty_like(job.q) for _ in range(3)] if job.grad_out is not None else None
        for rank, record in enumerate(records):
            mine = positions(segments[rank])
            out[:, mine], lse[:, mine] = record["out"], record["lse"]
            for whole, part in zip(grads or [], record["grads"] or [], strict=True):
                whole[:, mine] = part
        ranks = [{key: value for key, value in r.items() if key not in ("out", "lse", "grads")}
                 for r in records]
        results.append(ContextResult(out, lse, *(grads or [None] * 3), ranks=ranks))
    return results


def context_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                      grad_out: torch.Tensor | None = None, *, strategy: str = "ring",
                      world_size: int = 2, layout: str | None = None, overlap: bool = True,
                      timeout: float = 120.0) -> ContextResult:
    """Attention of host tensors ``q``, ``k``, ``v`` ``(heads, seq, d)`` split over
    ``world_size`` spawned ranks by ``strategy`` (``"ring"`` or ``"ulysses"``), with the
    backward pass of ``grad_out`` if given: the output, log-sum-exp and gradients in
    sequence order (:class:`ContextResult`). Every argument is checked before any process
    starts."""
    job = ContextJob(q, k, v, causal, grad_out, strategy, layout, overlap)
    return run_context_jobs([job], world_size, timeout)[0]
