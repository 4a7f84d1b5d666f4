"""Chapter 9's measurements: decode attention against a copy of its cache, the int8 GEMV
against torch's bf16 one, and a CUDA graph's replay against eager launches.

Book section: Chapter 9, the "Measured on a GPU" boxes of "Split-KV decoding", "Weight-only
int8" and "Launches and CUDA graphs".

``python -m gpudl bench decode`` runs :func:`run` and stores ``results/decode-<backend>.json``
with the speed goals of :data:`BARS`. Every kernel's output is checked (against the float64
reference within its derived bound, or against the eager run for a graph) before its time is
reported. On the simulator the sizes are tiny, the timings wall clock, the graph rows are
absent (the simulator has no graphs) and every bar's ratio and verdict ``None``.
"""

from __future__ import annotations

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl import models as decoder_model
from gpudl import registry
from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import time_cpu, time_cuda
from gpudl.checks import check_bool, check_int
from gpudl.kernels import decode, decode_error, quant
from gpudl.kernels.arrays import poisoned
from gpudl.models import graphs

__all__ = ["BARS", "VIEWS", "GRAPH_KERNELS", "GRAPH_ELEMENTS", "GPU_S", "GPU_HEADS", "GPU_D",
           "GPU_N", "run", "bump_kernel", "rewind_kernel"]

#: Launches in the step that the graph goal is held to, and the elements each kernel adds 1 to.
GRAPH_KERNELS, GRAPH_ELEMENTS = 20, 256
#: The cached tokens, heads and head size of decode attention and the GEMV's n, on a GPU.
GPU_S, GPU_HEADS, GPU_D, GPU_N = 8192, 32, 128, 8192

#: The speed goals, as the issue that asked for the chapter set them.
BARS = (
    {"name": "split_kv_vs_copy",
     "what": "v2_split_kv's bandwidth over its cache (32 heads of 128, FP32) at batch 1 "
             "and s = 8,192, over torch's device copy of twice as many bytes (read and "
             "write)",
     "numerator": "decode_v2_split_kv s={s}", "denominator": "torch copy s={s}",
     "threshold": 0.7, "compare": ">=", "rate": "gbps"},
    {"name": "gemv_int8_vs_torch_bf16",
     "what": "torch's bf16 GEMV time over gemv_int8 v2's at 8,192 x 8,192, batch 1 (above "
             "1: the int8 kernel is faster)",
     "numerator": "torch bf16 gemv n={n}", "denominator": "quant_v2_dequantize_in_registers n={n}",
     "threshold": 1.6, "compare": ">=", "rate": "median_s"},
    {"name": "graph_replay_vs_eager",
     "what": f"eager launches' time over a CUDA graph's replay for a {GRAPH_KERNELS}-kernel "
             "step (above 1: the graph is faster)",
     "numerator": "eager launches", "denominator": "graph replay",
     "threshold": 3.0, "compare": ">=", "rate": "median_s"},
)
#: The book's boxes of this topic (``{gpudl-measured} decode <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"attention": ("split_kv_vs_copy",), "gemv": ("gemv_int8_vs_torch_bf16",),
         "graphs": ("graph_replay_vs_eager",)}


def run(s: int | None = None, heads: int | None = None, d: int | None = None,
        n: int | None = None, decoder: bool = True) -> dict:
    """Decode attention at batch 1 over ``s`` cached tokens of ``heads`` heads of size ``d``
    (8,192, 32, 128 on a GPU; 40, 2, 8 on the simulator), the int8 GEMV at ``n x n``
    (8,192; 24), and on a GPU the graph rows (with ``decoder``, also the tiny decoder's step
    eager and replayed)."""
    s = backend.pick(gpu=GPU_S, sim=40) if s is None else check_int("s", s, 1)
    heads = backend.pick(gpu=GPU_HEADS, sim=2) if heads is None else check_int("heads", heads, 1)
    d = backend.pick(gpu=GPU_D, sim=8) if d is None else check_int("d", d, 1, decode.MAX_HEAD_DIM)
    n = backend.pick(gpu=GPU_N, sim=24) if n is None else check_int("n", n, 1)
    check_bool("decoder", decoder)
    timed = {"warmup": backend.pick(gpu=3, sim=0), "repeats": backend.pick(gpu=20, sim=1)}
    rows = _attention_rows(s, heads, d, timed) + _gemv_rows(n, timed)
    if not backend.is_simulator():
        rows += _graph_rows(timed, decoder)
    return {"s": s, "heads": heads, "d": d, "n": n, "rows": rows,
            "bars": evaluate_bars(BARS, rows, s=str(s), n=str(n))}


def _attention_rows(s: int, heads: int, d: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(s)
    q = rng.standard_normal((1, heads, d)).astype(np.float32)
    k, v = (rng.standard_normal((1, heads, s, d)).astype(np.float32) for _ in range(2))
    lengths = np.array([s], np.int32)
    ref = decode.reference(q, k, v, lengths)
    device = [cuda.to_device(x) for x in (q, k, v, lengths)]
    cache_bytes = 2 * k.nbytes
    keys = {"group": "attention", "s": s, "heads": heads, "d": d}
    rows = []
    for variant, launch in decode.VARIANTS.items():
        o = poisoned(q.shape)
        split = variant in decode.SPLIT_VARIANTS
        bound = decode_error.error_bound(q, k, v, lengths, decode.SPLIT_SIZE if split else None)
        extra = {}
        if split:
            splits = -(-s // decode.SPLIT_SIZE)
            extra["workspace"] = (poisoned((1, heads, splits)), poisoned((1, heads, splits)),
                                  poisoned((1, heads, splits, d)))
        timing = time_cuda(lambda launch=launch, o=o, extra=extra: launch(*device, o, **extra),
                           **timed)
        got = o.copy_to_host()
        if np.isnan(got).any() or not (np.abs(got - ref) <= bound).all():
            raise RuntimeError(f"decode {variant} at s = {s}: output outside its bound")
        rows.append(row(f"decode_{variant} s={s}", timing, cache_bytes + 2 * q.nbytes,
                        4 * heads * s * d, **keys))
    copy_bytes = 2 * cache_bytes  # read and written
    if backend.is_simulator():
        src = torch.from_numpy(np.concatenate([k, v]))
        timing = time_cpu(lambda: src.clone(), **timed)
        return rows + [row(f"torch copy s={s}", timing, copy_bytes, None, **keys)]
    src = torch.from_numpy(np.concatenate([k, v])).cuda()
    dst = torch.empty_like(src)
    timing = time_cuda(lambda: dst.copy_(src), **timed)
    return rows + [row(f"torch copy s={s}", timing, copy_bytes, None, **keys)]


def _gemv_rows(n: int, timed: dict) -> list[dict]:
    rng = np.random.default_rng(n)
    w = rng.standard_normal((n, n)).astype(np.float32)
    x = rng.standard_normal((1, n)).astype(np.float32)
    q, scale = quant.quantize_int8(w)
    checked = min(n, 256)  # rows checked against the float64 reference
    ref = quant.reference(x, q[:checked], scale[:checked])
    bound = quant.error_bound(x, q[:checked], scale[:checked])
    x_d, q_d, s_d = (cuda.to_device(a) for a in (x, q, scale))
    keys = {"group": "gemv", "n": n}
    rows = []
    for variant, launch in quant.VARIANTS.items():
        y = poisoned((1, n))
        extra = {"workspace": poisoned((n, n))} if variant.startswith("v1") else {}
        timing = time_cuda(lambda launch=launch, y=y, extra=extra: launch(
            x_d, q_d, s_d, y, **extra), **timed)
        got = y.copy_to_host()
        if np.isnan(got).any() or not (np.abs(got[:, :checked] - ref) <= bound).all():
            raise RuntimeError(f"gemv_int8 {variant} at n = {n}: output outside its bound")
        rows.append(row(f"quant_{variant} n={n}", timing,
                        quant.weight_bytes(variant, n, n) + 8 * n, 2 * n * n, **keys))
    if not backend.is_simulator():
        w16, x16 = (torch.from_numpy(a).cuda().to(torch.bfloat16) for a in (w, x))
        timing = time_cuda(lambda: torch.nn.functional.linear(x16, w16), **timed)
        rows.append(row(f"torch bf16 gemv n={n}", timing, 2 * n * n + 4 * n, 2 * n * n,
                        **keys))
    return rows


@registry.kernel("decode_bench_rewind", "void(int32[::1])")
@cuda.jit
def rewind_kernel(positions):
    """Set the first sequence's position back to 0 (a timed step never fills the cache)."""
    positions[0] = 0


@registry.kernel("decode_bench_bump", "void(float32[::1])")
@cuda.jit
def bump_kernel(x):
    """Add 1 to every element of ``x``: the tiny kernel of the graph goal's step."""
    i = cuda.grid(1)
    if i < x.size:
        x[i] += 1


def _graph_rows(timed: dict, with_decoder: bool) -> list[dict]:
    x = cuda.to_device(np.zeros(GRAPH_ELEMENTS, np.float32))

    def step(launch: graphs.Launch) -> None:
        for _ in range(GRAPH_KERNELS):
            launch(bump_kernel, 1, GRAPH_ELEMENTS, x)

    graph = graphs.capture(step)
    before = x.copy_to_host()
    graph.replay()
    if not (x.copy_to_host() == before + GRAPH_KERNELS).all():
        raise RuntimeError("the graph's replay did not run its launches")
    keys = {"group": "graphs", "kernels": GRAPH_KERNELS}
    timed = timed | {"inner": 10}  # ten steps per sample: the hold before it is amortised
    rows = [row("eager launches", time_cuda(lambda: step(decode.plain_launch), **timed),
                None, None, **keys),
            row("graph replay", time_cuda(graph.replay, **timed), None, None, **keys)]
    if with_decoder:
        rows += _decoder_rows(timed)
    return rows


def _decoder_rows(timed: dict) -> list[dict]:
    model = decoder_model.make_decoder()
    kernels = decoder_model.KernelDecoder(model)
    prompt, new = [3, 17, 5], 8
    eager, _ = kernels.generate(prompt, new)
    graph = graphs.capture(kernels.step)
    replayed, _ = kernels.generate(prompt, new, run_step=graph.replay)
    if replayed != eager or eager != decoder_model.generate_torch(model, prompt, new)[0]:
        raise RuntimeError("the tiny decoder's tokens differ between torch, eager and graph")
    launches = sum(decoder_model.launches_per_step(kernels).values())
    keys = {"group": "decoder", "kernels": launches}
    rows = []
    for name, fn in (("tiny decoder step eager", kernels.step),
                     ("tiny decoder step graph", graph.replay)):
        def rewound(fn=fn) -> None:  # every timed step at position 0: the cache never fills
            rewind_kernel[1, 1](kernels.positions)
            fn()

        timing = time_cuda(rewound, **timed)
        rows.append(row(name, timing, None, None, tokens_per_second=1 / timing.median,
                        **keys))
    return rows
