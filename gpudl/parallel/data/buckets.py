"""Gradient buckets by hand: flat buckets of gradients, one all-reduce each, started during the
backward pass.

Book section: *Chapter 5, "Buckets by hand"*.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from gpudl import backend

# isort: split
import torch
import torch.distributed as dist
from numba import cuda
from torch import nn

from gpudl.checks import check_choice, check_instance, check_int, check_positive, check_tensor
from gpudl.interop import as_kernel_array
from gpudl.kernels import buckets as bucket_kernels
from gpudl.parallel.data.timeline import expected_buckets

__all__ = ["BUCKET_VARIANTS", "GradientBuckets", "kernel_stream", "rank_device"]

#: The ways the bucketed strategy fills its buckets, gradients as views of them, or packed
#: and unpacked by a kernel of :mod:`gpudl.kernels.buckets` (the naive version).
BUCKET_VARIANTS = ("views", *bucket_kernels.VARIANTS)


def rank_device() -> tuple[torch.device, Callable[[], None]]:
    """This rank's device, where its tensors and the bucket kernel's arrays live: its GPU on
    a GPU (with NCCL, or ranks sharing a GPU under gloo), the CPU on the simulator; and a
    function that waits for the GPU's queued work."""
    if backend.is_simulator():
        return torch.device("cpu"), lambda: None
    return torch.device("cuda", torch.cuda.current_device()), torch.cuda.synchronize


@contextmanager
def kernel_stream(device: torch.device) -> Iterator[object]:
    """Launch Numba kernels in this device's context, on torch's current stream, so that they
    run in order with torch's own kernels and with the collectives that wait on that stream;
    stream 0 on the simulator."""
    if check_instance("device", device, torch.device).type != "cuda":
        yield 0
        return
    handle = torch.cuda.current_stream(device).cuda_stream  # 0: the legacy default stream
    with cuda.gpus[device.index]:
        yield cuda.external_stream(handle) if handle else 0


class GradientBuckets:
    """The ``"bucketed"`` strategy's gradient averaging: flat buckets, one all-reduce each,
    started during the backward pass.

    The parameters are grouped into buckets of about ``bucket_cap_mb`` MiB in the order their
    gradients become ready, the reverse of ``params`` (as DDP groups them:
    :func:`expected_buckets`). After :meth:`arm`, a hook on every
    parameter counts the gradients of its bucket as they are accumulated; when the last one
    arrives the bucket's all-reduce starts asynchronously, while the backward pass goes on
    with earlier layers, and :meth:`wait` waits for them. Unarmed (the micro-batches before
    the last, under gradient accumulation), the hooks do nothing and the gradients only
    accumulate.

    With ``variant="views"`` every ``param.grad`` is a view of its place in its bucket
    (:meth:`zero_grad` keeps it so), so backward writes the gradients straight into the
    buckets: nothing is copied. NCCL all-reduces with ``ReduceOp.AVG``; gloo has no average,
    so the bucket is summed, then scaled by ``1/N``. With a kernel of
    :mod:`gpudl.kernels.buckets` as ``variant`` (the naive version), the gradients stay
    where backward put them: the last one packs the bucket, scaled by ``1/N``, before its
    all-reduce (a sum), and :meth:`wait` unpacks the averages into ``param.grad``.
    ``copies`` counts the packs and unpacks (of a whole bucket), and the gradients the
    views version had to copy into a bucket because ``.grad`` had been replaced.
    """

    def __init__(self, params: Sequence[torch.nn.Parameter], bucket_cap_mb: float | None,
                 world_size: int, variant: str = "views") -> None:
        check_choice("variant", variant, BUCKET_VARIANTS)
        self.scale = 1.0 / check_int("world_size", world_size, 1)
        if bucket_cap_mb is not None:
            check_positive("bucket_cap_mb", bucket_cap_mb)
        if isinstance(params, torch.Tensor) or not isinstance(params, Iterable):
            raise TypeError(f"params must be a list of parameters, got {type(params).__name__}")
        self.params = list(params)
        if not self.params:
            raise ValueError("params must list at least one parameter")
        for param in self.params:
            check_tensor("params", param)
            if param.dtype != torch.float32 or not param.requires_grad:
                raise TypeError(f"params: every parameter must be float32 and require a "
                                f"gradient, got {param.dtype} "
                                f"(requires_grad={param.requires_grad})")
        ready = self.params[::-1]  # the backward pass produces the last layer's first
        groups = expected_buckets([p.numel() * p.element_size() for p in ready], bucket_cap_mb)
        self.buckets = [[ready[i] for i in group] for group in groups]
        self.flat = [torch.zeros(sum(p.numel() for p in bucket), device=bucket[0].device)
                     for bucket in self.buckets]
        self.bucket_of = {id(p): i for i, bucket in enumerate(self.buckets) for p in bucket}
        self.slot_of = {}  # each parameter's place in its bucket
        for flat, bucket in zip(self.flat, self.buckets, strict=True):
            starts = bucket_kernels.offsets([p.numel() for p in bucket])
            for p, start in zip(bucket, starts, strict=False):
                self.slot_of[id(p)] = flat[start:start + p.numel()].view_as(p)
        self.slots = [self.slot_of[id(p)] for p in self.params]
        self.variant = variant
        self.views = variant == "views"
        self.copies = 0
        self.armed = False
        self._left: list[int] = []
        self._works: dict[int, tuple[dist.Work, bool]] = {}  # bucket -> (work, summed?)
        for param in self.params:
            param.register_post_accumulate_grad_hook(self._ready)
        if self.views:
            self.zero_grad()

    def zero_grad(self) -> None:
        """Zero the buckets and, for the views version, make every ``.grad`` its view again
        (an optimizer's ``zero_grad(set_to_none=True)`` would unlink them)."""
        for flat in self.flat:
            flat.zero_()
        grads = map(operator.attrgetter("grad"), self.params)
        if self.views and not all(map(operator.is_, grads, self.slots)):
            for param, slot in zip(self.params, self.slots, strict=True):
                param.grad = slot

    def arm(self) -> None:
        """Make the next backward pass start the all-reduces."""
        self._left = [len(bucket) for bucket in self.buckets]
        self._works = {}
        self.armed = True

    def _ready(self, param: nn.Parameter) -> None:
        if not self.armed:
            return
        i = self.bucket_of[id(param)]
        self._left[i] -= 1
        if self._left[i] == 0:
            if self.views:
                self._gather(i)
            else:
                self._pack(i)
            self._works[i] = self._all_reduce(self.flat[i])

    def _gather(self, i: int) -> None:
        """Copy into bucket ``i`` the gradients that are not views of it (``.grad`` replaced
        since :meth:`zero_grad`); normally there are none."""
        for param in self.buckets[i]:
            slot = self.slot_of[id(param)]
            if param.grad is not slot:
                slot.copy_(param.grad)
                param.grad = slot
                self.copies += 1

    def _pack(self, i: int) -> None:
        """The naive version: bucket ``i`` packed from the gradients, scaled by ``1/N``."""
        with kernel_stream(self.flat[i].device) as stream:
            grads = [as_kernel_array(p.grad.view(-1), "grad") for p in self.buckets[i]]
            bucket = as_kernel_array(self.flat[i], "bucket")
            bucket_kernels.pack(grads, bucket, self.scale, self.variant, stream)
        self.copies += 1

    def _all_reduce(self, flat: torch.Tensor) -> tuple[dist.Work, bool]:
        """Start the bucket's all-reduce: NCCL averages (``ReduceOp.AVG``), gloo only sums
        (then :meth:`wait` scales), and a packed bucket, already scaled, is summed."""
        if self.views and dist.get_backend() == "nccl":
            return dist.all_reduce(flat, op=dist.ReduceOp.AVG, async_op=True), False
        return dist.all_reduce(flat, async_op=True), self.views

    def wait(self) -> int:
        """Wait for every bucket's all-reduce, leave the averages in ``param.grad`` (scaled,
        or unpacked from a packed bucket) and disarm; return the number of all-reduces.
        ``RuntimeError`` if a bucket never completed (a parameter that received no
        gradient)."""
        self.armed = False
        missing = [i for i in range(len(self.buckets)) if i not in self._works]
        if missing:
            raise RuntimeError(
                f"buckets {missing} never received all their gradients in the backward "
                "pass: some parameters did not take part in the loss")
        for i, (work, summed) in self._works.items():
            work.wait()
            if summed:
                self.flat[i].mul_(self.scale)
            elif not self.views:
                with kernel_stream(self.flat[i].device) as stream:
                    grads = [as_kernel_array(p.grad.view(-1), "grad") for p in self.buckets[i]]
                    bucket = as_kernel_array(self.flat[i], "bucket")
                    bucket_kernels.unpack(bucket, grads, self.variant, stream)
                self.copies += 1
        return len(self._works)
