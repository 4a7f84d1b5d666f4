"""Chapter 2's measurements: copies, transposes and reductions against a torch copy; latency and
bandwidth per level of the memory hierarchy.

Book section: Chapter 2, the "Measured on a GPU" boxes of "Coalescing", "Shared memory and bank
conflicts", "Reductions, step by step" and "Latency and bandwidth per level". (The bandwidth
between two GPUs is :mod:`gpudl.bench.allreduce`'s, Chapter 5.)

``python -m gpudl bench memory`` runs :func:`run` and stores ``results/memory-<backend>.json``.
Every kernel's output is checked before its time is reported.
"""

from __future__ import annotations

from gpudl import backend, registry

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl.bench import evaluate_bars, row
from gpudl.bench import hierarchy as bench_hierarchy
from gpudl.bench.timing import time_cuda
from gpudl.checks import check_bool, check_int
from gpudl.kernels import memory as memory_kernels
from gpudl.kernels import reduction as reduction_kernels
from gpudl.kernels import reduction_error, softmax, transpose
from gpudl.kernels.arrays import poisoned

__all__ = ["BARS", "GROUPS", "REFERENCE", "VIEWS", "GPU_N", "STRIDES", "run"]

#: The row every kernel's bandwidth is compared with, a torch device-to-device copy.
REFERENCE = "torch copy"
#: float32 values each kernel reads on a GPU (the simulator's are tiny), and the strides of
#: the strided copies.
GPU_N, STRIDES = 1 << 26, (2, 4, 8, 32)
#: The rows' groups, each drawn in one box of Chapter 2.
GROUPS = ("copies", "transposes", "reductions")
_COPY = registry.variant_records("copy")
_TRANSPOSE = registry.variant_records(transpose.FAMILY)
_REDUCE = registry.variant_records("reduce")
_REDUCTIONS = [v.name for v in _REDUCE.values()]
_COPIES = [v.name for v in _COPY.values()]
_PADDED = [_TRANSPOSE["v3_padded"].name, _TRANSPOSE["v4_padded_loads_first"].name]

#: The speed goals of the issue on GPU speed, each against a torch device-to-device copy of the
#: same data in the same run.
BARS = (
    {"name": "copy_vs_torch_copy",
     "what": "the fastest coalesced copy kernel's bandwidth (one element per thread, K loads "
             "in flight, 16-byte loads) over a torch device-to-device copy's",
     "numerator": _COPIES, "denominator": REFERENCE, "threshold": 0.90},
    {"name": "padded_transpose_vs_torch_copy",
     "what": "the faster padded shared-memory transpose's bandwidth over a torch copy's",
     "numerator": _PADDED, "denominator": REFERENCE, "threshold": 0.80},
    {"name": "padded_transpose_vs_naive",
     "what": "the padded transpose's bandwidth over the naive one's (it must be faster)",
     "numerator": _PADDED[0], "denominator": _TRANSPOSE["v1_naive"].name, "threshold": 1.0},
    {"name": "best_reduction_vs_torch_copy",
     "what": "the fastest reduction's bandwidth (bytes read) over a torch copy's",
     "numerator": _REDUCTIONS, "denominator": REFERENCE, "threshold": 0.85},
    {"name": "best_reduction_vs_torch_sum",
     "what": "the fastest reduction's bandwidth over torch.sum's on the same data",
     "numerator": _REDUCTIONS, "denominator": "torch.sum", "threshold": 1.0},
)
#: The book's boxes of this topic (``{gpudl-measured} memory <view>``) and the bars each is
#: held to; the first three views are the groups, "hierarchy" the latency table.
VIEWS = {"copies": ("copy_vs_torch_copy",),
         "transposes": ("padded_transpose_vs_torch_copy", "padded_transpose_vs_naive"),
         "reductions": ("best_reduction_vs_torch_copy", "best_reduction_vs_torch_sum"),
         "hierarchy": ()}


def run(n: int | None = None, hierarchy: bool = True) -> dict:
    """Time the copies (coalesced in each variant, strided, misaligned), the transposes and
    the reductions of ``n`` float32 values (2**26 on a GPU, 1024 on the simulator), each with a
    torch copy (and ``torch.sum``) in the same run; then, unless switched off, the memory
    hierarchy (:func:`gpudl.bench.hierarchy.measure`, with its ratio table)."""
    n = backend.pick(gpu=GPU_N, sim=1024) if n is None else n
    check_int("n", n, 4)
    check_bool("hierarchy", hierarchy)
    rows = _kernels(n)
    body: dict = {"n": n, "transpose_side": int(np.sqrt(n)), "rows": rows,
                  "bars": evaluate_bars(BARS, rows)}
    if hierarchy:
        print("[memory] latency and bandwidth per level", flush=True)
        levels = bench_hierarchy.measure()
        body["hierarchy"] = levels
        body["hierarchy_table"] = bench_hierarchy.table(levels)
    return body


def _kernels(n: int) -> list[dict]:
    """The copies, transposes and reductions of Chapter 2 on ``n`` float32 values."""
    timed = {"warmup": backend.pick(gpu=3, sim=0), "repeats": backend.pick(gpu=None, sim=1),
             "inner": backend.pick(gpu=10, sim=1)}
    on_gpu = backend.name() == "cuda"
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal(n, dtype=np.float32)
    x = cuda.to_device(x_host)
    print(f"[memory] n = {n:,} float32 ({backend.name()})", flush=True)
    src = torch.as_tensor(x_host, device="cuda" if on_gpu else "cpu")
    dst = torch.empty_like(src)
    rows = [row(REFERENCE, time_cuda(dst.copy_, src, **timed), 8 * n, group="copies")]

    def check(got, expected) -> None:
        np.testing.assert_array_equal(got.copy_to_host(), expected)

    for v in _COPY.values():
        out = poisoned(n)  # each kernel's own output, NaN until it writes
        rows.append(row(v.name, time_cuda(v.launch, x, out, **timed), v.bytes_per_element * n,
                        group="copies"))
        check(out, x_host)
    for stride in STRIDES:
        out = poisoned(-(-n // stride))
        timing = time_cuda(memory_kernels.launch_copy_strided, x, out, stride, **timed)
        check(out, x_host[::stride])
        # useful bytes: each output element read once and written once
        rows.append(row(f"copy stride {stride}", timing, 8 * out.size, group="copies",
                        stride=stride))
    out = poisoned(n - 1)
    timing = time_cuda(memory_kernels.launch_copy_offset, x, out, 1, **timed)
    check(out, x_host[1:])
    rows.append(row("copy offset 1", timing, 8 * out.size, group="copies", offset=1))

    side = int(np.sqrt(n))
    m = x_host[: side * side].reshape(side, side)
    md = cuda.to_device(m)
    for v in _TRANSPOSE.values():
        out = poisoned((side, side))
        timing = time_cuda(v.launch, md, out, **timed)
        check(out, m.T)
        rows.append(row(v.name, timing, v.bytes_per_element * side * side, group="transposes",
                        side=side))

    exact = reduction_kernels.reference_sum(x_host)
    for variant, v in _REDUCE.items():
        out = poisoned(1)
        # v1 (one atomic per element) takes about 0.1 s at 2**26 on a GPU: one call per sample
        # (the policy then stops after a few samples)
        few = {"warmup": 1, "inner": 1} if on_gpu and variant == "v1_atomic" else {}
        timing = time_cuda(v.launch, x, out, **(timed | few))
        got = float(out.copy_to_host()[0])
        bound = reduction_error.error_bound(x_host, variant)
        if not abs(got - exact) <= bound:
            raise RuntimeError(f"{variant}: sum {got} is off the exact {exact} by more than "
                               f"its error bound {bound}")
        rows.append(row(v.name, timing, v.bytes_per_element * n, v.flops_per_element * n,
                        group="reductions"))
    rows.append(row("torch.sum", time_cuda(torch.sum, src, **timed), 4 * n, group="reductions"))
    return rows + _softmax_rows(m, md, timed)


def _softmax_rows(m: np.ndarray, md: object, timed: dict) -> list[dict]:
    """The row softmax of the ``side x side`` matrix ``m`` (on the device: ``md``) by every
    softmax variant, its first rows checked within the derived bound, and ``torch.softmax``:
    a reduction per row (Chapter 10, "Reductions inside a block")."""
    side = m.shape[0]
    checked = m[:64]  # a float64 reference of the whole would cost the GPU run seconds
    exact, bound = softmax.reference(checked), softmax.error_bound(checked)
    rows = []
    for v in registry.variant_records("softmax").values():
        out = poisoned((side, side))
        timing = time_cuda(v.launch, md, out, **timed)
        got = out.copy_to_host()[:64]
        if not (np.abs(got - exact) <= bound).all():  # also catches NaN
            raise RuntimeError(f"{v.name}: a probability is off its exact value by more than "
                               "its error bound")
        rows.append(row(v.name, timing, v.bytes_per_element * side * side,
                        v.flops_per_element * side * side, group="reductions", side=side))
    x = torch.as_tensor(m, device="cpu" if backend.is_simulator() else "cuda")
    timing = time_cuda(lambda: torch.softmax(x, dim=-1), **timed)
    rows.append(row("torch.softmax", timing, 8 * side * side, group="reductions", side=side))
    return rows
