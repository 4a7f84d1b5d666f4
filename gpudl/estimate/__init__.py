"""Cost models: what an operation should cost, from first principles, to hold measurements to.

Book section: one module per chapter's model: :mod:`.roofline` (*Chapter 2, "The roofline"*),
:mod:`.register_file` (*Chapter 2, "Latency and bandwidth per level"*),
:mod:`.collectives` (*Chapter 5, "A cost model for a step"*, and the all-reduce of *"What
connects GPUs"*),
:mod:`.bubble` (*Chapter 6, "The bubble"*), :mod:`.training` and :mod:`.memory` (*Chapter 7*),
:mod:`.inference` and :mod:`.batching` (*Chapter 9*), and :mod:`.cli`, Chapter 7's calculators
on the command line. Every public name of the models
is importable from :mod:`gpudl.estimate` itself.

Units throughout: bytes, seconds, and bytes per second (not bits, not GB/s).
"""

from gpudl.estimate.batching import (
    POLICIES,
    Request,
    Served,
    StepCost,
    check_requests,
    request_stream,
    simulate,
)
from gpudl.estimate.bubble import bubble_fraction
from gpudl.estimate.collectives import (
    allreduce_bytes_per_rank,
    allreduce_time,
    data_parallel_step_time,
    fit_allreduce,
)
from gpudl.estimate.inference import (
    MODELS,
    ModelShape,
    critical_batch,
    decode_bytes,
    decode_flops,
    decode_intensity,
    decode_step_time,
    decode_tokens_per_second,
    kv_cache_bytes,
    prefill_intensity,
    prefill_time,
    tokens_per_price,
)
from gpudl.estimate.memory import RECOMPUTE, activation_memory, model_state_memory
from gpudl.estimate.register_file import register_file_bandwidth_gbs
from gpudl.estimate.roofline import KERNEL_INTENSITY, ridge_point, roofline
from gpudl.estimate.training import (
    mfu,
    training_cost,
    training_energy,
    training_flops,
    training_time,
)

__all__ = [
    "bubble_fraction",
    "allreduce_bytes_per_rank",
    "allreduce_time",
    "data_parallel_step_time",
    "fit_allreduce",
    "model_state_memory",
    "training_flops",
    "mfu",
    "training_time",
    "training_cost",
    "training_energy",
    "activation_memory",
    "RECOMPUTE",
    "roofline",
    "ridge_point",
    "KERNEL_INTENSITY",
    "register_file_bandwidth_gbs",
    "ModelShape",
    "MODELS",
    "kv_cache_bytes",
    "decode_flops",
    "decode_bytes",
    "decode_intensity",
    "prefill_intensity",
    "critical_batch",
    "decode_step_time",
    "prefill_time",
    "decode_tokens_per_second",
    "tokens_per_price",
    "Request",
    "StepCost",
    "Served",
    "POLICIES",
    "request_stream",
    "simulate",
    "check_requests",
]
