"""Comparing GPUs for training: datasheet peaks per precision, memory and power.

Book section: *Chapter 7, "Choosing a GPU"* (and *Chapter 8, "Tensor cores"* for the peaks per
precision). The matmul rate this machine reaches is measured by :mod:`gpudl.bench.precision`.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpudl.checks import check_choice, check_positive
from gpudl.hardware.specs import SPECS, GpuSpec, spec

__all__ = ["PRECISIONS", "compare_gpus", "peak_flops"]

#: The precisions :func:`peak_flops` knows, and the :class:`GpuSpec` field each one reads:
#: FP32 on the CUDA cores, FP16 (with FP32 accumulation), BF16 and TF32 on the tensor cores.
PRECISIONS: dict[str, str] = {
    "fp32": "fp32_tflops", "fp16": "fp16_tensor_tflops", "bf16": "bf16_tflops",
    "tf32": "tf32_tflops",
}


def peak_flops(name: str, precision: str = "bf16") -> float:
    """The datasheet's dense peak of the GPU called ``name``, in flop/s.

    Book section: *Chapter 7, "Choosing a GPU"* and *Chapter 8, "Tensor cores"*.
    ``precision`` is ``"fp32"``, ``"fp16"`` (tensor cores with FP32 accumulation, the
    mixed-precision training case), ``"bf16"`` or ``"tf32"`` (see :data:`PRECISIONS`). An
    unknown name raises :func:`spec`'s ``ValueError``, which lists the known ones; a GPU
    without such units (a V100 has no BF16) raises a ``ValueError``.
    """
    check_choice("precision", precision, tuple(PRECISIONS))
    gpu = spec(name)
    tflops = getattr(gpu, PRECISIONS[precision])
    if tflops is None:
        has = [p for p, f in PRECISIONS.items() if getattr(gpu, f) is not None]
        raise ValueError(f"{name} has no {precision} units; it has {', '.join(has)}")
    return tflops * 1e12


def _training_tflops(gpu: GpuSpec) -> float:
    """The rate mixed-precision training can use: BF16, else FP16 tensor cores, else FP32."""
    return next(t for t in (gpu.bf16_tflops, gpu.fp16_tensor_tflops, gpu.fp32_tflops)
                if t is not None)


def compare_gpus(bytes_per_gpu: float | None = None,
                 names: Sequence[str] | None = None) -> list[dict]:
    """One row per GPU of :data:`SPECS` (or of ``names``, in that order), for choosing one.

    Book section: *Chapter 7, "Choosing a GPU"*. Each row has the datasheet's ``name``,
    ``memory_gb``, ``bandwidth_gbs``, ``fp32_tflops`` and ``tdp_watts``; ``training_tflops``,
    the dense rate of mixed-precision training (BF16 tensor cores, else FP16, else FP32);
    ``tflop_per_joule``, that rate over the board power (teraflops per joule at the peak);
    and ``fits``: whether ``bytes_per_gpu`` (say, from
    :func:`gpudl.estimate.model_state_memory` plus activations) fit in its memory, taken as
    the datasheet's gigabytes of 10**9 bytes (``None`` when no size is given).
    """
    if bytes_per_gpu is not None:
        check_positive("bytes_per_gpu", bytes_per_gpu)
    if isinstance(names, str) or not isinstance(names, Sequence | None):
        raise TypeError(f"names must be a sequence of GPU names, got {names!r}")
    rows = []
    for gpu in (SPECS.values() if names is None
                else [spec(n, f"names[{i}]") for i, n in enumerate(names)]):
        rate = _training_tflops(gpu)
        rows.append({
            "name": gpu.name,
            "memory_gb": gpu.memory_gb,
            "bandwidth_gbs": gpu.memory_bandwidth_gbs,
            "fp32_tflops": gpu.fp32_tflops,
            "training_tflops": rate,
            "tdp_watts": gpu.tdp_watts,
            "tflop_per_joule": rate / gpu.tdp_watts,
            "fits": None if bytes_per_gpu is None else bytes_per_gpu <= gpu.memory_gb * 1e9,
        })
    return rows
