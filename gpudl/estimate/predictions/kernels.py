"""The predictions of the boxes of Chapters 1 to 4: kernels on one GPU, from their bytes, flops
and launches.

Book section: Chapters 1 to 4, their "Measured on a GPU" boxes (:mod:`gpudl.estimate.predictions`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

from gpudl import hardware
from gpudl.bench import elementwise, launch, matmul, memory, optim
from gpudl.estimate.predictions.quantities import (
    BYTES_MOVED,
    Prediction,
    alike,
    bandwidth,
    clock,
    computed,
    mlp_params,
    moved,
    pcie,
    per_gpu,
    timed,
)

__all__ = ["BUILDERS"]

_SECTORS = "32-byte sectors fetched / memory bandwidth"
_PCIE = "bytes over PCIe, one way at a time, + bytes moved / memory bandwidth"
_ONE_STREAM = "`k (t_u + t_k + t_d)`, each step at its link's peak"
_TWO_STREAMS = "`t_u + t_k + t_d + (k - 1) max(t_u, t_k, t_d)`, each step at its link's peak"
_PATHS = "paths per warp: every warp issues both sides of the branch"
_DATASHEET = "the datasheet's memory bandwidth"
_SHARED = "SMs x 32 banks x 4 B x the clock the FP32 rate implies"
_REGISTERS = "FP32 cores x 3 operands x 4 B x the clock the FP32 rate implies"
_FLOP_RATIO = "backward flops / forward flops"
_PER_TENSOR = "one launch per tensor"
_PER_STEP = "one launch per step"
_ONCE = "each byte of the input read once and each of the output written once: no cache reuse"


# --- Chapter 1 --------------------------------------------------------------------------------


def _elementwise_bandwidth() -> list[Prediction]:
    from gpudl import registry

    n = elementwise.GPU_N
    out = [moved(v.name, v.bytes_per_element * n, "ch01-simt")
           for family in ("vector_add", "saxpy")
           for v in registry.variant_records(family).values()]
    return out + [moved(elementwise.REFERENCE, 8 * n, "ch01-simt")]


def _elementwise_divergence() -> list[Prediction]:
    from gpudl.kernels import divergence

    # the sides of the branch each warp issues: both in parity mode, one in warp mode
    paths = dict(zip(divergence.MODES, (2, 1), strict=True))
    rows = {mode: f"divergence {mode}" for mode in divergence.MODES}
    return [alike("time of `{row}` over `{over}`", paths["parity"] / paths["warp"], "", _PATHS,
                  "ch01-divergence", "estimate", rows=(rows["parity"],), over=rows["warp"],
                  fields=(("row", rows["parity"]), ("over", rows["warp"])))]


def _elementwise_cpu_vs_gpu() -> list[Prediction]:
    n = elementwise.GPU_N
    kernel = moved("saxpy cuda_kernel", 12 * n, "ch01-cpu-vs-gpu")
    # x and y up, the kernel, the result down: one after the other on the default stream
    transfers = timed("saxpy cuda_with_transfers",
                      lambda gpu: 12 * n / pcie(gpu) + 12 * n / bandwidth(gpu), _PCIE,
                      "ch01-cpu-vs-gpu", ("saxpy cuda_with_transfers",))
    return [kernel, transfers]


#: The streamed SAXPY of Chapter 1's box: elements and chunks (the lab's, on a GPU).
STREAMS_N, STREAMS_CHUNKS = 1 << 24, 8


def _streams() -> list[Prediction]:
    n, k = STREAMS_N, STREAMS_CHUNKS

    def steps(gpu: str) -> tuple[float, float, float]:
        """Upload (x and y), kernel and download of one chunk."""
        return (8 * n / k / pcie(gpu), 12 * n / k / bandwidth(gpu), 4 * n / k / pcie(gpu))

    fields = {"n": f"{n:,}", "k": str(k)}
    return [timed("SAXPY of {n} elements in {k} chunks on one stream",
                  lambda gpu: k * sum(steps(gpu)), _ONE_STREAM, "ch01-streams", **fields),
            timed("the same chunks on two streams, a copy engine each way",
                  lambda gpu: sum(steps(gpu)) + (k - 1) * max(steps(gpu)), _TWO_STREAMS,
                  "ch01-streams")]


# --- Chapter 2 --------------------------------------------------------------------------------


def _registered(family: str, n_elements: int, section: str) -> list[Prediction]:
    from gpudl import registry

    return [moved(v.name, v.bytes_per_element * n_elements, section)
            for v in registry.variant_records(family).values()]


def _memory_copies() -> list[Prediction]:
    n = memory.GPU_N
    out = _registered("copy", n, "ch02-coalescing")
    for stride in memory.STRIDES:
        count = -(-n // stride)
        # each output's word lies in a 32-byte sector of 8 words, shared with the next
        # outputs' while the stride is under 8; every store is coalesced
        read = 4 * count * min(stride, 8)
        row = f"copy stride {stride}"
        out.append(timed(row, lambda gpu, b=read + 4 * count: b / bandwidth(gpu), _SECTORS,
                         "ch02-coalescing", (row,)))
    out.append(moved("copy offset 1", 8 * (n - 1), "ch02-coalescing"))
    return out + [moved(memory.REFERENCE, 8 * n, "ch02-coalescing")]


def _nsight_dram() -> list[Prediction]:
    """Appendix E's box of Nsight Compute's DRAM bytes: a copy's, which the tracer's sectors
    count too (Chapter 2)."""
    from gpudl import registry

    n = memory.GPU_N
    return [alike("DRAM bytes of `{row}`", v.bytes_per_element * n, "MB", _ONCE,
                  "appendix-profiles-ncu", "estimate", fields=(("row", v.name),))
            for v in registry.variant_records("copy").values()]


def _memory_transposes() -> list[Prediction]:
    side = math.isqrt(memory.GPU_N)
    out = _registered("transpose", side * side, "ch02-bank-conflicts")
    return out + [moved(memory.REFERENCE, 8 * memory.GPU_N, "ch02-bank-conflicts")]


def _memory_reductions() -> list[Prediction]:
    n = memory.GPU_N
    out = _registered("reduce", n, "ch02-reductions")
    return out + [moved("torch.sum", 4 * n, "ch02-reductions"),
                  moved(memory.REFERENCE, 8 * n, "ch02-reductions")]


def _memory_hierarchy() -> list[Prediction]:
    section = "ch02-latency-bandwidth"
    return [
        Prediction("device-memory read bandwidth", per_gpu(bandwidth), "GB/s", _DATASHEET,
                   section, "bound", path=("hierarchy", "bandwidth", "HBM", "gbs")),
        Prediction("shared-memory read bandwidth",
                   per_gpu(lambda g: hardware.SPECS[g].sm_count * 32 * 4 * clock(g)),
                   "GB/s", _SHARED, section, "bound",
                   path=("hierarchy", "bandwidth", "shared", "gbs")),
        Prediction("register-file bandwidth an FMA stream needs (derived, never measured)",
                   per_gpu(lambda g: hardware.SPECS[g].cuda_cores * 12 * clock(g)), "GB/s",
                   _REGISTERS, section, "estimate", path=("hierarchy", "register_file_gbs")),
    ]


# --- Chapter 3 --------------------------------------------------------------------------------


def _matmul_gflops() -> list[Prediction]:
    from gpudl import registry
    from gpudl.kernels import matmul as matmul_kernels

    records = registry.variant_records("matmul")
    by_format = {f: [v for v in matmul_kernels.VARIANTS if records[v].precision == f]
                 for f in ("float32", "float16")}
    out = []
    for n in matmul.GPU_SIZES:
        rows = (f"torch n={n}", *(f"matmul_{v} n={n}" for v in by_format["float32"]))
        out.append(computed("every float32 kernel, n = {n}", 2 * n**3, "fp32", "ch02-roofline",
                            rows, n=f"{n:,}"))
        # the float16 Triton matmul runs on the tensor cores: the FP16 peak bounds it
        if by_format["float16"]:
            rows = tuple(f"matmul_{v} n={n}" for v in by_format["float16"])
            out.append(computed("the float16 kernel, n = {n}", 2 * n**3, "fp16",
                                "ch08-roofline", rows, n=f"{n:,}"))
    return out


def _matmul_mlp() -> list[Prediction]:
    # a multiply-add per weight and sample
    flops = 2 * mlp_params(matmul.MLP_SIZES, biases=False) * matmul.MLP_BATCH
    return [computed("mlp forward", flops, "fp32", "ch03-flops", ("mlp forward",)),
            computed("mlp forward+backward", 3 * flops, "fp32", "ch03-flops",
                      ("mlp forward+backward",)),
            alike("backward time / forward time", 2.0, "", _FLOP_RATIO, "ch03-flops",
                  "estimate", path=("backward_over_forward",))]


@cache
def _digits_step_flops() -> int:
    """The flops of one training step of Chapter 3's digits MLP on a batch of 32, counted by
    the kernel model itself (a step run on the current backend)."""
    import numpy as np

    from gpudl.models import KernelMLP

    model = KernelMLP()
    x = np.zeros((32, model.sizes[0]), np.float32)
    model.loss_and_grads(x, np.zeros(32, np.int64))
    model.sgd_step(0.2)
    return model.flops.total()


def _digits_training() -> list[Prediction]:
    flops = _digits_step_flops()
    return [computed("one training step of the digits MLP, batch of 32 ({count} flops)",
                      flops, "fp32", "ch03-flops", count=f"{flops:,}")]


# --- Chapter 4 --------------------------------------------------------------------------------


def _optim_bandwidth() -> list[Prediction]:
    from gpudl import registry

    # bytes per parameter of each method: a variant's own; torch's Adams move at least the
    # fused kernel's (the least an Adam step with float32 state can move)
    per_method = {v.name: v.bytes_per_element
                  for v in registry.variant_records("adam").values()}
    least = min(per_method.values())
    out = []
    for layout, shapes in optim.layouts(optim.GPU_SIZES, optim.GPU_SMALL):
        n = sum(shapes)
        out.append(moved(f"copy [{layout}]", 8 * n, "ch04-counted"))
        by_bytes: dict[int, list[str]] = {}
        for name in optim.METHODS:
            by_bytes.setdefault(per_method.get(name, least), []).append(f"{name} [{layout}]")
        for per_param, rows in by_bytes.items():
            if len(rows) == 1:
                out.append(moved(rows[0], per_param * n, "ch04-counted"))
                continue
            out.append(timed("the Adam steps of {per} B per parameter, `{layout}`",
                             lambda gpu, b=per_param * n: b / bandwidth(gpu), BYTES_MOVED,
                             "ch04-counted", rows, per=str(per_param), layout=layout))
    return out


def _launch_costs() -> list[Prediction]:
    tensors, size = launch.TENSORS, launch.TENSOR_SIZE
    out = []
    for variant, launches, model in (("v4_multi_tensor", 1, _PER_STEP),
                                     ("v2_fused", tensors, _PER_TENSOR)):
        row = f"Adam step host time ({variant}, {tensors} tensors)"
        out.append(alike("launches per step of `{row}`", launches, "", model,
                         "ch04-counted", "estimate", rows=(row,), field="launches_per_step",
                         fields=(("row", row),)))
    from gpudl.kernels.optim import BYTES_PER_PARAM

    out.append(timed("the GPU's own work in one Adam step over {tensors} tensors of {size}",
                     lambda gpu: BYTES_PER_PARAM * tensors * size / bandwidth(gpu), BYTES_MOVED,
                     "ch04-launch-cost", tensors=f"{tensors:,}", size=str(size)))
    return out


#: Each box of Chapters 1 to 4 -> the function of its predictions.
BUILDERS: dict[tuple[str, str | None], Callable[[], list[Prediction]]] = {
    ("elementwise", "bandwidth"): _elementwise_bandwidth,
    ("elementwise", "divergence"): _elementwise_divergence,
    ("elementwise", "cpu_vs_gpu"): _elementwise_cpu_vs_gpu,
    ("streams", None): _streams,
    ("memory", "copies"): _memory_copies,
    ("memory", "transposes"): _memory_transposes,
    ("nsight-dram", None): _nsight_dram,
    ("memory", "reductions"): _memory_reductions,
    ("memory", "hierarchy"): _memory_hierarchy,
    ("matmul", "gflops"): _matmul_gflops,
    ("matmul", "mlp"): _matmul_mlp,
    ("digits-training", None): _digits_training,
    ("optim", "bandwidth"): _optim_bandwidth,
    ("launch", "costs"): _launch_costs,
}
