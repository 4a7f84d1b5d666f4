"""Mixture of experts on one GPU, timed: the experts' products grouped into two batched
products over buffers padded to the capacity, against a loop of two products per expert.

Book section: *Chapter 11, Grouped products*.

:func:`grouped_experts` routes a batch of tokens through a layer of many small experts
(:class:`gpudl.parallel.experts.MoELayer`: on a GPU 64 experts of 2048 x 1408, each token to 6
of them, in bfloat16; tiny and in float32 on the CPU), then times
:func:`~gpudl.parallel.experts.experts_loop` (one product per expert and layer, as many
launches, each waiting for the host to know its expert's count) and
:func:`~gpudl.parallel.experts.experts_grouped` (one ``baddbmm`` per layer over ``experts x
capacity`` rows, padding included), after checking that both give the same rows. Both rows
count the useful flops, ``4 x rows x hidden x ffn``, so their rates compare the work the layer
needs. The ``matmul`` topic stores them (:func:`gpudl.bench.matmul.run`, group
``"experts"``); no speed goal is set, since which wins depends on the padding and on the
experts' size.
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import torch

from gpudl.bench import row
from gpudl.bench.timing import time_cuda
from gpudl.checks import check_instance, check_int, largest_difference, within
from gpudl.parallel.experts import (
    MoEConfig,
    MoELayer,
    experts_grouped,
    experts_loop,
    moe_batch,
    route,
)

__all__ = ["EXPERTS", "GPU_EXPERTS", "GPU_TOKENS", "grouped_experts"]

#: The layer timed on a GPU, with 64 small experts, each token to 6 (fine-grained experts, as
#: DeepSeekMoE has), a capacity factor of 1.25, and the tokens routed there.
GPU_EXPERTS, GPU_TOKENS = MoEConfig(hidden=2048, ffn=1408, experts=64, top_k=6,
                                    capacity_factor=1.25), 8192
#: The layer timed, :data:`GPU_EXPERTS` on a GPU and 8 tiny experts, top-2, on the CPU.
EXPERTS = backend.pick(
    gpu=GPU_EXPERTS, sim=MoEConfig(hidden=16, ffn=32, experts=8, top_k=2, capacity_factor=1.25))


def grouped_experts(config: MoEConfig = EXPERTS, tokens: int | None = None) -> list[dict]:
    """The rows ``"experts loop"`` and ``"experts grouped"`` of ``config``'s experts on the
    rows of ``tokens`` routed tokens (8,192 on a GPU, 64 on the CPU), each with ``group``
    ``"experts"``, the layer's sizes, ``rows`` and ``padded_rows`` (``experts x
    capacity``)."""
    check_instance("config", config, MoEConfig)
    tokens = (backend.pick(gpu=GPU_TOKENS, sim=64) if tokens is None
              else check_int("tokens", tokens, 1))
    on_gpu = backend.name() == "cuda"
    device, dtype = ("cuda", torch.bfloat16) if on_gpu else ("cpu", torch.float32)
    layer = MoELayer(config, dtype).to(device)
    x, _ = moe_batch(config, tokens, dtype=dtype)
    with torch.no_grad():
        x = x.to(device)
        routing = route(x @ layer.router.T, config.top_k, config.capacity_factor)
        rows = x[routing.sources]
        counts = routing.kept_counts
        weights = (layer.w1, layer.b1, layer.w2, layer.b2)
        loop = experts_loop(rows, counts, *weights)
        grouped = experts_grouped(rows, counts, routing.capacity, *weights)
        # bfloat16 rounds each product and sum once per path, in another order: a few of
        # its units of 2**-8 of the largest output (far less in float32)
        bound = (2.0**-5 if on_gpu else 1e-5) * float(loop.abs().max())
        error = largest_difference(loop.float(), grouped.float())
        if not within(error, bound):
            raise RuntimeError(f"the grouped experts differ from the loop by {error:.3g}, "
                               f"more than {bound:.3g}")
        timed = {"warmup": backend.pick(gpu=2, sim=0), "repeats": backend.pick(gpu=None, sim=1)}
        timings = {"experts loop": time_cuda(experts_loop, rows, counts, *weights, **timed),
                   "experts grouped": time_cuda(experts_grouped, rows, counts,
                                                routing.capacity, *weights, **timed)}
    flops = 4 * len(rows) * config.hidden * config.ffn
    keys = {"group": "experts", "experts": config.experts, "top_k": config.top_k,
            "hidden": config.hidden, "ffn": config.ffn, "tokens": tokens, "rows": len(rows),
            "padded_rows": config.experts * routing.capacity, "dtype": str(dtype)}
    return [row(name, timing, n_flops=flops, **keys) for name, timing in timings.items()]
