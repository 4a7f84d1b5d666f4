"""The predictions of the boxes of Chapters 5 to 11: several GPUs and their links, tensor cores,
attention, inference, experts and long sequences.

Book section: Chapters 5 to 11, their "Measured on a GPU" boxes
(:mod:`gpudl.estimate.predictions`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

from gpudl import hardware
from gpudl.bench import (
    allreduce,
    attention,
    context,
    dataparallel,
    decode,
    matmul,
    pipeline,
    precision,
    tensorcores,
)
from gpudl.bench import profiles as profiled
from gpudl.bench.experts import GPU_EXPERTS, GPU_TOKENS
from gpudl.bench.message_sizes import GPU_SIZES as MESSAGE_SIZES
from gpudl.bench.message_sizes import human_size
from gpudl.estimate.bubble import bubble_fraction
from gpudl.estimate.collectives import allreduce_time, data_parallel_step_time
from gpudl.estimate.context import ring_step_bytes, ring_step_flops
from gpudl.estimate.experts import all_to_all_time, expert_capacity
from gpudl.estimate.memory_per_gpu import model_state_memory
from gpudl.estimate.predictions.quantities import (
    BYTES_MOVED,
    Prediction,
    alike,
    bandwidth,
    computed,
    mlp_params,
    moved,
    nvlink,
    per_gpu,
    timed,
)

__all__ = ["BUILDERS"]

_TRAFFIC = "roofline: the longer of flops / FP32 peak and bytes requested / memory bandwidth"
_TRAFFIC_FP16 = ("roofline: the longer of flops / FP16 peak and bytes requested / memory "
                 "bandwidth")
_RING = "ring all-reduce: `2 (N - 1) / N x S / B`, `B` one direction of NVLink"
_BUS = "bus bandwidth of the ring: `B`, one direction of NVLink"
_LINK = "`S / B`, `B` one direction of NVLink"
_STEP = "compute at the FP32 peak + the ring all-reduce the backward pass does not hide"
_BUBBLE = "idle share `(p - 1) / (m + p - 1)`"
_BIAS_GELU = "bytes per element: 16 unfused (two passes), 8 fused"
_STATE = "model state with Adam in float32: 16 B per parameter, ZeRO-1 `8 + 8 / N`"
_COUNTED = "kernels launched per step, counted"


# --- Chapter 5 --------------------------------------------------------------------------------


def _allreduce_busbw() -> list[Prediction]:
    size = max(MESSAGE_SIZES)
    out = []
    for world in allreduce.WORLD_SIZES:
        row = f"all_reduce {human_size(size)} x{world}"
        out.append(timed(row, lambda gpu, w=world: allreduce_time(size, w, nvlink(gpu)),
                         _RING, "ch05-interconnect", (row,), field="time_s"))
        out.append(Prediction(row, per_gpu(nvlink), "GB/s", _BUS, "ch05-interconnect",
                              "bound", (row,), field="busbw_gbs"))
    return out


def _allreduce_p2p() -> list[Prediction]:
    size = max(MESSAGE_SIZES)
    row = f"send/recv {human_size(size)}"
    return [Prediction(row, per_gpu(nvlink), "GB/s", _LINK, "ch05-interconnect", "bound",
                       (row,), field="gbps")]


def _ddp_timeline() -> list[Prediction]:
    from gpudl.parallel.one_process import TIMELINE_DIMS

    grad_bytes = 4 * mlp_params(TIMELINE_DIMS)
    return [timed("all-reduce of the lab's {mb} MB of gradients on 2 GPUs",
                  lambda gpu: allreduce_time(grad_bytes, 2, nvlink(gpu)), _RING,
                  "ch05-interconnect", mb=f"{grad_bytes / 1e6:.2f}")]


def _dataparallel_steps() -> list[Prediction]:
    from gpudl.parallel.data import expected_buckets

    dims, per_rank = dataparallel.GPU_DIMS, dataparallel.GPU_SAMPLES_PER_RANK
    params = mlp_params(dims)
    sizes = [4 * (a * b + b) for a, b in zip(dims[:-1], dims[1:], strict=False)][::-1]
    buckets = len(expected_buckets(sizes, None))
    flops = 6 * params * per_rank  # forward and backward of one rank's share

    def step(gpu: str, world: int, n_buckets: int) -> float:
        compute = flops / hardware.peak_flops(gpu, "fp32")
        return data_parallel_step_time(compute, 4 * params, world, nvlink(gpu),
                                       n_buckets=n_buckets)

    one = [f"{s} step x1" for s in ("manual", "bucketed", "ddp")]
    out = [timed("every step on 1 GPU (nothing to all-reduce)", lambda gpu: step(gpu, 1, 1),
                 _STEP, "ch05-cost-model", one, kind="estimate")]
    for world in (w for w in dataparallel.GPU_WORLD_SIZES if w > 1):
        out.append(timed(f"manual step x{world}", lambda gpu, w=world: step(gpu, w, 1), _STEP,
                         "ch05-cost-model", (f"manual step x{world}",), kind="estimate"))
        out.append(timed("`bucketed` and `ddp` steps on {n} GPUs",
                         lambda gpu, w=world: step(gpu, w, buckets), _STEP, "ch05-cost-model",
                         (f"bucketed step x{world}", f"ddp step x{world}"), kind="estimate",
                         n=str(world)))
    return out


# --- Chapter 6 --------------------------------------------------------------------------------


def _pipeline_bubble() -> list[Prediction]:
    p = pipeline.STAGES
    out = [alike("naive m=1", bubble_fraction(p, 1), "", _BUBBLE, "ch06-bubble", "estimate",
                 rows=("naive m=1",), field="measured")]
    for m in pipeline.MICROBATCHES:
        out.append(alike("`gpipe` and `1f1b`, m = {m}", bubble_fraction(p, m), "", _BUBBLE,
                         "ch06-bubble", "estimate", rows=(f"gpipe m={m}", f"1f1b m={m}"),
                         field="measured", fields=(("m", str(m)),)))
    return out


def _bias_gelu() -> list[Prediction]:
    return [alike("time of the unfused forward over the fused one", 16 / 8, "", _BIAS_GELU,
                  "ch06-bias-gelu", "estimate")]


def _zero() -> list[Prediction]:
    params = mlp_params(dataparallel.GPU_DIMS)
    fields = {"params": f"{params:,}"}
    out = [alike("model state per GPU, DDP ({params} parameters)",
                 model_state_memory(params, precision="fp32"), "MB", _STATE,
                 "ch06-zero-memory", "estimate", fields=tuple(fields.items()))]
    for world in (w for w in dataparallel.GPU_WORLD_SIZES if w > 1):
        out.append(alike("model state per GPU, ZeRO-1 on {n} GPUs",
                         model_state_memory(params, n_gpus=world, zero_stage=1,
                                            precision="fp32"),
                         "MB", _STATE, "ch06-zero-memory", "estimate",
                         fields=(("n", str(world)),)))
    return out


# --- Chapters 7 and 8 -------------------------------------------------------------------------


def _precision_rates() -> list[Prediction]:
    n = precision.GPU_N
    out = [computed(f"torch.matmul {dtype} n={n}", 2 * n**3, field_, "ch02-roofline",
                     (f"torch.matmul {dtype} n={n}",))
           for dtype, field_ in (("float32", "fp32"), ("bfloat16", "bf16"))]
    from gpudl.estimate.training_cost import training_flops

    flops = training_flops(mlp_params(matmul.MLP_SIZES, biases=False), matmul.MLP_BATCH)
    return out + [computed("kernel MLP step", flops, "fp32", "ch07-mfu", ("kernel MLP step",))]


def _attention_times() -> list[Prediction]:
    from gpudl import registry
    from gpudl.kernels import attention as attention_kernels

    heads, d = attention.GPU_HEADS, attention.HEAD_DIM
    records = registry.variant_records("attention")
    out = []
    for s in attention.GPU_S:
        flops = attention.attention_flops(heads, s, d)
        for variant in attention_kernels.VARIANTS:
            requested = sum(attention_kernels.traffic(variant, heads, s, d).values())
            row = f"attention_{variant} s={s}"
            # a float16 variant's products run on the tensor cores, at the FP16 peak
            peak, model = (("fp16", _TRAFFIC_FP16) if records[variant].precision == "float16"
                           else ("fp32", _TRAFFIC))
            out.append(timed(row, lambda gpu, r=requested, f=flops, p=peak: max(
                f / hardware.peak_flops(gpu, p), r / bandwidth(gpu)), model,
                "ch08-bytes", (row,), kind="estimate"))
        for name, field_ in (("torch sdpa efficient fp32", "fp32"),
                             ("torch sdpa math fp32", "fp32"), ("torch sdpa flash bf16", "bf16")):
            row = f"{name} s={s}"
            out.append(computed(row, flops, field_, "ch08-roofline", (row,)))
    return out


def _tensorcores_torch() -> list[Prediction]:
    return [computed(f"torch {name} n={n}", 2 * n**3, name, "ch08-roofline",
                      (f"torch {name} n={n}",))
            for name in tensorcores.TORCH_DTYPES for n in tensorcores.GPU_SIZES]


def _tensorcores_kernels() -> list[Prediction]:
    from gpudl.kernels import tensor_core_matmul

    out = []
    for n in tensorcores.GPU_KERNEL_SIZES:
        rows = tuple(f"tensor_core_{v} n={n}" for v in tensor_core_matmul.VARIANTS)
        out.append(computed("both tensor-core kernels (BF16), n = {n}", 2 * n**3, "bf16",
                             "ch08-roofline", rows, n=f"{n:,}"))
        rows = tuple(f"matmul_{v} n={n}" for v in ("v4_register_1d", "v5_register_2d"))
        out.append(computed("`v4_register_1d` and `v5_register_2d`, n = {n}", 2 * n**3,
                             "fp32", "ch08-roofline", rows, n=f"{n:,}"))
    return out


# --- Chapter 9 --------------------------------------------------------------------------------


def _decode_attention() -> list[Prediction]:
    from gpudl.kernels import decode as decode_kernels

    s, heads, d = decode.GPU_S, decode.GPU_HEADS, decode.GPU_D
    cache_bytes = 2 * 4 * heads * s * d  # keys and values, float32
    out = [moved(f"decode_{v} s={s}", cache_bytes + 2 * 4 * heads * d, "ch09-bytes")
           for v in decode_kernels.VARIANTS]
    return out + [moved(f"torch copy s={s}", 2 * cache_bytes, "ch09-bytes")]


def _decode_gemv() -> list[Prediction]:
    from gpudl.kernels import quant

    n = decode.GPU_N
    out = [moved(f"quant_{v} n={n}", quant.weight_bytes(v, n, n) + 8 * n, "ch09-int8")
           for v in quant.VARIANTS]
    return out + [moved(f"torch bf16 gemv n={n}", 2 * n * n + 4 * n, "ch09-int8")]


@cache
def _decoder_launches() -> int:
    """The kernels one step of the tiny decoder launches, counted by running a step."""
    from gpudl import models

    return sum(models.launches_per_step(models.KernelDecoder(models.make_decoder())).values())


def _decode_graphs() -> list[Prediction]:
    kernels, elements = decode.GRAPH_KERNELS, decode.GRAPH_ELEMENTS
    return [
        alike("kernels per step of `{row}`", kernels, "", _COUNTED, "ch09-graphs", "estimate",
              rows=("eager launches",), field="kernels", fields=(("row", "eager launches"),)),
        alike("kernels per step of `{row}`", _decoder_launches(), "", _COUNTED, "ch09-graphs",
              "estimate", rows=("tiny decoder step eager", "tiny decoder step graph"),
              field="kernels", fields=(("row", "tiny decoder step eager"),)),
        # each kernel reads and writes its float32 elements
        timed("graph replay", lambda gpu: kernels * 8 * elements / bandwidth(gpu), BYTES_MOVED,
              "ch09-graphs", ("graph replay",)),
    ]


# --- Chapter 11 -------------------------------------------------------------------------------

_ALL_TO_ALL = "all-to-all: `(N - 1) / N x S / B`, `B` one direction of NVLink"
_BUS_ALL_TO_ALL = "bus bandwidth of the all-to-all: `B`, one direction of NVLink"
_RING_STEP = "the longer of the key/value chunk over one direction of NVLink and flops / BF16 peak"
_RING_WAIT = "the key/value chunk over one direction of NVLink + flops / BF16 peak"


def _allreduce_all_to_all() -> list[Prediction]:
    size = 64 * 2**20  # the size of the bar all_to_all_vs_all_reduce_x{ws}
    out = []
    for world in allreduce.WORLD_SIZES:
        row = f"all_to_all {human_size(size)} x{world}"
        out.append(timed(row, lambda gpu, w=world: all_to_all_time(size, w, nvlink(gpu)),
                         _ALL_TO_ALL, "ch11-all-to-all", (row,), field="time_s"))
        out.append(Prediction(row, per_gpu(nvlink), "GB/s", _BUS_ALL_TO_ALL, "ch11-all-to-all",
                              "bound",
                              (row,), field="busbw_gbs"))
    return out


def _matmul_experts() -> list[Prediction]:
    # the grouped products compute every expert's buffer whole, padding included: E x C rows,
    # two products of 2 x rows x hidden x ffn flops each, in bf16 on a GPU
    config, tokens = GPU_EXPERTS, GPU_TOKENS
    capacity = expert_capacity(tokens, config.experts, config.top_k, config.capacity_factor)
    flops = 4 * config.experts * capacity * config.hidden * config.ffn
    return [computed("experts grouped", flops, "bf16", "ch11-grouped", ("experts grouped",))]


def _context_ring() -> list[Prediction]:
    chunk, heads, head_dim = context.GPU_CHUNK, 16, 128
    flops, sent = ring_step_flops(chunk, heads, head_dim), ring_step_bytes(chunk, heads, head_dim)

    def compute(gpu: str) -> float:
        return flops / hardware.peak_flops(gpu, "bf16")

    rows = {name: f"{name} chunk={chunk}" for name in
            ("compute alone", "ring overlapped", "ring waiting")}
    return [
        computed(rows["compute alone"], flops, "bf16", "ch11-ring-hides",
                 (rows["compute alone"],)),
        timed(rows["ring overlapped"], lambda gpu: max(compute(gpu), sent / nvlink(gpu)),
              _RING_STEP, "ch11-ring-hides", (rows["ring overlapped"],)),
        timed(rows["ring waiting"], lambda gpu: compute(gpu) + sent / nvlink(gpu), _RING_WAIT,
              "ch11-ring-hides", (rows["ring waiting"],)),
    ]


# --- Appendix E ------------------------------------------------------------------------------


def _profiles_launches() -> list[Prediction]:
    from gpudl.models import KernelMLP

    mlp = sum(KernelMLP(profiled.MLP_SIZES).launches_per_step().values())
    decoder = _decoder_launches()
    return [alike("kernels per step of `{row}`", mlp, "", _COUNTED, "appendix-profiles-mlp",
                  "estimate", rows=("mlp-step-cuda",), field="kernels",
                  fields=(("row", "mlp-step-cuda"),)),
            alike("kernels per step of `{row}`", decoder, "", _COUNTED, "ch09-graphs",
                  "estimate", rows=("decode-eager-cuda", "decode-graph-cuda"), field="kernels",
                  fields=(("row", "decode-eager-cuda"),))]


def _profiles_kernels() -> list[Prediction]:
    # a chunk's x and y read and its result written, float32
    chunk = 12 * (profiled.GPU_STREAMS_N // profiled.STREAMS_CHUNKS)
    return [moved("saxpy_v1_naive, one chunk", chunk, "appendix-profiles-streams")]


#: Each box of Chapters 5 to 11 and Appendix E -> the function of its predictions.
BUILDERS: dict[tuple[str, str | None], Callable[[], list[Prediction]]] = {
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
    ("allreduce", "all_to_all"): _allreduce_all_to_all,
    ("matmul", "experts"): _matmul_experts,
    ("context", "ring"): _context_ring,
    ("profiles", "launches"): _profiles_launches,
    ("profiles", "kernels"): _profiles_kernels,
}
