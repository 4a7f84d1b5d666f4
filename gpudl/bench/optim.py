"""Chapter 4's measurement: one Adam step of each variant against a device copy of the same
parameters and against torch's ``foreach`` and ``fused`` Adams.

Book section: *Chapter 4*, the "Measured on a GPU" box of "Does shared memory help Adam?".

``python -m gpudl bench optim`` runs :func:`run` and stores ``results/optim-<backend>.json``.
Every optimizer's first step is checked before it is timed (:func:`check_step`), each against
the float64 reference computed with the hyperparameters that optimizer actually uses
(:func:`hyper_used`). torch's fused CUDA Adam rounds its bias corrections to float32 (its step
count is a float32); its reference is computed with ``lr``, the betas and ``eps`` rounded to
float32, a reading of PyTorch's source not yet checked on a GPU. A gpudl variant that fails its
check stops the benchmark; a peer (torch) that fails it is timed all the same, and its row says
which array was off.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gpudl import backend, registry

# isort: split
import numpy as np
import torch

from gpudl import optim as optimizers
from gpudl.bench import evaluate_bars, row
from gpudl.bench.timing import row_kind, time_cuda, time_interleaved
from gpudl.checks import check_callable, check_instance, check_int, check_ints
from gpudl.interop import tensor_device
from gpudl.kernels import optim as optim_kernels
from gpudl.kernels.optim import check_adam_hyper

__all__ = ["BARS", "VIEWS", "HYPER", "METHODS", "PER_TENSOR", "GPU_SIZES", "GPU_SMALL",
           "float32_hyper", "hyper_used", "check_step", "layouts", "run"]

#: The parameters of each one-tensor layout timed on a GPU, and its many small tensors
#: (count, size).
GPU_SIZES, GPU_SMALL = (10**6, 10**7, 10**8), (1000, 10**4)

#: The hyperparameters every timed step uses (Adam's defaults).
HYPER = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}

#: The optimizers timed, name -> factory ``(params, **hyper) -> optimizer``.
METHODS: dict[str, Callable] = {
    **{
        v.name: (lambda ps, v=v.key, **h: optimizers.Adam(ps, variant=v, **h))
        for v in registry.variant_records("adam").values()
    },
    "torch foreach": lambda ps, **h: torch.optim.Adam(ps, foreach=True, **h),
    "torch fused": lambda ps, **h: torch.optim.Adam(ps, fused=True, **h),
}
_ADAM = registry.variant_records("adam")
_FUSED, _MULTI = _ADAM["v2_fused"].name, _ADAM["v4_multi_tensor"].name
#: The methods that launch once per tensor (every Adam variant but the multi-tensor ones),
#: timed with fewer repeats over many tensors.
PER_TENSOR = tuple(v.name for v in _ADAM.values()
                   if v.key not in optimizers.MULTI_TENSOR_VARIANTS)

#: The speed goals of the issue on GPU speed; ``{big}`` is the largest one-tensor layout (100M
#: parameters on a GPU), ``{many}`` the many small tensors.
BARS = (
    {"name": "fused_adam_vs_copy",
     "what": "gpudl's adam_v2_fused step's effective bandwidth (28 B/param) over a device "
             "copy's (8 B/param), one large tensor",
     "numerator": f"{_FUSED} [{{big}}]", "denominator": "copy [{big}]", "threshold": 0.80},
    {"name": "multi_tensor_vs_torch_foreach",
     "what": "gpudl's adam_v4_multi_tensor step's speed over torch's foreach Adam's, many "
             "small tensors (it must be faster)",
     "numerator": f"{_MULTI} [{{many}}]", "denominator": "torch foreach [{many}]",
     "threshold": 1.0},
    {"name": "multi_tensor_vs_torch_fused",
     "what": "time of gpudl's adam_v4_multi_tensor step over torch's fused Adam's, many "
             "small tensors (within 1.25x)",
     "numerator": f"{_MULTI} [{{many}}]", "denominator": "torch fused [{many}]",
     "threshold": 1.25, "compare": "<=", "rate": "median_s"},
)
#: The book's boxes of this topic (``{gpudl-measured} optim <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"bandwidth": ("fused_adam_vs_copy", "multi_tensor_vs_torch_foreach",
                       "multi_tensor_vs_torch_fused")}


def float32_hyper(hyper: dict) -> dict:
    """``lr``, ``betas`` and ``eps`` of ``hyper`` rounded to float32 (as Python floats)."""
    check_instance("hyper", hyper, dict)
    check_adam_hyper(hyper["lr"], hyper["betas"], hyper["eps"], 0.0)
    f32 = lambda x: float(np.float32(x))
    return {"lr": f32(hyper["lr"]), "betas": tuple(f32(b) for b in hyper["betas"]),
            "eps": f32(hyper["eps"])}


def hyper_used(name: str, device: torch.device, hyper: dict = HYPER) -> dict:
    """The hyperparameters the optimizer ``name`` of :data:`METHODS` computes a step with on
    ``device``: torch's fused Adam on a GPU passes ``lr``, the betas and ``eps`` to its kernel
    as float32; every other (gpudl's, which rounds the per-step scalars itself as its error
    bound assumes, and torch's on the CPU, which computes them in double) as given."""
    check_instance("device", device, torch.device)
    if name == "torch fused" and device.type == "cuda":
        return float32_hyper(hyper)
    return dict(hyper)


def check_step(make: Callable, shapes: list[int], hyper: dict = HYPER,
               used: dict | None = None) -> dict:
    """One step of the optimizer ``make(params, **hyper)`` from fixed data on
    :func:`gpudl.interop.tensor_device`, checked on (up to) the first 2**20 elements of the
    first tensor against :func:`gpudl.kernels.optim.reference_adam` and
    :func:`~gpudl.kernels.optim.adam_error_bound`, both computed with ``used`` (the
    hyperparameters the optimizer actually uses; ``hyper`` if not given).

    Returns ``ok``, ``failed`` (the arrays off their bound: ``"p"``, ``"m"``, ``"v"``) and
    ``worst`` (each array's largest error over its bound, ``None`` if it holds a NaN)."""
    check_callable("make", make)
    check_ints("shapes", shapes, 1)
    used = dict(hyper) if used is None else used
    gen = torch.Generator().manual_seed(1)
    device = tensor_device()
    params = [torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes]
    grads = [torch.randn(s, generator=gen).to(device) for s in shapes]
    n = min(shapes[0], 1 << 20)
    p0, g0 = (np.array(t.detach()[:n].cpu().numpy()) for t in (params[0], grads[0]))  # copies
    zeros = np.zeros(n, np.float32)
    opt = make(params, **hyper)
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    opt.step()
    state = opt.state[params[0]]
    got = [t.detach()[:n].cpu().numpy() for t in (params[0], state["exp_avg"],
                                                  state["exp_avg_sq"])]
    refs = optim_kernels.reference_adam(p0, g0, zeros, zeros, step=1, **used)
    bounds = optim_kernels.adam_error_bound(p0, g0, zeros, zeros, step=1, **used)
    worst, failed = {}, []
    for name, x, ref, bound in zip("pmv", got, refs, bounds, strict=True):
        error = np.abs(x.astype(np.float64) - ref)
        worst[name] = None if np.isnan(error).any() else float((error / bound).max())
        if not (error <= bound).all():  # also catches NaN
            failed.append(name)
    return {"ok": not failed, "failed": failed, "worst": worst}


def _timings(shapes: list[int], timed: dict, few: dict) -> dict:
    """Timings of a device copy of the parameters and of one step of each of :data:`METHODS`,
    on ``shapes``. On a GPU the copy, the fused and multi-tensor steps of gpudl and torch's two
    are timed interleaved (:func:`gpudl.bench.timing.time_interleaved`: each comparison under
    the same conditions); the other two variants, and every method on the simulator, one
    after the other with ``timed`` (``few`` for a per-tensor method over many tensors)."""
    device = tensor_device()
    n = sum(shapes)
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    steps: dict[str, Callable] = {"copy": lambda: dst.copy_(src)}
    for name, make in METHODS.items():
        params = [torch.randn(s, device=device).requires_grad_() for s in shapes]
        for p in params:
            p.grad = torch.randn_like(p)
        steps[name] = make(params, **HYPER).step
    compared = ["copy", _FUSED, _MULTI, "torch foreach", "torch fused"]
    timings = {}
    if not backend.is_simulator():
        timings = time_interleaved({name: steps[name] for name in compared},
                                   warmup=max(3, timed["warmup"]),
                                   repeats=None if timed["repeats"] is None
                                   else max(5, timed["repeats"]))
    for name, step in steps.items():
        if name not in timings:
            plan = few if len(shapes) > 1 and name in PER_TENSOR else timed
            timings[name] = time_cuda(step, **plan)
    if device.type == "cuda":
        del steps, src, dst
        torch.cuda.empty_cache()
    return {name: timings[name] for name in ["copy", *METHODS]}


def layouts(sizes: Sequence[int], small: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Each layout's name and its tensors' sizes: one tensor of each of ``sizes``, then
    ``small = (count, size)`` tensors of one size (the rows are named after the layouts)."""
    sizes = check_ints("sizes", sizes, 1)
    small = check_ints("small", small, 1, minimum_count=2)
    if len(small) != 2:
        raise ValueError(f"small must be (count, size), got {small!r}")
    count, each = small
    return ([(f"1 tensor of {n:,}", [n]) for n in sizes]
            + [(f"{count:,} tensors of {each:,}", [each] * count)])


def run(sizes: tuple[int, ...] | None = None, small: tuple[int, int] | None = None,
        repeats: int | None = None) -> dict:
    """Time one Adam step (``optimizer.step()``, float32, gradients in place) of each of
    :data:`METHODS` and a device copy (``torch`` ``copy_``) of the same parameters, for one
    tensor of each of ``sizes`` parameters (1M, 10M, 100M on a GPU) and for a model of
    ``small = (count, size)`` small tensors (1,000 of 10,000 on a GPU). Rows are named
    ``"<method> [<layout>]"``; each Adam step is rated at
    :data:`gpudl.kernels.optim.BYTES_PER_PARAM` = 28 bytes per parameter (``gbps``) and
    against the copy's bandwidth (``fraction_of_copy``), and carries its ``optimizer`` and ``check``
    (:func:`check_step`)."""
    sizes = backend.pick(gpu=GPU_SIZES, sim=(300,)) if sizes is None else sizes
    small = backend.pick(gpu=GPU_SMALL, sim=(6, 40)) if small is None else small
    plan = layouts(sizes, small)
    # on a GPU, samples until the median is stable (gpudl.bench.timing.POLICY)
    repeats = (backend.pick(gpu=None, sim=1) if repeats is None
               else check_int("repeats", repeats, 1))
    timed = {"warmup": backend.pick(gpu=3, sim=0), "repeats": repeats}
    # one launch (or seven) per tensor and step: over many tensors a few runs say it
    few = {"warmup": min(timed["warmup"], 1), "repeats": min(repeats or 5, 5)}
    device = tensor_device()
    rows = []
    for layout, shapes in plan:
        n = sum(shapes)
        keys = {"layout": layout, "params": n, "tensors": len(shapes)}
        print(f"[optim] {layout}: {n:,} parameters ({backend.name()})", flush=True)
        checks = {}
        for name, make in METHODS.items():
            checks[name] = check = check_step(make, shapes, HYPER, hyper_used(name, device))
            if not check["ok"]:
                message = (f"{name}: array(s) {', '.join(check['failed'])} off the float64 "
                           f"reference by more than the error bound (worst {check['worst']})")
                if not name.startswith("torch"):  # gpudl's own variants must pass
                    raise RuntimeError(message)
                print(f"  check failed, timed all the same: {message}", flush=True)
        for name, timing in _timings(shapes, timed, few).items():
            n_bytes = 8 * n if name == "copy" else optim_kernels.BYTES_PER_PARAM * n
            rows.append(row(f"{name} [{layout}]", timing, n_bytes, optimizer=name,
                            kind=row_kind(n_bytes), **keys) | {"check": checks.get(name)})
        copy = rows[-len(METHODS) - 1]
        for r in rows[-len(METHODS) - 1:]:
            r["fraction_of_copy"] = (r["gbps"] / copy["gbps"] if r["gbps"] and copy["gbps"]
                                     else None)
    big = max((lay for lay in plan if len(lay[1]) == 1), key=lambda lay: lay[1][0])[0]
    return {"bytes_per_param": optim_kernels.BYTES_PER_PARAM, "hyper": HYPER, "rows": rows,
            "bars": evaluate_bars(BARS, rows, big=big, many=plan[-1][0])}
