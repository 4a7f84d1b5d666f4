"""The API table: every public callable of gpudl (each name in each ``__all__``, and the public
methods of gpudl's classes), with each numeric, array and choice parameter it takes and the
kind of bad value it must refuse (tests/api_kinds.py says which values each kind holds), or
the reason it has none. tests/test_api.py runs it, and fails for a public callable without an
entry here.

An entry is ``add(key, valid, call=..., **params)``: ``valid()`` returns keyword arguments the
callable accepts (tiny sizes: a refusal must come before any launch or process start, so a bad
value costs nothing); each keyword of ``params`` names a parameter and its kind; ``call(kwargs)``
calls it where ``key(**kwargs)`` would not (a method, ``*args``). ``none(key, reason)`` records
a callable with nothing to check, ``kernel(key)`` a raw ``@cuda.jit`` kernel (its arguments are
checked by its launcher; its launch configuration by :func:`gpudl.launches.check_launch`).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np
import torch
from api_kinds import (
    BOOL,
    CALLABLE,
    COUNT,
    FINITE,
    FRACTION,
    NONNEGATIVE,
    POSITIVE,
    SIZE,
    TIMEOUT,
    Entry,
    Kind,
    choice,
    float32,
    instance,
    integer,
    ints,
    real,
    tensor,
    torch_dtype,
    widths,
)

TABLE: dict[str, Entry] = {}


def resolve(key: str) -> Any:
    """The object ``key`` names: a module's attribute, or an attribute of one (a method)."""
    parts = key.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise KeyError(key)


def add(key: str, valid: Any, call: Any = None, *, distributed: bool = False,
        **params: Kind) -> None:
    assert key not in TABLE, f"two entries for {key}"
    TABLE[key] = Entry(key, valid, call, params, distributed=distributed)


def none(key: str, reason: str) -> None:
    assert key not in TABLE, f"two entries for {key}"
    TABLE[key] = Entry(key, reason=reason)


def kernel(*keys: str) -> None:
    for key in keys:
        none(key, "raw kernel: its launcher checks the arrays, gpudl.launches.check_launch the "
                  "launch configuration")


def method(cls_key: str, make: Any, name: str) -> Any:
    """A ``call`` for the method ``name`` of the instance ``make()``."""
    return lambda kw: getattr(make(), name)(**kw)


def f32(*shape: int) -> np.ndarray:
    """A small float32 array of ``shape`` (values 1 to 2, none zero)."""
    return (np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) / 97 + 1)


RECORD = "a record the package fills in and returns (its fields are results, not input)"
EXCEPTION = "an exception class"
NO_ARGUMENT = "takes no argument"
CLI = "a command line: its arguments are parsed and checked by argparse (tests/test_cli*.py)"
CHECK = "an input check itself: what it refuses is tested in tests/test_checks.py"
PLUMBING = ("plumbing that the checked entry points call with arrays they checked "
            "(gpudl.kernels.arrays)")

# ------------------------------------------------------------------------------------------
# gpudl, gpudl.backend, gpudl.checks, gpudl.launches, gpudl.aliasing, gpudl.simulator
# ------------------------------------------------------------------------------------------

none("gpudl.backend.name", NO_ARGUMENT)
none("gpudl.backend.is_simulator", NO_ARGUMENT)
none("gpudl.backend.pick", "returns one of its two arguments, whatever they are")
for _name in ("check_bool", "check_callable", "check_choice", "check_compute_capability",
              "check_equal", "check_float32_array", "check_int", "check_ints",
              "check_positive", "check_real", "check_tensor", "check_widths",
              "is_device_array", "largest", "largest_difference", "within"):
    none(f"gpudl.checks.{_name}", CHECK)

_GRID = Kind("a grid", (1.5, None, "1", (1, 2, 3, 4), (1, True)), (0, 2**31, (1, 65_536)))
_BLOCK = Kind("a block", (1.5, None, "1", (1, 2, 3, 4)), (0, 1025, (32, 32, 2), (1, 1, 65)))
add("gpudl.launches.check_launch", lambda: dict(kernel="k", griddim=4, blockdim=32),
    griddim=_GRID, blockdim=_BLOCK, shared_bytes=integer(0, 48 * 1024))
none("gpudl.launches.guard_launches", NO_ARGUMENT)

none("gpudl.aliasing.AliasedArgumentsError", EXCEPTION)
add("gpudl.aliasing.written_parameters", lambda: dict(func=lambda x: None), func=CALLABLE)
add("gpudl.aliasing.check_launch", lambda: dict(func=lambda x: None, args=()), func=CALLABLE)

none("gpudl.simulator.install", NO_ARGUMENT)
none("gpudl.simulator.rendezvous", "called by the simulated warp intrinsics, inside a kernel")
none("gpudl.simulator.Rendezvous", "made by rendezvous(), inside a simulated kernel")
none("gpudl.simulator.Rendezvous.exchange", "called by the simulated warp intrinsics")
none("gpudl.simulator.WarpDivergenceError", EXCEPTION)

# ------------------------------------------------------------------------------------------
# gpudl.interop, gpudl.trace, gpudl.ptx
# ------------------------------------------------------------------------------------------

_TENSOR = tensor(wrong_dtype=torch.bool)
add("gpudl.interop.as_kernel_array", lambda: dict(tensor=torch.ones(4)), tensor=_TENSOR,
    owned=BOOL)
add("gpudl.interop.check_device", lambda: dict(tensor=torch.ones(4)),
    tensor=tensor(contiguous=False))
none("gpudl.interop.tensor_device", NO_ARGUMENT)
add("gpudl.interop.KernelArrays", lambda: dict(capacity=4), capacity=COUNT)
add("gpudl.interop.KernelArrays.get", lambda: dict(tensor=torch.ones(4)),
    method("KernelArrays", lambda: resolve("gpudl.interop.KernelArrays")(), "get"),
    tensor=_TENSOR)


@functools.cache
def _trace():
    from gpudl.kernels import transpose
    from gpudl.trace import trace

    return trace(transpose.v2_shared, 1, (32, 8), f32(32, 32), f32(32, 32))


for _name in ("Access", "Request", "RequestStats", "Trace"):
    none(f"gpudl.trace.{_name}", RECORD)
_KIND, _OP = choice("global", "shared"), choice("load", "store")
_ARRAY = Kind("an array name or position", (1.5, [0], True), (-1, 9))
add("gpudl.trace.Trace.requests", dict, method("Trace", _trace, "requests"),
    kind=_KIND.allowing_none(), op=_OP.allowing_none(), array=_ARRAY, line=integer(1).allowing_none())
add("gpudl.trace.Trace.sectors_per_request", dict,
    method("Trace", _trace, "sectors_per_request"), op=_OP, array=_ARRAY, line=integer(1).allowing_none())
add("gpudl.trace.Trace.bank_conflict_degree", dict,
    method("Trace", _trace, "bank_conflict_degree"), op=_OP.allowing_none(), array=_ARRAY,
    line=integer(1).allowing_none())
none("gpudl.trace.Trace.summary", NO_ARGUMENT)


def _trace_call(kw: dict) -> Any:
    from gpudl.trace import trace

    return trace(kw["kernel"], kw["griddim"], kw["blockdim"], f32(32), f32(32),
                 dynamic_shared_bytes=kw["dynamic_shared_bytes"])


add("gpudl.trace.trace", lambda: dict(kernel=resolve("gpudl.kernels.memory.copy_kernel"),
                                      griddim=1, blockdim=32, dynamic_shared_bytes=0),
    _trace_call, kernel=Kind("a kernel", (None, print, "k")), griddim=_GRID, blockdim=_BLOCK,
    dynamic_shared_bytes=integer(0, 48 * 1024))
add("gpudl.trace.on_simulator", lambda: dict(fn=abs), lambda kw: resolve(
    "gpudl.trace.on_simulator")(kw["fn"], -1), fn=CALLABLE)

_CC = Kind("a compute capability", ((9,), "9.0", 9.0, None, [9, 0], (9, 0.5)), ((-1, 0),))
none("gpudl.ptx.CompileTarget", "stands in for the device while compiling without one")
none("gpudl.ptx.ToolkitMissing", EXCEPTION)
none("gpudl.ptx.prepare_compiler", NO_ARGUMENT)
none("gpudl.ptx.find_libdevice", NO_ARGUMENT)
none("gpudl.ptx.find_tool", "name: any program's name, looked up on the path")
none("gpudl.ptx.available", NO_ARGUMENT)
add("gpudl.ptx.compile_ptx", lambda: dict(module="gpudl.kernels.memory", name="copy_kernel",
                                          signature="void(float32[::1], float32[::1])"),
    cc=_CC)
add("gpudl.ptx.compile_many", lambda: dict(jobs=[]), cc=_CC, timeout=TIMEOUT)
add("gpudl.ptx.ptx", lambda: dict(name="copy_v1"), cc=_CC, name=choice("copy_v1"))
add("gpudl.ptx.ptx_many", lambda: dict(names=["copy_v1"]), cc=_CC, timeout=TIMEOUT,
    names=Kind("kernel names", ("copy_v1", None, [1]), (["nope"],)))
add("gpudl.ptx.ptxas", lambda: dict(text=".version 8.0"), cc=_CC)
add("gpudl.ptx.sass", lambda: dict(text=".version 8.0"), cc=_CC)
none("gpudl.ptx.body", "text: PTX, any str (a text without a kernel has no body)")
none("gpudl.ptx.memory_instructions", "text: PTX, any str")
none("gpudl.ptx.main", CLI)

# ------------------------------------------------------------------------------------------
# gpudl.hardware
# ------------------------------------------------------------------------------------------

_GPU = Kind("a GPU's name", (None, 1, ["H100 SXM"]), ("A100", ""))
none("gpudl.hardware.device.DeviceInfo", RECORD)
none("gpudl.hardware.device.DeviceInfo.summary", NO_ARGUMENT)
none("gpudl.hardware.device.describe", NO_ARGUMENT)
none("gpudl.hardware.specs.GpuSpec", "a datasheet's row, written once in gpudl.hardware.specs")
add("gpudl.hardware.specs.spec", lambda: dict(name="H100 SXM"), name=_GPU)
add("gpudl.hardware.specs.datasheet_number", lambda: dict(value=19.5),
    value=NONNEGATIVE.allowing_none())
add("gpudl.hardware.choosing.peak_flops", lambda: dict(name="H100 SXM"), name=_GPU,
    precision=choice("fp32", "fp16", "bf16", "tf32"))
add("gpudl.hardware.choosing.compare_gpus", dict, bytes_per_gpu=POSITIVE.allowing_none(),
    names=Kind("GPU names", ("H100 SXM", 1, [1]), (["nope"],)))
none("gpudl.hardware.sm_limits.SmLimits", "an SM's limits, written once in SM_LIMITS")
none("gpudl.hardware.sm_limits.Occupancy", RECORD)
add("gpudl.hardware.sm_limits.occupancy",
    lambda: dict(threads_per_block=256, registers_per_thread=32, shared_mem_per_block=0,
                 compute_capability=(9, 0)),
    threads_per_block=integer(1, 1024), registers_per_thread=integer(1, 255),
    shared_mem_per_block=integer(0, 227 * 1024), compute_capability=_CC.more((), ((5, 1),)))

# ------------------------------------------------------------------------------------------
# gpudl.estimate
# ------------------------------------------------------------------------------------------

_E = "gpudl.estimate"
_REALS = Kind("reals", ("1", 1, None, ["a", 2.0]), ([1.0], [float("nan"), 2.0],
                                                      [-1.0, 2.0], [1.0, float("inf")]))
add(f"{_E}.bubble.bubble_fraction", lambda: dict(stages=4, microbatches=8), stages=COUNT,
    microbatches=COUNT)
add(f"{_E}.collectives.allreduce_bytes_per_rank", lambda: dict(n_bytes=1e6, world_size=4),
    n_bytes=NONNEGATIVE, world_size=COUNT)
add(f"{_E}.collectives.allreduce_time",
    lambda: dict(n_bytes=1e6, world_size=4, bandwidth=1e9, latency=1e-5), n_bytes=NONNEGATIVE,
    world_size=COUNT, bandwidth=POSITIVE, latency=NONNEGATIVE)
add(f"{_E}.collectives.data_parallel_step_time",
    lambda: dict(compute_s=0.1, grad_bytes=1e6, world_size=4, bandwidth=1e9, latency=1e-5,
                 backward_fraction=0.6, n_buckets=2),
    compute_s=NONNEGATIVE, grad_bytes=NONNEGATIVE, world_size=COUNT, bandwidth=POSITIVE,
    latency=NONNEGATIVE, backward_fraction=FRACTION, n_buckets=COUNT)
add(f"{_E}.collectives.fit_allreduce",
    lambda: dict(sizes_bytes=[1e3, 1e6, 1e7], times_s=[1e-5, 1e-3, 1e-2], world_size=4),
    sizes_bytes=_REALS, times_s=_REALS.more((), ([0.0, 1.0, 2.0],)), world_size=integer(2))
add(f"{_E}.memory.model_state_memory", lambda: dict(n_params=1e9, n_gpus=8, zero_stage=1),
    n_params=POSITIVE, n_gpus=COUNT, zero_stage=integer(0, 3), optimizer=choice("adam", "sgd"),
    precision=choice("mixed", "fp32"))
add(f"{_E}.memory.activation_memory",
    lambda: dict(seq_len=16, batch_size=2, hidden=32, n_heads=4), seq_len=COUNT,
    batch_size=COUNT, hidden=COUNT, n_heads=COUNT,
    recompute=choice("none", "selective", "full"), fused_attention=BOOL)
add(f"{_E}.training.training_flops",
    lambda: dict(n_params=1e6, n_tokens=1e9, n_layers=2, n_heads=2, head_dim=4, seq_len=8),
    n_params=POSITIVE, n_tokens=POSITIVE, n_layers=COUNT.allowing_none(),
    n_heads=COUNT.allowing_none(), head_dim=COUNT.allowing_none(),
    seq_len=COUNT.allowing_none())
add(f"{_E}.training.mfu", lambda: dict(tokens_per_second=1e4, flops_per_token=6e9, n_gpus=8,
                                        peak_flops_per_gpu=1e15),
    tokens_per_second=POSITIVE, flops_per_token=POSITIVE, n_gpus=COUNT,
    peak_flops_per_gpu=POSITIVE)
add(f"{_E}.training.training_time",
    lambda: dict(flops=1e20, n_gpus=8, peak_flops_per_gpu=1e15, mfu=0.4), flops=NONNEGATIVE,
    n_gpus=COUNT, peak_flops_per_gpu=POSITIVE, mfu=real(0, 1, strict=True))
add(f"{_E}.training.training_cost",
    lambda: dict(seconds=3600.0, n_gpus=8, price_per_gpu_hour=2.0), seconds=NONNEGATIVE,
    n_gpus=COUNT, price_per_gpu_hour=NONNEGATIVE)
add(f"{_E}.training.training_energy", lambda: dict(seconds=3600.0, n_gpus=8, watts_per_gpu=700),
    seconds=NONNEGATIVE, n_gpus=COUNT, watts_per_gpu=NONNEGATIVE)
add(f"{_E}.roofline.roofline",
    lambda: dict(intensity=2.0, peak_flops=1e15, peak_bandwidth=3e12),
    intensity=NONNEGATIVE.more((), (np.array([1.0, -1.0]), np.array([float("nan")]))),
    peak_flops=POSITIVE, peak_bandwidth=POSITIVE)
add(f"{_E}.roofline.ridge_point", lambda: dict(peak_flops=1e15, peak_bandwidth=3e12),
    peak_flops=POSITIVE, peak_bandwidth=POSITIVE)
none(f"{_E}.cli.add_parser", CLI)
none(f"{_E}.cli.run", CLI)
