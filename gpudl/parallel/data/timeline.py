"""When DDP's gradients become ready and when their bucketed all-reduces run: a timeline of
one backward pass on every rank, and a check that DDP leaves the gradients as one process
computes them.

Book section: *Chapter 5, "The backward pass across GPUs"* ("Buckets by hand" builds on it).

``DistributedDataParallel`` groups the parameters into buckets of about ``bucket_cap_mb`` MiB
in the order their gradients become ready, which is the reverse of the forward order: the
last layer's gradients first. As soon as every gradient of a bucket is ready, DDP launches
that bucket's all-reduce and the backward pass goes on with the earlier layers, so the
communication of the last layers overlaps the computation of the first ones. Two kinds of
hook record this on each rank, in seconds since the backward pass started:

* a ``register_post_accumulate_grad_hook`` on every parameter: ``"grad_ready"`` events;
* a DDP communication hook that wraps DDP's default (average by the world size, all-reduce)
  and notes when each bucket's all-reduce starts and when its future completes:
  ``"allreduce"`` events.

The buckets are the ones DDP rebuilds after the first iteration from the order it saw the
gradients arrive (:func:`expected_buckets`), so the worker runs one untimed step first.
On the CPU (gloo) the clock is ``time.perf_counter``; on GPUs (NCCL) the kernels run
asynchronously, so each time is a CUDA event recorded on the stream that does the work
(a host clock would time the launches, and a ``synchronize`` in a hook would wait for the
all-reduces in flight and remove the overlap being measured).
"""

# No `from __future__ import annotations`: DDP checks a communication hook's annotations as
# objects, and would reject the strings it makes of them.
from collections.abc import Sequence
from functools import partial

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import record_function

from gpudl.checks import (
    check_int,
    check_ints,
    check_positive,
    check_widths,
    largest,
    largest_difference,
)
from gpudl.parallel.one_process import (
    TIMELINE_BATCH_PER_RANK,
    TIMELINE_DIMS,
    make_batch,
    make_mlp,
    mlp_gradients,
)
from gpudl.parallel.spawn import Clock, device_and_sync, spawn

__all__ = ["BACKWARD_RANGE", "expected_buckets", "gradient_timeline", "timeline_worker"]

#: The name of the range around each backward pass of :func:`timeline_worker` in a profiler's
#: timeline (Appendix E reads the last one).
BACKWARD_RANGE = "DDP backward pass"

_MIB = 1024 * 1024  # DDP's bucket_cap_mb is in MiB
_DEFAULT_BUCKET_CAP_MB = 25


def _check_cap(bucket_cap_mb: object) -> None:
    """``bucket_cap_mb``: a positive number of MiB, or None (DDP's default)."""
    if bucket_cap_mb is not None:
        check_positive("bucket_cap_mb", bucket_cap_mb)


def expected_buckets(sizes_bytes: Sequence[int], bucket_cap_mb: float | None) -> list[list[int]]:
    """DDP's buckets for gradients of ``sizes_bytes``, listed in the order they become ready.

    Each bucket takes gradients in that order until it holds at least its cap (so a bucket
    exceeds the cap by less than its last gradient, and a gradient larger than the cap is a
    bucket of its own); the last bucket takes what is left. ``bucket_cap_mb`` is DDP's
    argument: a number caps every bucket at that many MiB; ``None``, DDP's default, caps the
    first bucket at ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB), so the first all-reduce can
    start early, and the others at 25 MiB (as in torch 2.13). Returns the positions in
    ``sizes_bytes`` of each bucket's gradients, bucket 0 first (the one all-reduced first).
    These are the buckets from the second step on: with ``find_unused_parameters=False`` (the
    default) DDP puts every gradient in one bucket for the first step, then rebuilds its
    buckets by this rule in the order the gradients arrived.
    """
    _check_cap(bucket_cap_mb)
    sizes_bytes = check_ints("sizes_bytes", sizes_bytes, 0)
    if bucket_cap_mb is None:
        first, rest = dist._DEFAULT_FIRST_BUCKET_BYTES, _DEFAULT_BUCKET_CAP_MB * _MIB
    else:
        first = rest = int(bucket_cap_mb * _MIB)
    buckets: list[list[int]] = []
    current: list[int] = []
    filled = 0
    for i, size in enumerate(sizes_bytes):
        current.append(i)
        filled += size
        if filled >= (rest if buckets else first):
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def timeline_worker(
    rank: int, world_size: int, bucket_cap_mb: float | None, dims: Sequence[int] = TIMELINE_DIMS,
    batch_per_rank: int = TIMELINE_BATCH_PER_RANK,
) -> dict:
    """One DDP training step's backward pass on :func:`make_mlp`,
    timed gradient by gradient and bucket by bucket (fp32, mean-squared error, this rank's
    slice of :func:`make_batch`).

    A first, untimed step lets DDP rebuild its buckets in the order the gradients arrive.
    Returns ``events``, in the order they happened on this rank:

    * ``{"kind": "grad_ready", "name", "layer", "numel", "bytes", "time_s"}``, one per
      parameter (``layer`` counts the Linear layers from 0, the input side);
    * ``{"kind": "allreduce", "bucket", "params", "n_params", "bytes", "start_s", "end_s"}``,
      one per bucket (``params`` are the names of its parameters);

    with all times in seconds since the backward pass started (after a barrier, so the ranks
    start together). Also ``backward_s`` (when ``loss.backward()`` returned: every all-reduce
    has finished and the averaged gradients are in ``param.grad``), ``grad_error`` (the
    largest difference between this rank's gradients after DDP and
    :func:`mlp_gradients` of the whole batch, relative to the
    largest reference gradient), ``rank``, ``world_size``, ``backend`` and ``bucket_cap_mb``.
    ``bucket_cap_mb`` is DDP's (``None``: its default, see :func:`expected_buckets`).
    """
    _check_cap(bucket_cap_mb)
    check_widths("dims", dims)
    check_int("batch_per_rank", batch_per_rank, 1)
    device, sync = device_and_sync()
    model = make_mlp(dims).to(device)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    layer_of = {name: linears.index(model.get_submodule(name.rsplit(".", 1)[0]))
                for name, _ in model.named_parameters()}
    name_of = {p.data_ptr(): name for name, p in model.named_parameters()}
    ddp = DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    clock = Clock(device)
    marks: list[list] = []  # [kind, what, ..., clock marks] in the order the hooks ran

    def grad_ready(name: str, param: torch.Tensor) -> None:
        marks.append(["grad_ready", name, clock.mark()])

    def timed_allreduce(
        state: None, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        start = clock.mark()
        names = [name_of[p.data_ptr()] for p in bucket.parameters()]
        record = ["allreduce", bucket.index(), names, bucket.buffer().nbytes, start, None]
        marks.append(record)

        def done(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
            record[-1] = clock.mark()
            return fut.value()

        return allreduce_hook(state, bucket).then(done)

    for name, param in model.named_parameters():
        param.register_post_accumulate_grad_hook(partial(grad_ready, name))
    ddp.register_comm_hook(None, timed_allreduce)

    x, y = (t[rank * batch_per_rank:(rank + 1) * batch_per_rank].to(device)
            for t in make_batch(world_size, dims, batch_per_rank))
    for _ in range(2):  # the first step only lets DDP see the order of the gradients
        ddp.zero_grad(set_to_none=True)
        marks.clear()
        loss = nn.functional.mse_loss(ddp(x), y)
        sync()
        dist.barrier()
        began = clock.mark()
        with record_function(BACKWARD_RANGE):  # the timed pass, named for a profiler
            loss.backward()
        ended = clock.mark()

    sizes = {name: (p.numel(), p.numel() * p.element_size()) for name, p in
             model.named_parameters()}
    events = []
    for kind, what, *times in marks:
        if kind == "grad_ready":
            numel, nbytes = sizes[what]
            events.append({"kind": kind, "name": what, "layer": layer_of[what], "numel": numel,
                           "bytes": nbytes, "time_s": clock.seconds(began, times[0])})
        else:
            names, nbytes, start, end = times
            events.append({"kind": kind, "bucket": what, "params": names,
                           "n_params": len(names), "bytes": nbytes,
                           "start_s": clock.seconds(began, start),
                           "end_s": clock.seconds(began, end)})

    reference = mlp_gradients(world_size, dims, batch_per_rank)
    scale = largest(g.abs() for g in reference.values())
    error = largest(largest_difference(p.grad, reference[name])
                    for name, p in model.named_parameters())  # NaN if any gradient is
    return {"rank": rank, "world_size": world_size, "backend": dist.get_backend(),
            "bucket_cap_mb": bucket_cap_mb, "events": events,
            "backward_s": clock.seconds(began, ended), "grad_error": error / scale}


def gradient_timeline(
    world_size: int = 2, bucket_cap_mb: float | None = 0.25, dims: Sequence[int] = TIMELINE_DIMS,
    batch_per_rank: int = TIMELINE_BATCH_PER_RANK, timeout: float = 120.0,
) -> list[dict]:
    """Spawn ``world_size`` ranks running :func:`timeline_worker`; one dict per rank."""
    _check_cap(bucket_cap_mb)
    check_widths("dims", dims)
    check_int("batch_per_rank", batch_per_rank, 1)
    return spawn(timeline_worker, world_size, bucket_cap_mb, tuple(dims), batch_per_rank,
                 timeout=timeout)
