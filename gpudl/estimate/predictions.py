"""What the book's own models predict for each "Measured on a GPU" box, on its reference GPUs.

Book section: every chapter's "Measured on a GPU" boxes. Each prediction names the section whose
model it is: the bytes a kernel moves over the memory bandwidth (Chapters 1, 2, 4 and 9), the
roofline (*Chapter 2, "The roofline"*), the flop counts of *Chapter 3*, the ring all-reduce and
the step model of *Chapter 5*, the bubble of *Chapter 6*, and the counts of launches.

:func:`predict` gives, for a box (a benchmark topic and one of its views, or the name that a box
without a benchmark gives with ``:predict:``; :data:`BOXES`), one :class:`Prediction` per
quantity: its value on each GPU of :data:`GPUS`, from the datasheets of
:data:`gpudl.hardware.SPECS` (and :data:`LINKS`), at the sizes the benchmark times on a GPU (its
module's constants), and whether it is a bound (what no GPU can beat) or an estimate (what the
model expects). :func:`measured_value` reads the same quantity from a stored run, so that a box
can set the two side by side; :func:`expected` prints a box's predictions for one GPU, as the
labs do. :mod:`gpudl.estimate.published` holds what others measured of the same quantities.
Nothing here times anything.

Since it reads the benchmarks' sizes, this module stands above :mod:`gpudl.bench`
(``tests/test_imports.py``), and :mod:`gpudl.estimate` does not re-export it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

from gpudl import hardware
from gpudl.bench import (
    allreduce,
    attention,
    dataparallel,
    decode,
    elementwise,
    launch,
    matmul,
    memory,
    optim,
    pipeline,
    precision,
    tensorcores,
)
from gpudl.bench.message_sizes import GPU_SIZES as MESSAGE_SIZES
from gpudl.bench.message_sizes import human_size
from gpudl.checks import check_choice, check_instance, check_real
from gpudl.estimate.bubble import bubble_fraction
from gpudl.estimate.collectives import allreduce_time, data_parallel_step_time
from gpudl.estimate.memory_per_gpu import model_state_memory
from gpudl.estimate.published import PUBLISHED, Published

__all__ = ["BOXES", "GPUS", "KINDS", "LINKS", "UNITS", "Prediction", "expected",
           "measured_value", "predict", "published", "reference_gpu", "shown"]

#: The book's reference GPUs, names of :data:`gpudl.hardware.SPECS`: every box predicts for each.
GPUS = ("H100 SXM", "H200 SXM")
#: One direction of each reference GPU's links, bytes/s: the datasheets give both directions
#: together, 900 GB/s of NVLink and 128 GB/s of PCIe Gen5 (nvidia2022h100, nvidia2024h200).
LINKS: dict[str, dict[str, float]] = {gpu: {"NVLink": 450e9, "PCIe": 64e9} for gpu in GPUS}
#: A bound is what no run on that GPU can beat; an estimate is what the model expects.
KINDS = ("bound", "estimate")
#: Display unit -> how many of it one SI unit (second, byte/s, flop/s, byte, or a plain number)
#: makes.
UNITS: dict[str, float] = {"ms": 1e3, "µs": 1e6, "GB/s": 1e-9, "TFLOP/s": 1e-12, "MB": 1e-6,
                           "": 1.0}
#: A stored row's field -> the SI units of one of its units (the others are plain numbers).
_FIELD_SI = {"median_s": 1.0, "min_s": 1.0, "time_s": 1.0, "makespan_s": 1.0, "gbps": 1e9,
             "busbw_gbs": 1e9, "gbs": 1e9, "register_file_gbs": 1e9, "tflops": 1e12}


@dataclass(frozen=True)
class Prediction:
    """One predicted quantity of a box.

    ``quantity`` names it: a benchmark row's name (then ``rows`` holds it), or an English
    phrase with ``{placeholders}`` filled from ``fields``. ``values`` are its values on each
    GPU of :data:`GPUS`, in SI units (seconds, bytes/s, flop/s, bytes, or a plain number),
    shown in ``unit`` (:data:`UNITS`). ``model`` says in a phrase how it is computed,
    ``section`` is the label of the book section whose model it is, ``kind`` one of
    :data:`KINDS`. A stored run is held to it by :func:`measured_value`: ``field`` of each of
    ``rows`` (over the same field of the row ``over``, for a ratio), or the value at ``path``
    in the record when it has no rows."""

    quantity: str
    values: tuple[float, ...]
    unit: str
    model: str
    section: str
    kind: str
    rows: tuple[str, ...] = ()
    field: str = "median_s"
    over: str | None = None
    path: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()


# --- the models' phrases (each a message of the boxes' catalogue) -----------------------------

_BYTES = "bytes moved / memory bandwidth"
_SECTORS = "32-byte sectors fetched / memory bandwidth"
_PCIE = "bytes over PCIe, one way at a time, + bytes moved / memory bandwidth"
_ONE_STREAM = "`k (t_u + t_k + t_d)`, each step at its link's peak"
_TWO_STREAMS = "`t_u + t_k + t_d + (k - 1) max(t_u, t_k, t_d)`, each step at its link's peak"
_PATHS = "paths per warp: every warp issues both sides of the branch"
_DATASHEET = "the datasheet's memory bandwidth"
_SHARED = "SMs x 32 banks x 4 B x the clock the FP32 rate implies"
_REGISTERS = "FP32 cores x 3 operands x 4 B x the clock the FP32 rate implies"
_FLOPS = {"fp32": "flops / FP32 peak", "tf32": "flops / TF32 peak",
          "bf16": "flops / BF16 peak", "fp16": "flops / FP16 peak"}
_TRAFFIC = "roofline: the longer of flops / FP32 peak and bytes requested / memory bandwidth"
_FLOP_RATIO = "backward flops / forward flops"
_PER_TENSOR = "one launch per tensor"
_PER_STEP = "one launch per step"
_RING = "ring all-reduce: `2 (N - 1) / N x S / B`, `B` one direction of NVLink"
_BUS = "bus bandwidth of the ring: `B`, one direction of NVLink"
_LINK = "`S / B`, `B` one direction of NVLink"
_STEP = "compute at the FP32 peak + the ring all-reduce the backward pass does not hide"
_BUBBLE = "idle share `(p - 1) / (m + p - 1)`"
_BIAS_GELU = "bytes per element: 16 unfused (two passes), 8 fused"
_STATE = "model state with Adam in float32: 16 B per parameter, ZeRO-1 `8 + 8 / N`"
_COUNTED = "kernels launched per step, counted"


def _bandwidth(gpu: str) -> float:
    return hardware.SPECS[gpu].memory_bandwidth_gbs * 1e9


def _clock(gpu: str) -> float:
    """The SM clock the datasheet's FP32 rate implies: 2 flops per core per clock."""
    spec = hardware.SPECS[gpu]
    return spec.fp32_tflops * 1e12 / (2 * spec.cuda_cores)


def _per_gpu(value: Callable[[str], float]) -> tuple[float, ...]:
    return tuple(float(value(gpu)) for gpu in GPUS)


def _time_unit(seconds: float) -> str:
    return "µs" if seconds < 1e-4 else "ms"


def _time(quantity: str, seconds: Callable[[str], float], model: str, section: str,
          rows: Sequence[str] = (), kind: str = "bound", field: str = "median_s",
          **fields: str) -> Prediction:
    """A time predicted on each GPU (in ms, or µs when it is short on the first one), held
    to the rows' ``field``."""
    values = _per_gpu(seconds)
    return Prediction(quantity, values, _time_unit(values[0]), model, section, kind,
                      tuple(rows), field, fields=tuple(fields.items()))


def _moved(row: str, n_bytes: float, section: str) -> Prediction:
    """The time of the benchmark row ``row`` at the memory bandwidth: a bound."""
    return _time(row, lambda gpu: n_bytes / _bandwidth(gpu), _BYTES, section, (row,))


def _computed(quantity: str, flops: float, precision_: str, section: str,
              rows: Sequence[str] = (), **fields: str) -> Prediction:
    """The time of ``flops`` at the datasheet's peak of ``precision_``: a bound."""
    return _time(quantity, lambda gpu: flops / hardware.peak_flops(gpu, precision_),
                 _FLOPS[precision_], section, rows, **fields)


def _same(quantity: str, value: float, unit: str, model: str, section: str, kind: str,
          **keys: object) -> Prediction:
    """A quantity that the model gives alike on every GPU (a count, a share, a ratio)."""
    return Prediction(quantity, (float(value),) * len(GPUS), unit, model, section, kind,
                      **keys)


def _mlp_params(dims: Sequence[int]) -> int:
    """Weights and biases of an MLP of layer widths ``dims``."""
    return sum(a * b + b for a, b in zip(dims[:-1], dims[1:], strict=False))


# --- Chapter 1 --------------------------------------------------------------------------------


def _elementwise_bandwidth() -> list[Prediction]:
    from gpudl import registry

    n = elementwise.GPU_N
    out = [_moved(v.name, v.bytes_per_element * n, "ch01-simt")
           for family in ("vector_add", "saxpy")
           for v in registry.variant_records(family).values()]
    return out + [_moved(elementwise.REFERENCE, 8 * n, "ch01-simt")]


def _elementwise_divergence() -> list[Prediction]:
    from gpudl.kernels import divergence

    # the sides of the branch each warp issues: both in parity mode, one in warp mode
    paths = dict(zip(divergence.MODES, (2, 1), strict=True))
    rows = {mode: f"divergence {mode}" for mode in divergence.MODES}
    return [_same("time of `{row}` over `{over}`", paths["parity"] / paths["warp"], "", _PATHS,
                  "ch01-divergence", "estimate", rows=(rows["parity"],), over=rows["warp"],
                  fields=(("row", rows["parity"]), ("over", rows["warp"])))]


def _pcie(gpu: str) -> float:
    return LINKS[gpu]["PCIe"]


def _elementwise_cpu_vs_gpu() -> list[Prediction]:
    n = elementwise.GPU_N
    kernel = _moved("saxpy cuda_kernel", 12 * n, "ch01-cpu-vs-gpu")
    # x and y up, the kernel, the result down: one after the other on the default stream
    transfers = _time("saxpy cuda_with_transfers",
                      lambda gpu: 12 * n / _pcie(gpu) + 12 * n / _bandwidth(gpu), _PCIE,
                      "ch01-cpu-vs-gpu", ("saxpy cuda_with_transfers",))
    return [kernel, transfers]


#: The streamed SAXPY of Chapter 1's box: elements and chunks (the lab's, on a GPU).
STREAMS_N, STREAMS_CHUNKS = 1 << 24, 8


def _streams() -> list[Prediction]:
    n, k = STREAMS_N, STREAMS_CHUNKS

    def steps(gpu: str) -> tuple[float, float, float]:
        """Upload (x and y), kernel and download of one chunk."""
        return (8 * n / k / _pcie(gpu), 12 * n / k / _bandwidth(gpu), 4 * n / k / _pcie(gpu))

    fields = {"n": f"{n:,}", "k": str(k)}
    return [_time("SAXPY of {n} elements in {k} chunks on one stream",
                  lambda gpu: k * sum(steps(gpu)), _ONE_STREAM, "ch01-streams", **fields),
            _time("the same chunks on two streams, a copy engine each way",
                  lambda gpu: sum(steps(gpu)) + (k - 1) * max(steps(gpu)), _TWO_STREAMS,
                  "ch01-streams")]


# --- Chapter 2 --------------------------------------------------------------------------------


def _registered(family: str, n_elements: int, section: str) -> list[Prediction]:
    from gpudl import registry

    return [_moved(v.name, v.bytes_per_element * n_elements, section)
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
        out.append(_time(row, lambda gpu, b=read + 4 * count: b / _bandwidth(gpu), _SECTORS,
                         "ch02-coalescing", (row,)))
    out.append(_moved("copy offset 1", 8 * (n - 1), "ch02-coalescing"))
    return out + [_moved(memory.REFERENCE, 8 * n, "ch02-coalescing")]


def _memory_transposes() -> list[Prediction]:
    side = math.isqrt(memory.GPU_N)
    out = _registered("transpose", side * side, "ch02-bank-conflicts")
    return out + [_moved(memory.REFERENCE, 8 * memory.GPU_N, "ch02-bank-conflicts")]


def _memory_reductions() -> list[Prediction]:
    n = memory.GPU_N
    out = _registered("reduce", n, "ch02-reductions")
    return out + [_moved("torch.sum", 4 * n, "ch02-reductions"),
                  _moved(memory.REFERENCE, 8 * n, "ch02-reductions")]


def _memory_hierarchy() -> list[Prediction]:
    section = "ch02-latency-bandwidth"
    return [
        Prediction("device-memory read bandwidth", _per_gpu(_bandwidth), "GB/s", _DATASHEET,
                   section, "bound", path=("hierarchy", "bandwidth", "HBM", "gbs")),
        Prediction("shared-memory read bandwidth",
                   _per_gpu(lambda g: hardware.SPECS[g].sm_count * 32 * 4 * _clock(g)),
                   "GB/s", _SHARED, section, "bound",
                   path=("hierarchy", "bandwidth", "shared", "gbs")),
        Prediction("register-file bandwidth an FMA stream needs (derived, never measured)",
                   _per_gpu(lambda g: hardware.SPECS[g].cuda_cores * 12 * _clock(g)), "GB/s",
                   _REGISTERS, section, "estimate", path=("hierarchy", "register_file_gbs")),
    ]


# --- Chapter 3 --------------------------------------------------------------------------------


def _matmul_gflops() -> list[Prediction]:
    from gpudl.kernels import matmul as matmul_kernels

    out = []
    for n in matmul.GPU_SIZES:
        rows = (f"torch n={n}", *(f"matmul_{v} n={n}" for v in matmul_kernels.VARIANTS))
        out.append(_computed("every kernel, n = {n}", 2 * n**3, "fp32", "ch02-roofline", rows,
                             n=f"{n:,}"))
    return out


def _mlp_weights() -> int:
    sizes = matmul.MLP_SIZES
    return sum(a * b for a, b in zip(sizes[:-1], sizes[1:], strict=False))


def _matmul_mlp() -> list[Prediction]:
    flops = 2 * _mlp_weights() * matmul.MLP_BATCH  # a multiply-add per weight and sample
    return [_computed("mlp forward", flops, "fp32", "ch03-flops", ("mlp forward",)),
            _computed("mlp forward+backward", 3 * flops, "fp32", "ch03-flops",
                      ("mlp forward+backward",)),
            _same("backward time / forward time", 2.0, "", _FLOP_RATIO, "ch03-flops",
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
    return [_computed("one training step of the digits MLP, batch of 32 ({count} flops)",
                      flops, "fp32", "ch03-flops", count=f"{flops:,}")]


# --- Chapter 4 --------------------------------------------------------------------------------


def _optim_bandwidth() -> list[Prediction]:
    from gpudl import registry

    # bytes per parameter of each method: a variant's own; torch's Adams move at least the
    # fused kernel's (the least an Adam step with float32 state can move)
    moved = {v.name: v.bytes_per_element for v in registry.variant_records("adam").values()}
    least = min(moved.values())
    out = []
    for layout, shapes in optim.layouts(optim.GPU_SIZES, optim.GPU_SMALL):
        n = sum(shapes)
        out.append(_moved(f"copy [{layout}]", 8 * n, "ch04-counted"))
        by_bytes: dict[int, list[str]] = {}
        for name in optim.METHODS:
            by_bytes.setdefault(moved.get(name, least), []).append(f"{name} [{layout}]")
        for per_param, rows in by_bytes.items():
            if len(rows) == 1:
                out.append(_moved(rows[0], per_param * n, "ch04-counted"))
                continue
            out.append(_time("the Adam steps of {per} B per parameter, `{layout}`",
                             lambda gpu, b=per_param * n: b / _bandwidth(gpu), _BYTES,
                             "ch04-counted", rows, per=str(per_param), layout=layout))
    return out


def _launch_costs() -> list[Prediction]:
    tensors, size = launch.TENSORS, launch.TENSOR_SIZE
    out = []
    for variant, launches, model in (("v4_multi_tensor", 1, _PER_STEP),
                                     ("v2_fused", tensors, _PER_TENSOR)):
        row = f"Adam step host time ({variant}, {tensors} tensors)"
        out.append(_same("launches per step of `{row}`", launches, "", model,
                         "ch04-counted", "estimate", rows=(row,), field="launches_per_step",
                         fields=(("row", row),)))
    from gpudl.kernels.optim import BYTES_PER_PARAM

    out.append(_time("the GPU's own work in one Adam step over {tensors} tensors of {size}",
                     lambda gpu: BYTES_PER_PARAM * tensors * size / _bandwidth(gpu), _BYTES,
                     "ch04-launch-cost", tensors=f"{tensors:,}", size=str(size)))
    return out


# --- Chapter 5 --------------------------------------------------------------------------------


def _nvlink(gpu: str) -> float:
    return LINKS[gpu]["NVLink"]


def _allreduce_busbw() -> list[Prediction]:
    size = max(MESSAGE_SIZES)
    out = []
    for world in allreduce.WORLD_SIZES:
        row = f"all_reduce {human_size(size)} x{world}"
        out.append(_time(row, lambda gpu, w=world: allreduce_time(size, w, _nvlink(gpu)),
                         _RING, "ch05-interconnect", (row,), field="time_s"))
        out.append(Prediction(row, _per_gpu(_nvlink), "GB/s", _BUS, "ch05-interconnect",
                              "bound", (row,), field="busbw_gbs"))
    return out


def _allreduce_p2p() -> list[Prediction]:
    size = max(MESSAGE_SIZES)
    row = f"send/recv {human_size(size)}"
    return [Prediction(row, _per_gpu(_nvlink), "GB/s", _LINK, "ch05-interconnect", "bound",
                       (row,), field="gbps")]


def _ddp_timeline() -> list[Prediction]:
    from gpudl.parallel.one_process import TIMELINE_DIMS

    grad_bytes = 4 * _mlp_params(TIMELINE_DIMS)
    return [_time("all-reduce of the lab's {mb} MB of gradients on 2 GPUs",
                  lambda gpu: allreduce_time(grad_bytes, 2, _nvlink(gpu)), _RING,
                  "ch05-interconnect", mb=f"{grad_bytes / 1e6:.2f}")]


def _dataparallel_steps() -> list[Prediction]:
    from gpudl.parallel.data import expected_buckets

    dims, per_rank = dataparallel.GPU_DIMS, dataparallel.GPU_SAMPLES_PER_RANK
    params = _mlp_params(dims)
    sizes = [4 * (a * b + b) for a, b in zip(dims[:-1], dims[1:], strict=False)][::-1]
    buckets = len(expected_buckets(sizes, None))
    flops = 6 * params * per_rank  # forward and backward of one rank's share

    def step(gpu: str, world: int, n_buckets: int) -> float:
        compute = flops / hardware.peak_flops(gpu, "fp32")
        return data_parallel_step_time(compute, 4 * params, world, _nvlink(gpu),
                                       n_buckets=n_buckets)

    one = [f"{s} step x1" for s in ("manual", "bucketed", "ddp")]
    out = [_time("every step on 1 GPU (nothing to all-reduce)", lambda gpu: step(gpu, 1, 1),
                 _STEP, "ch05-cost-model", one, kind="estimate")]
    for world in (w for w in dataparallel.GPU_WORLD_SIZES if w > 1):
        out.append(_time(f"manual step x{world}", lambda gpu, w=world: step(gpu, w, 1), _STEP,
                         "ch05-cost-model", (f"manual step x{world}",), kind="estimate"))
        out.append(_time("`bucketed` and `ddp` steps on {n} GPUs",
                         lambda gpu, w=world: step(gpu, w, buckets), _STEP, "ch05-cost-model",
                         (f"bucketed step x{world}", f"ddp step x{world}"), kind="estimate",
                         n=str(world)))
    return out


# --- Chapter 6 --------------------------------------------------------------------------------


def _pipeline_bubble() -> list[Prediction]:
    p = pipeline.STAGES
    out = [_same("naive m=1", bubble_fraction(p, 1), "", _BUBBLE, "ch06-bubble", "estimate",
                 rows=("naive m=1",), field="measured")]
    for m in pipeline.MICROBATCHES:
        out.append(_same("`gpipe` and `1f1b`, m = {m}", bubble_fraction(p, m), "", _BUBBLE,
                         "ch06-bubble", "estimate", rows=(f"gpipe m={m}", f"1f1b m={m}"),
                         field="measured", fields=(("m", str(m)),)))
    return out


def _bias_gelu() -> list[Prediction]:
    return [_same("time of the unfused forward over the fused one", 16 / 8, "", _BIAS_GELU,
                  "ch06-bias-gelu", "estimate")]


def _zero() -> list[Prediction]:
    params = _mlp_params(dataparallel.GPU_DIMS)
    fields = {"params": f"{params:,}"}
    out = [_same("model state per GPU, DDP ({params} parameters)",
                 model_state_memory(params, precision="fp32"), "MB", _STATE,
                 "ch06-zero-memory", "estimate", fields=tuple(fields.items()))]
    for world in (w for w in dataparallel.GPU_WORLD_SIZES if w > 1):
        out.append(_same("model state per GPU, ZeRO-1 on {n} GPUs",
                         model_state_memory(params, n_gpus=world, zero_stage=1,
                                            precision="fp32"),
                         "MB", _STATE, "ch06-zero-memory", "estimate",
                         fields=(("n", str(world)),)))
    return out


# --- Chapters 7 and 8 -------------------------------------------------------------------------


def _precision_rates() -> list[Prediction]:
    n = precision.GPU_N
    out = [_computed(f"torch.matmul {dtype} n={n}", 2 * n**3, field_, "ch02-roofline",
                     (f"torch.matmul {dtype} n={n}",))
           for dtype, field_ in (("float32", "fp32"), ("bfloat16", "bf16"))]
    from gpudl.estimate.training_cost import training_flops

    flops = training_flops(_mlp_weights(), matmul.MLP_BATCH)
    return out + [_computed("kernel MLP step", flops, "fp32", "ch07-mfu", ("kernel MLP step",))]


def _attention_times() -> list[Prediction]:
    from gpudl.kernels import attention as attention_kernels

    heads, d = attention.GPU_HEADS, attention.HEAD_DIM
    out = []
    for s in attention.GPU_S:
        flops = attention.attention_flops(heads, s, d)
        for variant in attention_kernels.VARIANTS:
            requested = sum(attention_kernels.traffic(variant, heads, s, d).values())
            row = f"attention_{variant} s={s}"
            out.append(_time(row, lambda gpu, r=requested, f=flops: max(
                f / hardware.peak_flops(gpu, "fp32"), r / _bandwidth(gpu)), _TRAFFIC,
                "ch08-bytes", (row,), kind="estimate"))
        for name, field_ in (("torch sdpa efficient fp32", "fp32"),
                             ("torch sdpa math fp32", "fp32"), ("torch sdpa flash bf16", "bf16")):
            row = f"{name} s={s}"
            out.append(_computed(row, flops, field_, "ch08-roofline", (row,)))
    return out


def _tensorcores_torch() -> list[Prediction]:
    return [_computed(f"torch {name} n={n}", 2 * n**3, name, "ch08-roofline",
                      (f"torch {name} n={n}",))
            for name in tensorcores.TORCH_DTYPES for n in tensorcores.GPU_SIZES]


def _tensorcores_kernels() -> list[Prediction]:
    from gpudl.kernels import tensor_core_matmul

    out = []
    for n in tensorcores.GPU_KERNEL_SIZES:
        rows = tuple(f"tensor_core_{v} n={n}" for v in tensor_core_matmul.VARIANTS)
        out.append(_computed("both tensor-core kernels (BF16), n = {n}", 2 * n**3, "bf16",
                             "ch08-roofline", rows, n=f"{n:,}"))
        rows = tuple(f"matmul_{v} n={n}" for v in ("v4_register_1d", "v5_register_2d"))
        out.append(_computed("`v4_register_1d` and `v5_register_2d`, n = {n}", 2 * n**3,
                             "fp32", "ch08-roofline", rows, n=f"{n:,}"))
    return out


# --- Chapter 9 --------------------------------------------------------------------------------


def _decode_attention() -> list[Prediction]:
    from gpudl.kernels import decode as decode_kernels

    s, heads, d = decode.GPU_S, decode.GPU_HEADS, decode.GPU_D
    cache_bytes = 2 * 4 * heads * s * d  # keys and values, float32
    out = [_moved(f"decode_{v} s={s}", cache_bytes + 2 * 4 * heads * d, "ch09-bytes")
           for v in decode_kernels.VARIANTS]
    return out + [_moved(f"torch copy s={s}", 2 * cache_bytes, "ch09-bytes")]


def _decode_gemv() -> list[Prediction]:
    from gpudl.kernels import quant

    n = decode.GPU_N
    out = [_moved(f"quant_{v} n={n}", quant.weight_bytes(v, n, n) + 8 * n, "ch09-int8")
           for v in quant.VARIANTS]
    return out + [_moved(f"torch bf16 gemv n={n}", 2 * n * n + 4 * n, "ch09-int8")]


@cache
def _decoder_launches() -> int:
    """The kernels one step of the tiny decoder launches, counted by running a step."""
    from gpudl import models

    return sum(models.launches_per_step(models.KernelDecoder(models.make_decoder())).values())


def _decode_graphs() -> list[Prediction]:
    kernels, elements = decode.GRAPH_KERNELS, decode.GRAPH_ELEMENTS
    return [
        _same("kernels per step of `{row}`", kernels, "", _COUNTED, "ch09-graphs", "estimate",
              rows=("eager launches",), field="kernels", fields=(("row", "eager launches"),)),
        _same("kernels per step of `{row}`", _decoder_launches(), "", _COUNTED, "ch09-graphs",
              "estimate", rows=("tiny decoder step eager", "tiny decoder step graph"),
              field="kernels", fields=(("row", "tiny decoder step eager"),)),
        # each kernel reads and writes its float32 elements
        _time("graph replay", lambda gpu: kernels * 8 * elements / _bandwidth(gpu), _BYTES,
              "ch09-graphs", ("graph replay",)),
    ]


#: Each box -> the function of its predictions: ``(topic, view)`` of a benchmark's view, or
#: ``(name, None)`` for a box with no benchmark (``:predict: name``).
_BUILDERS: dict[tuple[str, str | None], Callable[[], list[Prediction]]] = {
    ("elementwise", "bandwidth"): _elementwise_bandwidth,
    ("elementwise", "divergence"): _elementwise_divergence,
    ("elementwise", "cpu_vs_gpu"): _elementwise_cpu_vs_gpu,
    ("streams", None): _streams,
    ("memory", "copies"): _memory_copies,
    ("memory", "transposes"): _memory_transposes,
    ("memory", "reductions"): _memory_reductions,
    ("memory", "hierarchy"): _memory_hierarchy,
    ("matmul", "gflops"): _matmul_gflops,
    ("matmul", "mlp"): _matmul_mlp,
    ("digits-training", None): _digits_training,
    ("optim", "bandwidth"): _optim_bandwidth,
    ("launch", "costs"): _launch_costs,
    ("allreduce", "busbw"): _allreduce_busbw,
    ("ddp-timeline", None): _ddp_timeline,
    ("allreduce", "p2p"): _allreduce_p2p,
    ("dataparallel", "steps"): _dataparallel_steps,
    ("pipeline", "bubble"): _pipeline_bubble,
    ("bias-gelu", None): _bias_gelu,
    ("zero", None): _zero,
    ("precision", "rates"): _precision_rates,
    ("attention", "times"): _attention_times,
    ("tensorcores", "torch"): _tensorcores_torch,
    ("tensorcores", "kernels"): _tensorcores_kernels,
    ("decode", "attention"): _decode_attention,
    ("decode", "gemv"): _decode_gemv,
    ("decode", "graphs"): _decode_graphs,
}
#: Every box that has predictions, as ``(topic, view)`` (``view`` ``None`` for a box with no
#: benchmark): the book's boxes, each of which shows its predictions.
BOXES: tuple[tuple[str, str | None], ...] = tuple(_BUILDERS)


def _check_box(topic: object, view: object) -> tuple[str, str | None]:
    topics = tuple(dict.fromkeys(t for t, _ in BOXES))
    check_choice("topic", topic, topics)
    check_choice("view", view, tuple(v for t, v in BOXES if t == topic))
    return topic, view


def predict(topic: str, view: str | None = None) -> tuple[Prediction, ...]:
    """The predictions of the box of benchmark ``topic``'s ``view``, or of the box without a
    benchmark called ``topic`` (``view`` ``None``): one :class:`Prediction` per quantity, each
    with its value on every GPU of :data:`GPUS`."""
    return _predict(*_check_box(topic, view))


@cache
def _predict(topic: str, view: str | None) -> tuple[Prediction, ...]:
    return tuple(_BUILDERS[topic, view]())


def published(topic: str, view: str | None = None) -> tuple[Published, ...]:
    """What others measured of the box's quantities (:data:`gpudl.estimate.PUBLISHED`)."""
    box = _check_box(topic, view)
    return tuple(p for p in PUBLISHED if p.box == box)


def shown(value: float, unit: str) -> str:
    """``value`` (in SI units) in ``unit`` (:data:`UNITS`), to three significant digits and
    with thousands separators (a whole number of no unit, a count, as it is):
    ``shown(2.4e-4, "ms")`` is ``"0.240"``, ``shown(1000, "")`` is ``"1,000"``."""
    check_real("value", value, finite=True)
    scaled = value * UNITS[check_choice("unit", unit, tuple(UNITS))]
    if scaled == round(scaled) and (unit == "" or abs(scaled) >= 100):
        return f"{round(scaled):,}"  # a count, or a number of three digits or more
    digits = max(0, 2 - math.floor(math.log10(abs(scaled))))
    return f"{scaled:,.{digits}f}"


def _quantity(prediction: Prediction) -> str:
    text = prediction.quantity.format(**dict(prediction.fields))
    return f"`{text}`" if text in prediction.rows else text


def expected(topic: str, view: str | None = None, gpu: str = "H100 SXM") -> str:
    """The box's predictions for ``gpu`` (one of :data:`GPUS`) as plain text, one line per
    quantity with its model and section: what a lab prints beside its "not measured" line."""
    predictions = predict(topic, view)
    index = GPUS.index(check_choice("gpu", gpu, GPUS))
    lines = [f"What the book's models predict on an {gpu} (not a measurement):"]
    for p in predictions:
        value = f"{shown(p.values[index], p.unit)} {p.unit}".rstrip()
        line = f"  {_quantity(p)}: {value} ({p.kind}: {p.model}; section {p.section})"
        lines.append(line.replace("`", ""))  # plain text: no code marks
    return "\n".join(lines)


def _lookup(container: object, key: str) -> object:
    if isinstance(container, dict):
        return container.get(key)
    if isinstance(container, list):
        return next((r for r in container if isinstance(r, dict) and r.get("name") == key),
                    None)
    return None


def measured_value(prediction: Prediction, record: dict, row: str | None = None
                   ) -> float | None:
    """What a stored run (``record``, a ``results/TOPIC-cuda.json``) measured of
    ``prediction``, in SI units, or ``None`` where it holds no number: the value at the
    prediction's ``path``, or ``field`` of its row ``row`` (the first of its rows by default;
    the rows of a topic are in the record's ``rows``, a point-to-point row in its ``p2p``),
    over the same field of the row ``over`` for a ratio."""
    check_instance("prediction", prediction, Prediction)
    check_instance("record", record, dict)
    if prediction.path:
        value: object = record
        for key in prediction.path:
            value = _lookup(value, key)
        scale = _FIELD_SI.get(prediction.path[-1], 1.0)
        return None if not isinstance(value, int | float) else float(value) * scale
    row = prediction.rows[0] if row is None else check_choice("row", row, prediction.rows)

    def field(name: str) -> float | None:
        found = _lookup(record.get("rows"), name) or _lookup(record.get("p2p") or [], name)
        value = None if found is None else found.get(prediction.field)
        return None if not isinstance(value, int | float) else float(value)

    value = field(row)
    if value is None or prediction.over is None:
        return None if value is None else value * _FIELD_SI.get(prediction.field, 1.0)
    denominator = field(prediction.over)
    return None if not denominator else value / denominator


def reference_gpu(name: str, memory_bytes: int | None = None) -> str | None:
    """The GPU of :data:`GPUS` that a device called ``name`` by its driver is ("NVIDIA H200"
    is the H200 SXM), by :func:`gpudl.bench.tensorcores.datasheet_spec`; ``None`` for a GPU
    the book has no prediction for."""
    spec = tensorcores.datasheet_spec(name, memory_bytes)
    return spec.name if spec is not None and spec.name in GPUS else None
