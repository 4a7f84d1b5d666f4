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

import collections
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
    real_array,
    tensor,
    torch_dtype,
    widths,
)
from workers import hello

from gpudl import toolchain

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
        aliases: dict[str, tuple[str, ...]] | None = None, **params: Kind) -> None:
    assert key not in TABLE, f"two entries for {key}"
    TABLE[key] = Entry(key, valid, call, params, distributed=distributed,
                       aliases=aliases or {})


def none(key: str, reason: str) -> None:
    assert key not in TABLE, f"two entries for {key}"
    TABLE[key] = Entry(key, reason=reason)


def kernel(*keys: str) -> None:
    for key in keys:
        none(key, "raw kernel: its launcher checks the arrays, gpudl.launches.check_launch the "
                  "launch configuration")


def variants(family: str, *more: str) -> Any:
    """The choice of a ``variant`` argument: ``more``, then the keys gpudl.registry declares for
    ``family``."""
    from gpudl import registry

    registry.load_all()
    return choice(*more, *registry.variants(family))


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
#: A floating-point format of kernel arrays (gpudl.checks.FLOAT_DTYPES).
_FORMAT = choice("float32", "float16", "bfloat16")
PLUMBING = ("plumbing that the checked entry points call with arrays they checked "
            "(gpudl.kernels.arrays)")

# ------------------------------------------------------------------------------------------
# gpudl, gpudl.backend, gpudl.checks, gpudl.launches, gpudl.aliasing, gpudl.simulator
# ------------------------------------------------------------------------------------------

none("gpudl.backend.name", NO_ARGUMENT)
none("gpudl.backend.is_simulator", NO_ARGUMENT)
none("gpudl.backend.pick", "returns one of its two arguments, whatever they are")
none("gpudl.backend.compile_in_child", "module, jobs, ccs and timeout: those of the compile "
                                       "functions that call it (gpudl.ptx, gpudl.triton_ptx), "
                                       "which check them")
none("gpudl.backend.libcuda", NO_ARGUMENT)
for _name in ("check_array", "check_bool", "check_callable", "check_choice",
              "check_compute_capability", "check_equal", "check_float32_array",
              "check_float_array", "check_host_or_device", "check_instance", "check_int",
              "check_ints", "check_kernel_array", "check_positive", "check_real",
              "check_real_mapping", "check_reals", "check_tensor", "check_widths",
              "is_device_array", "largest", "largest_difference", "within"):
    none(f"gpudl.checks.{_name}", CHECK)
add("gpudl.checks.float_dtype", lambda: dict(dtype="float16"), dtype=_FORMAT)
none("gpudl.checks.OneLineArgumentParser", CLI)
none("gpudl.checks.OneLineArgumentParser.error", CLI)
none("gpudl.checks.fail", "prints a command's error line (tests/test_cli.py)")

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
none("gpudl.simulated_blocks.install", "called by gpudl.simulator.install")
none("gpudl.simulated_blocks.worker_count", NO_ARGUMENT)
_BLOCKS = "gpudl.simulated_blocks"
none(f"{_BLOCKS}.SimulatedBlock", "made by the simulator's block manager, one per block")
for _name, _why in (("run", "called by the simulator's block manager"),
                    ("serve", "called by a worker given the block"),
                    ("wait", "called by syncthreads, inside a simulated kernel"),
                    ("finished", "called by a worker as each task ends"),
                    ("blocking", "called by a simulated thread about to wait for others"),
                    ("unblocked", "called by a simulated thread that waits no more"),
                    ("exited", "called by the simulated warp intrinsics")):
    none(f"{_BLOCKS}.SimulatedBlock.{_name}", _why)
none(f"{_BLOCKS}.Worker", "made by the pool, started once and reused")
for _name in ("give", "run", "run_task"):
    none(f"{_BLOCKS}.Worker.{_name}", "called by the pool and the blocks it serves")
for _name in ("syncthreads", "syncthreads_count", "syncthreads_and", "syncthreads_or"):
    none(f"{_BLOCKS}.Worker.{_name}", "called by the kernel API, inside a simulated kernel")

# ------------------------------------------------------------------------------------------
# gpudl.interop, gpudl.trace, gpudl.ptx
# ------------------------------------------------------------------------------------------

_TENSOR = tensor(wrong_dtype=torch.bool)
add("gpudl.interop.as_kernel_array", lambda: dict(tensor=torch.ones(4)), tensor=_TENSOR,
    owned=BOOL)
add("gpudl.interop.check_device", lambda: dict(tensor=torch.ones(4)),
    tensor=tensor(contiguous=False))
none("gpudl.interop.tensor_device", NO_ARGUMENT)
add("gpudl.interop.as_tensor", lambda: dict(array=resolve("numba.cuda").to_device(f32(4))),
    array=Kind("a numba device array", (f32(4), None, [1.0], torch.ones(4)), ()))
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
    kind=_KIND.allowing_none(), op=_OP.allowing_none(), array=_ARRAY,
    line=integer(1).allowing_none())
add("gpudl.trace.Trace.sectors_per_request", dict,
    method("Trace", _trace, "sectors_per_request"), op=_OP, array=_ARRAY,
    line=integer(1).allowing_none())
add("gpudl.trace.Trace.bank_conflict_degree", dict,
    method("Trace", _trace, "bank_conflict_degree"), op=_OP.allowing_none(), array=_ARRAY,
    line=integer(1).allowing_none())
none("gpudl.trace.Trace.summary", NO_ARGUMENT)


def _trace_call(kw: dict) -> Any:
    from gpudl.trace import trace

    return trace(kw["kernel"], kw["griddim"], kw["blockdim"], f32(32), f32(32),
                 dynamic_shared_bytes=kw["dynamic_shared_bytes"])


add("gpudl.trace.trace", lambda: dict(kernel=resolve("gpudl.kernels.memory.copy_v1_naive"),
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
add("gpudl.ptx.compile_ptx", lambda: dict(module="gpudl.kernels.memory", name="copy_v1_naive",
                                          signature="void(float32[::1], float32[::1])"),
    cc=_CC)
add("gpudl.ptx.compile_many", lambda: dict(jobs=[]), cc=_CC, timeout=TIMEOUT)
add("gpudl.ptx.ptx", lambda: dict(name="copy_v1_naive"), cc=_CC, name=choice("copy_v1_naive"))
add("gpudl.ptx.ptx_many", lambda: dict(names=["copy_v1_naive"]), cc=_CC, timeout=TIMEOUT,
    names=Kind("kernel names", ("copy_v1_naive", None, [1]), (["nope"],)))
add("gpudl.ptx.ptxas", lambda: dict(text=".version 8.0"), cc=_CC)
add("gpudl.ptx.sass", lambda: dict(text=".version 8.0"), cc=_CC)
none("gpudl.ptx.body", "text: PTX, any str (a text without a kernel has no body)")
none("gpudl.ptx.memory_instructions", "text: PTX, any str")
none("gpudl.ptx.instruction_counts", "text: PTX, any str")
none("gpudl.ptx.main", CLI)
add("gpudl.ptx.compile_for_targets", lambda: dict(jobs=[], ccs=[(9, 0)]), timeout=TIMEOUT,
    ccs=Kind("a list of compute capabilities", ((9, 0), None, [9.0]), ([(-1, 0)],)))
none("gpudl.ptx.kernels", NO_ARGUMENT)

# gpudl.toolchain
_TOOLCHAIN = "gpudl.toolchain"


def _machine():
    return toolchain.Toolchain("T4", "550.54.15", (12, 4), (12, 9), "8.8", (12, 9))


none(f"{_TOOLCHAIN}.Toolchain", RECORD)
for _name in ("driver_cuda", "gpu_and_driver", "installed_nvjitlink", "facts", "smoke_test"):
    none(f"{_TOOLCHAIN}.{_name}", NO_ARGUMENT)
none(f"{_TOOLCHAIN}.install_requirements", "cuda: a (major, minor) version, below 12 refused "
     "with ValueError; nvjitlink and requirements: mappings (tests/test_toolchain.py)")
none(f"{_TOOLCHAIN}.ptx_cuda", "isa: any str (None for a version cuda-bindings' table lacks)")
add(f"{_TOOLCHAIN}.verdict", lambda: dict(t=_machine()), t=instance(toolchain.Toolchain))
add(f"{_TOOLCHAIN}.report", lambda: dict(t=_machine()), t=instance(toolchain.Toolchain))
none(f"{_TOOLCHAIN}.main", CLI)

# gpudl.registry, gpudl.resources
_DECORATOR = ("a decorator: what it registers is checked when it registers a kernel "
              "(tests/test_kernels_compile.py)")
none("gpudl.registry.Kernel", RECORD)
none("gpudl.registry.kernel", _DECORATOR)
none("gpudl.registry.factory", _DECORATOR)
none("gpudl.registry.kernel_modules", NO_ARGUMENT)
none("gpudl.registry.load_all", NO_ARGUMENT)
none("gpudl.registry.module_section", "module: a module's name, any str (None if not imported)")
none("gpudl.registry.Variant", RECORD)
none("gpudl.registry.variant", "a decorator: its family, key, kernels and per-element figures are "
                               "checked when it declares a variant (tests/test_variants.py)")
none("gpudl.registry.variant_records", "family: a declared family's name, any str (KeyError "
                                       "naming the families otherwise, tests/test_variants.py)")
none("gpudl.registry.variants", "family: as variant_records")
none("gpudl.registry.triton_kernel", _DECORATOR)
add("gpudl.registry.installed", lambda: dict(package="triton"), package=choice("triton"))
none("gpudl.registry.check_variant", CHECK + " and tests/test_variants.py")
_TRITON_PTX = "gpudl.triton_ptx"
none(f"{_TRITON_PTX}.installed", NO_ARGUMENT)
none(f"{_TRITON_PTX}.main", CLI)
none(f"{_TRITON_PTX}.parse_signature", "signature: any str (ValueError unless it reads "
                                       "'(...)', tests/test_tiles.py)")
none(f"{_TRITON_PTX}.compile_build", "job: a registry build, cc: a target that "
                                     "compile_for_targets checked")
add(f"{_TRITON_PTX}.compile_for_targets", lambda: dict(jobs=[], ccs=[(9, 0)]), timeout=TIMEOUT,
    ccs=Kind("a list of compute capabilities", ((9, 0), None, [9.0]), ([(-1, 0)],)))
add(f"{_TRITON_PTX}.ptxas_path", lambda: dict(cc=(9, 0)), cc=_CC)
add(f"{_TRITON_PTX}.assemble", lambda: dict(text=".version 8.0", cc=(9, 0)), cc=_CC)
none(f"{_TRITON_PTX}.version", "ccs: the targets, each checked by ptxas_path")
none("gpudl.resources.Report", RECORD)
none("gpudl.resources.parse", "text: ptxas's report, any str (ValueError without an entry)")
none("gpudl.resources.assemble_many", "texts and ccs: one compute capability per PTX text, "
     "each checked by gpudl.ptx.ptxas")
none("gpudl.resources.version", NO_ARGUMENT)
none("gpudl.resources.jobs", NO_ARGUMENT)
none("gpudl.resources.table", "compiled: compile_all()'s result, or None to compile")
none("gpudl.resources.compile_all", NO_ARGUMENT)
none("gpudl.resources.load", NO_ARGUMENT)
none("gpudl.resources.main", CLI)
none("gpudl.resources.threads_per_block", "row and entry: a stored row and its kernel's "
                                          "registry record")

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
add(f"{_E}.register_file.register_file_bandwidth_gbs", dict,
    info=Kind("a DeviceInfo", ("H100", 1, {})))
add(f"{_E}.memory_per_gpu.model_state_memory", lambda: dict(n_params=1e9, n_gpus=8, zero_stage=1),
    n_params=POSITIVE, n_gpus=COUNT, zero_stage=integer(0, 3), optimizer=choice("adam", "sgd"),
    precision=choice("mixed", "fp32"), tensor=COUNT, pipeline=COUNT, context=COUNT,
    expert=COUNT.more((), (3,)), expert_params=NONNEGATIVE.more((), (2e9,)))
_TOP_K = COUNT.more((), (9,))  # of 8 experts
add(f"{_E}.experts.expert_capacity",
    lambda: dict(tokens=16, experts=8, top_k=2, capacity_factor=1.0), tokens=COUNT,
    experts=COUNT, top_k=_TOP_K, capacity_factor=POSITIVE)
add(f"{_E}.experts.active_parameters",
    lambda: dict(n_params=1e9, expert_params=5e8, experts=8, top_k=2), n_params=POSITIVE,
    expert_params=NONNEGATIVE.more((), (2e9,)), experts=COUNT, top_k=_TOP_K)
add(f"{_E}.experts.all_to_all_bytes_per_rank", lambda: dict(n_bytes=1e6, world_size=4),
    n_bytes=NONNEGATIVE, world_size=COUNT)
add(f"{_E}.experts.all_to_all_time",
    lambda: dict(n_bytes=1e6, world_size=4, bandwidth=1e9, latency=1e-5), n_bytes=NONNEGATIVE,
    world_size=COUNT, bandwidth=POSITIVE, latency=NONNEGATIVE)
add(f"{_E}.experts.moe_all_to_all_bytes",
    lambda: dict(tokens=16, hidden=8, top_k=2, expert_degree=4, capacity_factor=1.25),
    tokens=COUNT, hidden=COUNT, top_k=COUNT, expert_degree=COUNT, bytes_per_value=POSITIVE,
    capacity_factor=POSITIVE.allowing_none())
add(f"{_E}.experts.tensor_parallel_bytes", lambda: dict(tokens=16, hidden=8, tensor_degree=4),
    tokens=COUNT, hidden=COUNT, tensor_degree=COUNT, bytes_per_value=POSITIVE)
add(f"{_E}.memory_per_gpu.activation_memory",
    lambda: dict(seq_len=16, batch_size=2, hidden=32, n_heads=4), seq_len=COUNT,
    batch_size=COUNT, hidden=COUNT, n_heads=COUNT,
    recompute=choice("none", "selective", "full"), fused_attention=BOOL,
    context_parallel=COUNT.more((), (17,)))
_CPE = f"{_E}.context"
_CHUNK = dict(chunk=COUNT, heads=COUNT, head_dim=COUNT)
add(f"{_CPE}.ring_step_bytes", lambda: dict(chunk=8, heads=2, head_dim=4), **_CHUNK,
    bytes_per_element=COUNT)
add(f"{_CPE}.ring_step_flops", lambda: dict(chunk=8, heads=2, head_dim=4), **_CHUNK,
    causal=BOOL)
add(f"{_CPE}.ring_step_time",
    lambda: dict(chunk=8, heads=2, head_dim=4, bandwidth=1e9, peak=1e12), **_CHUNK,
    bandwidth=POSITIVE, peak=POSITIVE, bytes_per_element=COUNT, causal=BOOL)
add(f"{_CPE}.hiding_chunk", lambda: dict(bandwidth=1e9, peak=1e12), bandwidth=POSITIVE,
    peak=POSITIVE, bytes_per_element=COUNT, causal=BOOL)
add(f"{_CPE}.hiding_chunks", dict, causal=BOOL)
add(f"{_CPE}.context_bytes_per_gpu",
    lambda: dict(seq_len=64, heads=2, head_dim=4, world_size=4), seq_len=COUNT, heads=COUNT,
    head_dim=COUNT, world_size=COUNT, strategy=choice("ring", "ulysses"),
    bytes_per_element=COUNT)
add(f"{_E}.training_cost.training_flops",
    lambda: dict(n_params=1e6, n_tokens=1e9, n_layers=2, n_heads=2, head_dim=4, seq_len=8),
    n_params=POSITIVE, n_tokens=POSITIVE, n_layers=COUNT.allowing_none(),
    n_heads=COUNT.allowing_none(), head_dim=COUNT.allowing_none(),
    seq_len=COUNT.allowing_none())
add(f"{_E}.training_cost.mfu", lambda: dict(tokens_per_second=1e4, flops_per_token=6e9, n_gpus=8,
                                        peak_flops_per_gpu=1e15),
    tokens_per_second=POSITIVE, flops_per_token=POSITIVE, n_gpus=COUNT,
    peak_flops_per_gpu=POSITIVE)
add(f"{_E}.training_cost.training_time",
    lambda: dict(flops=1e20, n_gpus=8, peak_flops_per_gpu=1e15, mfu=0.4), flops=NONNEGATIVE,
    n_gpus=COUNT, peak_flops_per_gpu=POSITIVE, mfu=real(0, 1, strict=True))
add(f"{_E}.training_cost.training_cost",
    lambda: dict(seconds=3600.0, n_gpus=8, price_per_gpu_hour=2.0), seconds=NONNEGATIVE,
    n_gpus=COUNT, price_per_gpu_hour=NONNEGATIVE)
add(f"{_E}.training_cost.training_energy",
    lambda: dict(seconds=3600.0, n_gpus=8, watts_per_gpu=700),
    seconds=NONNEGATIVE, n_gpus=COUNT, watts_per_gpu=NONNEGATIVE)
add(f"{_E}.roofline.roofline",
    lambda: dict(intensity=2.0, peak_flops=1e15, peak_bandwidth=3e12),
    intensity=real(0).without(float("inf")).more((), (np.array([1.0, -1.0]),
                                                      np.array([float("nan")]))),
    peak_flops=POSITIVE, peak_bandwidth=POSITIVE)
add(f"{_E}.roofline.ridge_point", lambda: dict(peak_flops=1e15, peak_bandwidth=3e12),
    peak_flops=POSITIVE, peak_bandwidth=POSITIVE)
none(f"{_E}.cli.add_parser", CLI)
none(f"{_E}.cli.run", CLI)
none(f"{_E}.published.Published", "a published number, written once in "
                                  "gpudl.estimate.published")

_PR, _PQ = f"{_E}.predictions.boxes", f"{_E}.predictions.quantities"
_BOX_TOPICS = ("elementwise", "streams", "memory", "matmul", "digits-training", "optim",
               "launch", "allreduce", "ddp-timeline", "dataparallel", "pipeline", "bias-gelu",
               "zero", "precision", "attention", "tensorcores", "decode")
_BOX = {"topic": choice(*_BOX_TOPICS), "view": choice("bandwidth", "divergence", "cpu_vs_gpu")}
none(f"{_PQ}.Prediction", RECORD)
add(f"{_PR}.predict", lambda: dict(topic="elementwise", view="bandwidth"), **_BOX)
add(f"{_PR}.published", lambda: dict(topic="elementwise", view="bandwidth"), **_BOX)
add(f"{_PR}.expected", lambda: dict(topic="elementwise", view="bandwidth", gpu="H200 SXM"),
    gpu=choice("H100 SXM", "H200 SXM"), **_BOX)


def _prediction() -> object:
    from gpudl.estimate.predictions import Prediction

    return Prediction("a", (1.0, 2.0), "ms", "a model", "ch01", "bound", ("a", "b"))


add(f"{_PR}.measured_value",
    lambda: dict(prediction=_prediction(), record={"rows": [{"name": "a", "median_s": 1.0}]},
                 row="b"),
    prediction=Kind("a Prediction", (None, "a", 1, {})),
    record=Kind("a record", (None, "x", 1, [])), row=choice("a", "b").allowing_none())
add(f"{_PR}.reference_gpu", lambda: dict(name="NVIDIA H200", memory_bytes=141e9),
    name=Kind("a device's name", (None, 1, ["H200"])), memory_bytes=NONNEGATIVE.allowing_none())
add(f"{_PQ}.shown", lambda: dict(value=1e-3, unit="ms"), value=FINITE,
    unit=choice("ms", "µs", "GB/s", "TFLOP/s", "MB", ""))
for _name in ("alike", "bandwidth", "clock", "computed", "mlp_params", "moved", "nvlink", "pcie",
              "per_gpu", "time_unit", "timed"):
    none(f"{_PQ}.{_name}", "plumbing of the boxes' predictions, called with the package's own "
                           "constants and the GPUs of gpudl.estimate.predictions.GPUS")

# ------------------------------------------------------------------------------------------
# gpudl.kernels: the grid, the array plumbing and the Chapter 1 to 3 kernels
# ------------------------------------------------------------------------------------------

_K = "gpudl.kernels"
for _name in ("optim.adam.adam_element", "optim.mixed.bf16_to_f32", "optim.mixed.f32_to_bf16"):
    none(f"{_K}.{_name}", "a device function, called inside kernels")
for _name in ("load4", "store4"):
    none(f"{_K}.wide.{_name}", "a device function (simulated on the simulator), called "
                               "inside kernels with indices they bound")

_TPB = Kind("threads per block", (1.5, "256", True, None), (0, 16, 1056, 2048, -32))
_V1 = float32(1)
add(f"{_K}.grid.thread_ids", lambda: dict(blocks=1, threads_per_block=32), blocks=COUNT,
    threads_per_block=integer(1, 1024))
add(f"{_K}.grid.blocks_to_cover", lambda: dict(n=10, threads_per_block=32), n=SIZE,
    threads_per_block=COUNT, maximum=COUNT.allowing_none())
add(f"{_K}.grid.tiles_to_cover", lambda: dict(shape=(3, 5), tile=32), tile=COUNT,
    shape=Kind("a 2-D shape", (None, 3, (3, 1.5), "3,5", (3,)), ((0, 5), (3, -1))))
add(f"{_K}.grid.resident_blocks", lambda: dict(threads_per_block=32),
    threads_per_block=integer(1, 1024))
add(f"{_K}.grid.grid_stride_blocks", lambda: dict(n=10, threads_per_block=32), n=SIZE,
    threads_per_block=integer(1, 1024), maximum=COUNT.allowing_none())
add(f"{_K}.grid.check_threads_per_block", lambda: dict(threads_per_block=32),
    threads_per_block=_TPB)

_ARRAYS = "gpudl.kernels.arrays"
add(f"{_ARRAYS}.filled", lambda: dict(shape=4, byte=0), byte=integer(0, 255), dtype=_FORMAT,
    shape=Kind("a shape", (1.5, None, "4", (2, 1.5)), (-1, (2, -1))))
add(f"{_ARRAYS}.poisoned", lambda: dict(shape=4),
    shape=Kind("a shape", (1.5, None, "4", (2, 1.5)), (-1, (2, -1))), dtype=_FORMAT)
add(f"{_ARRAYS}.zeros", lambda: dict(shape=4, on_device=False), on_device=BOOL,
    shape=Kind("a shape", (1.5, None, "4"), (-1, (2, -1))), dtype=_FORMAT)
add(f"{_ARRAYS}.to_device", lambda: dict(x=f32(4)), x=Kind("an array", (None, [1.0], 1.0)))
add(f"{_ARRAYS}.check_shape", lambda: dict(name="shape", shape=(2, 3)),
    shape=Kind("a shape", (1.5, None, "4", (2, 1.5)), (-1, (2, -1))))
none(f"{_ARRAYS}.returned", PLUMBING)
none(f"{_ARRAYS}.launch_into_poisoned", PLUMBING)
none(f"{_ARRAYS}.launch_in_place", PLUMBING)
add(f"{_ARRAYS}.from_float32", lambda: dict(x=f32(4), dtype="float16"), x=_V1, dtype=_FORMAT)
add(f"{_ARRAYS}.rounding_bound", lambda: dict(exact=np.ones(3), dtype="float16"), dtype=_FORMAT,
    exact=Kind("a float array", ("1", [1.0], np.ones(3, np.int64)), ()))
add(f"{_ARRAYS}.to_float64", lambda: dict(x=f32(4), dtype="float32"), x=_V1, dtype=_FORMAT)
add(f"{_ARRAYS}.check_arrays", lambda: dict(x=(f32(4), 1)),
    x=Kind("an (array, rank) pair", ((f32(4).astype(np.float64), 1), (None, 1)),
           ((f32(4, 1), 1),)), dtype=_FORMAT)

_E1 = f"{_K}.elementwise"
add(f"{_E1}.reference_vector_add", lambda: dict(a=f32(5), b=f32(5)),
    a=real_array(1).more((), (f32(6),)), b=real_array(1))
add(f"{_E1}.vector_add", lambda: dict(a=f32(5), b=f32(5)), a=_V1.more((), (f32(6),)), b=_V1,
    variant=variants("vector_add"),
    threads_per_block=_TPB)
add(f"{_E1}.reference_saxpy", lambda: dict(alpha=2.0, x=f32(5), y=f32(5)), alpha=FINITE,
    x=real_array(1).more((), (f32(6),)), y=real_array(1))
add(f"{_E1}.saxpy", lambda: dict(alpha=2.0, x=f32(5), y=f32(5)), alpha=FINITE,
    x=_V1.more((), (f32(6),)), y=_V1, variant=variants("saxpy"),
    threads_per_block=_TPB)
for _name in ("saxpy_numpy", "saxpy_numba_cpu"):
    add(f"{_E1}.{_name}", lambda: dict(alpha=2.0, x=f32(5), y=f32(5)), alpha=FINITE,
        x=_V1.more((), (f32(6),)), y=_V1, out=_V1.allowing_none().more((), (f32(6),)))
_M = f"{_K}.memory"
add(f"{_M}.reference_copy", lambda: dict(x=f32(5)), x=real_array(1))
add(f"{_M}.reference_copy_strided", lambda: dict(x=f32(5), stride=2), x=real_array(1),
    stride=COUNT)
add(f"{_M}.reference_copy_offset", lambda: dict(x=f32(5), offset=2), x=real_array(1),
    offset=integer(0, 4))
add(f"{_M}.copy", lambda: dict(x=f32(5)), x=_V1,
    variant=variants("copy"))
add(f"{_M}.copy_strided", lambda: dict(x=f32(5), stride=2), x=_V1, stride=COUNT)
add(f"{_M}.copy_offset", lambda: dict(x=f32(5), offset=2), x=_V1, offset=integer(0, 4))
add(f"{_M}.launch_copy_strided",
    lambda: dict(x=resolve("numba.cuda").to_device(f32(8)),
                 out=resolve("numba.cuda").to_device(f32(4)), stride=2), stride=COUNT.more(
        (), (3,)))
add(f"{_M}.launch_copy_offset",
    lambda: dict(x=resolve("numba.cuda").to_device(f32(8)),
                 out=resolve("numba.cuda").to_device(f32(4)), offset=2), offset=integer(0, 4))
add(f"{_M}.coalescing_report", dict, strides=ints(1, 0), offsets=ints(0, 0))

_T = f"{_K}.transpose"
add(f"{_T}.reference_transpose", lambda: dict(x=f32(3, 5)), x=real_array(2))
add(f"{_T}.transpose", lambda: dict(x=f32(3, 5)), x=float32(2),
    variant=variants("transpose"))
add(f"{_T}.transpose_grid", lambda: dict(shape=(3, 5)),
    shape=Kind("a 2-D shape", (None, 3, (3, 1.5), "3,5", (3,)), ((0, 5), (3, -1))))
add(f"{_T}.transpose_report", dict, side=integer(1, 256))
_R = f"{_K}.reduction"
_RVARIANT = variants("reduce")
add(f"{_R}.reference_sum", lambda: dict(x=f32(5)), x=float32(1))
add(f"{_R}.reduce_sum", lambda: dict(x=f32(5)), x=_V1, variant=_RVARIANT)
add(f"{_R}.check_variant", lambda: dict(variant="v1_atomic"), variant=_RVARIANT)
for _name in ("atomic_pass", "grid_stride_passes", "tree_passes", "zero_accumulator"):
    none(f"{_R}.{_name}", "a launcher on device arrays its entry point (reduce_sum) checked; "
                          "gpudl.launches.check_launch checks its launch")
none(f"{_R}.workspace", NO_ARGUMENT)
add(f"{_K}.reduction_error.addition_depth", lambda: dict(n=5, variant="v1_atomic"), n=COUNT,
    variant=_RVARIANT)
add(f"{_K}.reduction_error.error_bound", lambda: dict(x=f32(5), variant="v1_atomic"),
    x=float32(1), variant=_RVARIANT)

_MM = f"{_K}.matmul"
_MVARIANT = variants("matmul")
_A2 = float32(2, (3, 4)).more((), (f32(3, 5),))
add(f"{_MM}.reference", lambda: dict(a=f32(3, 4), b=f32(4, 2)),
    a=real_array(2, (3, 4)).more((), (f32(3, 5),)), b=real_array(2, (4, 2)))
add(f"{_MM}.error_bound", lambda: dict(a=f32(3, 4), b=f32(4, 2)),
    a=real_array(2, (3, 4)).more((), (f32(3, 5),)), b=real_array(2, (4, 2)))
add(f"{_MM}.flops", lambda: dict(m=2, k=3, n=4), m=SIZE, k=SIZE, n=SIZE)
add(f"{_MM}.launch_config", lambda: dict(variant="v5_register_2d", m=8, n=8),
    variant=_MVARIANT, m=COUNT.more((), (8 * 65_536 * 16,)), n=COUNT)
add(f"{_MM}.matmul", lambda: dict(a=f32(3, 4), b=f32(4, 2)), a=_A2, b=float32(2, (4, 2)),
    variant=_MVARIANT)

_NN = f"{_K}.nn"
add(f"{_NN}.linear_forward_flops", lambda: dict(batch=2, in_features=3, out_features=4),
    batch=SIZE, in_features=SIZE, out_features=SIZE, bias=BOOL)
add(f"{_NN}.linear_backward_flops", lambda: dict(batch=2, in_features=3, out_features=4),
    batch=SIZE, in_features=SIZE, out_features=SIZE, bias=BOOL)
add(f"{_NN}.relu_flops", lambda: dict(size=4), size=SIZE)
add(f"{_NN}.softmax_cross_entropy_flops", lambda: dict(batch=2, classes=3), batch=SIZE,
    classes=COUNT)
add(f"{_NN}.linear_forward", lambda: dict(x=f32(2, 3), w=f32(3, 4), b=f32(4)),
    x=float32(2, (2, 3)).more((), (f32(2, 5),)), w=float32(2, (3, 4)), b=float32(1, (4,)))
add(f"{_NN}.linear_backward", lambda: dict(x=f32(2, 3), w=f32(3, 4), dy=f32(2, 4)),
    x=float32(2, (2, 3)), w=float32(2, (3, 4)).more((), (f32(5, 4),)),
    dy=float32(2, (2, 4)).more((), (f32(2, 5),)))
add(f"{_NN}.relu_forward", lambda: dict(x=f32(2, 3)), x=float32(2, (2, 3)))
add(f"{_NN}.relu_backward", lambda: dict(x=f32(2, 3), dy=f32(2, 3)), x=float32(2, (2, 3)),
    dy=float32(2, (2, 3)).more((), (f32(3, 2),)))
add(f"{_NN}.softmax_cross_entropy",
    lambda: dict(logits=f32(2, 3), labels=np.array([0, 2])), logits=float32(2, (2, 3)),
    labels=Kind("class labels", ([0, 2], np.array([0.0, 2.0]), None),
                (np.array([0, 3]), np.array([-1, 0]), np.array([0]))))


def _device(*shape: int) -> Any:
    from numba import cuda

    return cuda.to_device(f32(*shape))


add(f"{_NN}.sgd_update", lambda: dict(param=_device(4), grad=_device(4), lr=0.1),
    param=Kind("a device array", (f32(4), None, [1.0])), lr=POSITIVE,
    grad=Kind("a device array", (f32(4), None)).more((), ()))

_BG = f"{_K}.bias_gelu"
add(f"{_BG}.reference", lambda: dict(x=f32(2, 3), b=f32(3)), x=real_array(2, (2, 3)),
    b=real_array(1, (3,)).more((), (f32(4),)))
add(f"{_BG}.reference_backward", lambda: dict(dy=f32(2, 3), x=f32(2, 3), b=f32(3)),
    dy=real_array(2, (2, 3)).more((), (f32(3, 2),)), x=real_array(2, (2, 3)),
    b=real_array(1, (3,)))
add(f"{_BG}.bias_gelu", lambda: dict(x=f32(2, 3), b=f32(3)), x=float32(2, (2, 3)),
    b=float32(1, (3,)).more((), (f32(4),)))
add(f"{_BG}.bias_gelu_backward", lambda: dict(dy=f32(2, 3), x=f32(2, 3), b=f32(3)),
    dy=float32(2, (2, 3)).more((), (f32(3, 2),)), x=float32(2, (2, 3)), b=float32(1, (3,)))
add(f"{_BG}.bias_gelu_tensor", lambda: dict(x=torch.ones(2, 3), b=torch.ones(3)),
    x=tensor(shape=(2, 3), contiguous=False, wrong_dtype=torch.float64),
    b=tensor(shape=(3,), contiguous=False, wrong_dtype=torch.float64).more((), (
        torch.ones(4),)))
none(f"{_BG}.BiasGeLU", "a torch.autograd.Function: bias_gelu_tensor checks its input")
none(f"{_BG}.BiasGeLU.forward", "called by autograd through bias_gelu_tensor")
none(f"{_BG}.BiasGeLU.backward", "called by autograd")

_CH10 = "gpudl.solutions.ch10"
add(f"{_CH10}.bias_gelu_triton", lambda: dict(x=f32(2, 3), b=f32(3)), x=float32(2, (2, 3)),
    b=float32(1, (3,)).more((), (f32(4),)))
add(f"{_CH10}.layer_norm_triton", lambda: dict(x=f32(2, 3), w=f32(3), b=f32(3)),
    x=float32(2, (2, 3)), w=float32(1, (3,)).more((), (f32(4),)),
    b=float32(1, (3,)).more((), (f32(4),)), eps=POSITIVE)
add(f"{_CH10}.autotuning_seconds", lambda: dict(configs=2, keys=3), configs=COUNT, keys=COUNT,
    warmup_ms=NONNEGATIVE, rep_ms=POSITIVE)

_B = f"{_K}.buckets"
_GRADS = Kind("gradient arrays", (f32(3), None, [f32(3).astype(np.float64)], "g"),
              ([], [f32(3, 1)]))
add(f"{_B}.offsets", lambda: dict(sizes=[3, 2]), sizes=ints(0, 0).more((), ([3, -1],)))
add(f"{_B}.reference_pack", lambda: dict(grads=[f32(3), f32(2)], scale=0.5), scale=FINITE,
    grads=Kind("gradient arrays", (f32(3), None, "g", [[1.0]]), ([f32(3, 1)],)))
add(f"{_B}.reference_unpack", lambda: dict(bucket=f32(5), sizes=[3, 2]),
    bucket=real_array(1, (5,)).more((), (f32(6),)), sizes=ints(0).more((), ([3, -1],)))
add(f"{_B}.pack", lambda: dict(grads=[f32(3), f32(2)], bucket=f32(5), scale=0.5),
    grads=_GRADS, bucket=float32(1, (5,)).more((), (f32(6),)), scale=FINITE,
    variant=variants("buckets"))
add(f"{_B}.unpack", lambda: dict(grads=[f32(3), f32(2)], bucket=f32(5)), grads=_GRADS,
    bucket=float32(1, (5,)).more((), (f32(6),)),
    variant=variants("buckets"))
for _name in ("v1_per_tensor", "v2_multi_tensor"):
    none(f"{_B}.{_name}", "a launcher on arrays its entry points (pack, unpack) checked")

_D = f"{_K}.divergence"
add(f"{_D}.divergence", lambda: dict(n=32, mode="warp", work=1, threads_per_block=32), n=COUNT,
    mode=choice("parity", "warp"), work=COUNT, threads_per_block=_TPB)
add(f"{_D}.reference_divergence", lambda: dict(n=32, mode="warp", work=1,
                                               threads_per_block=32),
    n=COUNT, mode=choice("parity", "warp"), work=COUNT, threads_per_block=_TPB)
add(f"{_D}.divergence_paths", lambda: dict(mode="warp", n_threads=32, threads_per_block=32),
    n_threads=COUNT, mode=choice("parity", "warp"), threads_per_block=_TPB)
add(f"{_D}.launch_divergence",
    lambda: dict(out=resolve("numba.cuda").to_device(np.zeros(32, np.int64)), mode="warp",
                 work=1, threads_per_block=32),
    mode=choice("parity", "warp"), work=COUNT, threads_per_block=_TPB)

_H = f"{_K}.hierarchy"
_CHAIN = Kind("a pointer chain", ([1, 0], None, np.array([1.0, 0.0])),
              (np.array([1, 100_000], np.int32), np.array([1, -1], np.int32),
               np.array([], np.int32), np.array([2, 0, -1], np.int32), np.array([[1, 0]])))


def _chain():
    return resolve(f"{_H}.make_chain")(8, 2)


add(f"{_H}.make_chain", lambda: dict(n_elements=8, stride_elements=2), n_elements=COUNT,
    stride_elements=COUNT, seed=SIZE)
add(f"{_H}.reference_chase", lambda: dict(chain=_chain(), steps=3), chain=_CHAIN,
    steps=COUNT, start=integer(0, 7).more((), (1,)))
add(f"{_H}.check_chase", lambda: dict(got=0, chain=_chain(), steps=4), chain=_CHAIN,
    steps=COUNT, got=SIZE)
add(f"{_H}.pointer_chase", lambda: dict(chain=_chain(), steps=3), chain=_CHAIN, steps=COUNT,
    shared=BOOL)
none(f"{_H}.launch_chase", "a launcher on device arrays its entry point (pointer_chase) "
                           "checked; gpudl.launches.check_launch checks its launch")
add(f"{_H}.reference_read_sums",
    lambda: dict(a=f32(64), reps=1, blocks=2, threads_per_block=32), a=real_array(1),
    reps=COUNT, blocks=COUNT, threads_per_block=_TPB)
add(f"{_H}.read_sums", lambda: dict(a=f32(64), reps=1, blocks=2, threads_per_block=32),
    a=_V1.more((), (np.zeros(0, np.float32),)), reps=COUNT, blocks=COUNT.allowing_none(),
    threads_per_block=_TPB)
add(f"{_H}.reference_shared_sums", lambda: dict(src=f32(1024), iters=1, blocks=1),
    src=real_array(1, (1024,)).more((), (f32(8),)), iters=COUNT, blocks=COUNT)
add(f"{_H}.shared_sums", lambda: dict(src=f32(1024), iters=1, blocks=1),
    src=float32(1, (1024,)).more((), (f32(8),)), iters=COUNT, blocks=COUNT.allowing_none())
for _name in ("launch_read", "launch_shared_read"):
    none(f"{_H}.{_name}", "a launcher on device arrays its entry point checked; "
                          "gpudl.launches.check_launch checks its launch")

_AT = f"{_K}.attention"
_Q = float32(3, (1, 5, 4)).more((), (f32(1, 5, 129), f32(1, 5, 0)))
_AVARIANT = variants("attention")
_Q64 = real_array(3, (1, 5, 4))
add(f"{_AT}.reference", lambda: dict(q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4)),
    q=_Q64.more((), (f32(1, 5, 5), f32(2, 5, 4))), k=_Q64, v=_Q64, causal=BOOL)
add(f"{_AT}.reference_online", lambda: dict(q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4)),
    q=_Q64.more((), (f32(1, 6, 4), f32(2, 5, 4))), k=_Q64, v=_Q64, causal=BOOL, tile=COUNT)
_OS = f"{_K}.online_softmax"


def _partial(rows: int = 2) -> Any:
    return resolve(f"{_OS}.partial")(f32(1, rows, 4).astype(np.float64), f32(1, 4, 3))


_PARTIAL = Kind("a Partial", (None, (1.0, 2.0, 3.0), [1]), ())
add(f"{_OS}.partial", lambda: dict(scores=f32(1, 2, 4), v=f32(1, 4, 3)),
    scores=real_array(3, (1, 2, 4)).more((torch.ones(1, 2, 4),), (f32(1, 2, 5),)),
    v=real_array(3, (1, 4, 3)).more((), (f32(2, 4, 3),)))
add(f"{_OS}.merge", lambda: dict(a=_partial(), b=_partial()),
    a=_PARTIAL.more((), (_partial(3),)), b=_PARTIAL.more((), (_partial(3),)))
add(f"{_OS}.finish", lambda: dict(p=_partial()), p=_PARTIAL)
none(f"{_OS}.Partial", RECORD)
add(f"{_AT}.weighted", lambda: dict(p=f32(1, 5, 5), v=f32(1, 5, 4), causal=True),
    p=real_array(3, (1, 5, 5)).more((), (f32(1, 5, 6),)), v=_Q64, causal=BOOL)
add(f"{_AT}.check_host_heads", lambda: dict(q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4),
                                            causal=False),
    q=_Q64.more((), (f32(1, 6, 4),)), k=_Q64, v=_Q64, causal=BOOL)
add(f"{_AT}.traffic", lambda: dict(variant="v2_fused", heads=1, s=5, d=4), variant=_AVARIANT,
    heads=COUNT, s=COUNT, d=integer(1, 128), causal=BOOL)
add(f"{_AT}.traced_traffic",
    lambda: dict(variant="v2_fused", q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4)),
    variant=_AVARIANT, q=_Q, k=float32(3, (1, 5, 4)), v=float32(3, (1, 5, 4)), causal=BOOL)
# a compiled-once factory (functools.cache): an unhashable argument fails in the cache first
add(f"{_AT}.fused_kernel", lambda: dict(d=4, causal=False), d=integer(1, 128).hashable(),
    causal=BOOL.hashable())
for _name in ("attention_v1.v1_three_kernels", "attention.v2_fused"):
    none(f"{_K}.{_name}", "a launcher on device arrays its entry point (forward) checked; "
                           "gpudl.launches.check_launch checks its launch")
none(f"{_K}.attention_v1.plain_launch", "starts the kernel it is given; "
                                      "gpudl.launches.check_launch checks its launch")
for _name in ("forward", "attention"):
    add(f"{_AT}.{_name}", lambda: dict(q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4)),
        q=_Q, k=float32(3, (1, 5, 4)).more((), (f32(1, 6, 4),)), v=float32(3, (1, 5, 4)),
        causal=BOOL, variant=_AVARIANT)
add(f"{_K}.attention_error.error_bound",
    lambda: dict(q=f32(1, 5, 4), k=f32(1, 5, 4), v=f32(1, 5, 4)),
    q=_Q64.more((), (f32(1, 6, 4),)), k=_Q64, v=_Q64, causal=BOOL,
    precision=choice("float32", "float16"))
add(f"{_AT}.precision", lambda: dict(variant="v2_fused"), variant=_AVARIANT)

# ------------------------------------------------------------------------------------------
# gpudl.kernels.softmax, gpudl.kernels.tiles (Triton)
# ------------------------------------------------------------------------------------------

_SM = f"{_K}.softmax"
add(f"{_SM}.reference", lambda: dict(x=f32(3, 5)), x=real_array(2))
add(f"{_SM}.error_bound", lambda: dict(x=f32(3, 5)), x=real_array(2))
add(f"{_SM}.softmax", lambda: dict(x=f32(3, 5)), x=float32(2), variant=variants("softmax"))
_TILES = f"{_K}.tiles"
_TILED = ("a launcher on device arrays its family's entry point checked; "
          "gpudl.kernels.tiles.runtime.launch holds its grid to CUDA's limits")
for _name in ("adam.launch_adam", "attention.launch_forward", "decode.launch_split_kv",
              "elementwise.launch_vector_add", "matmul.launch_matmul",
              "reduction.launch_softmax"):
    none(f"{_TILES}.{_name}", _TILED)
none(f"{_TILES}.runtime.launch", "starts the Triton kernel it is given: its grid is checked "
                                 "(check_ints, gpudl.launches.check_launch) before it starts")
none(f"{_TILES}.runtime.require", NO_ARGUMENT)
add(f"{_TILES}.attention.head_block", lambda: dict(d=5), d=COUNT)
add(f"{_TILES}.reduction.sum_programs", lambda: dict(n=5), n=COUNT)
_B3 = float32(3, (1, 5, 4))
add(f"{_TILES}.attention_backward.flash_backward",
    lambda: {**{x: f32(1, 5, 4) for x in ("q", "k", "v", "o", "do")}, "lse": f32(1, 5)},
    q=_B3, k=_B3.more((), (f32(1, 6, 4),)), v=_B3, o=_B3, do=_B3,
    lse=float32(2, (1, 5)).more((), (f32(1, 6),)), causal=BOOL)

# ------------------------------------------------------------------------------------------
# gpudl.kernels: tensor cores, wide loads, the optimizers
# ------------------------------------------------------------------------------------------

_MMA = f"{_K}.mma"
_TILE_A = real_array(2, (16, 16)).more((), (f32(16, 8),))
_TILE_B = real_array(2, (16, 8)).more((), (f32(8, 16),))
for _name in ("fragments", "reference", "error_bound"):
    add(f"{_MMA}.{_name}", lambda: dict(a=f32(16, 16), b=f32(16, 8), c=f32(16, 8)),
        a=_TILE_A, b=_TILE_B, c=_TILE_B)
_TILE32 = Kind("a float32 NumPy array", (f32(16, 16).tolist(), f32(16, 16).astype(np.float64),
                                         None))
add(f"{_MMA}.mma_tile", lambda: dict(a=f32(16, 16), b=f32(16, 8), c=f32(16, 8)),
    a=_TILE32.more((), (f32(16, 8),)), b=_TILE32.more((), (f32(8, 16),)),
    c=_TILE32.more((), (f32(16, 16),)))
add(f"{_MMA}.bf16_round", lambda: dict(x=f32(3)), x=Kind("a real array", (None, 1.0, [1.0],
                                                                     np.array(["a"]))))
add(f"{_MMA}.bf16_words", lambda: dict(x=f32(2, 3)), x=real_array(2, (2, 3)),
    k_padded=integer(0).allowing_none().more((), (8, 17)))
add(f"{_MMA}.lanes", lambda: dict(matrix="a"), matrix=choice("a", "b", "c"))
none(f"{_MMA}.mma_bf16", "the instruction, called inside kernels (bound per backend)")
none(f"{_MMA}.check_tensor_cores", NO_ARGUMENT)

_TC = f"{_K}.tensor_core_matmul"
_TVARIANT = variants("tensor_core")
add(f"{_TC}.reference", lambda: dict(a=f32(3, 4), b=f32(4, 2)),
    a=real_array(2, (3, 4)).more((), (f32(3, 5),)), b=real_array(2, (4, 2)))
add(f"{_TC}.error_bound", lambda: dict(a=f32(3, 4), b=f32(4, 2)),
    a=real_array(2, (3, 4)).more((), (f32(3, 5),)), b=real_array(2, (4, 2)))
add(f"{_TC}.packed", lambda: dict(x=_device(3, 4)), x=Kind("a device array", (
    f32(3, 4), None)), transpose=BOOL)
add(f"{_TC}.launch_config", lambda: dict(variant="v2_shared_tiles", m=8, n=8),
    variant=_TVARIANT, m=COUNT.more((), (16 * 65_536 * 64,)), n=COUNT)
add(f"{_TC}.matmul", lambda: dict(a=f32(3, 4), b=f32(4, 2)), a=_A2, b=float32(2, (4, 2)),
    variant=_TVARIANT)

none(f"{_K}.wide.address", "arr: any object; None for what is not an array")
none(f"{_K}.wide.check_aligned", "arr: any array (a traced one has no address and passes)")

_O = f"{_K}.optim"
_BETAS = Kind("a pair of betas", (0.9, "0.9,0.99", None, (0.9, "0.99"), (0.9, 0.99, 0.9)),
              ((1.0, 0.99), (0.9, -0.1), (float("nan"), 0.99)))
_ADAM = dict(lr=real(0), betas=_BETAS, eps=real(0), weight_decay=real(0))
add(f"{_O}.hyper.check_adam_hyper",
    lambda: dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0), **_ADAM)
add(f"{_O}.hyper.check_sgd_hyper",
    lambda: dict(lr=1e-3, momentum=0.9, dampening=0.0, weight_decay=0.0, nesterov=False),
    lr=real(0), momentum=real(0), dampening=FINITE, weight_decay=real(0), nesterov=BOOL)
add(f"{_O}.hyper.adam_scalars", lambda: dict(step=1), step=COUNT, decoupled=BOOL,
    maximize=BOOL, **_ADAM)
add(f"{_O}.hyper.sgd_scalars", lambda: dict(first=True, momentum=0.9), first=BOOL,
    lr=real(0), momentum=real(0), dampening=FINITE, weight_decay=real(0), nesterov=BOOL,
    maximize=BOOL)
none(f"{_O}.hyper.AdamScalars", "the scalars adam_scalars computes from checked input")
none(f"{_O}.hyper.SgdScalars", "the scalars sgd_scalars computes from checked input")
_P4 = real_array(1, (4,)).more((), (f32(5),))
for _name in ("reference_adam", "adam_error_bound"):
    add(f"{_O}.reference.{_name}",
        lambda: dict(p=f32(4), g=f32(4), m=f32(4), v=f32(4), step=1),
        p=real_array(1, (4,)), g=_P4, m=_P4, v=_P4, step=COUNT, decoupled=BOOL,
        maximize=BOOL, **_ADAM)
add(f"{_O}.reference.reference_sgd", lambda: dict(p=f32(4), g=f32(4), buf=None, momentum=0.9),
    p=real_array(1, (4,)), g=_P4, buf=_P4.allowing_none(), lr=real(0), momentum=real(0),
    dampening=FINITE, weight_decay=real(0), nesterov=BOOL, maximize=BOOL)
add(f"{_O}.reference.sgd_error_bound",
    lambda: dict(p=f32(4), g=f32(4), buf=None, momentum=0.9),
    p=real_array(1, (4,)), g=_P4, buf=_P4.allowing_none(), lr=real(0), momentum=real(0),
    dampening=FINITE, weight_decay=real(0), nesterov=BOOL)
_F4 = float32(1, (4,)).more((), (f32(5),))
add(f"{_O}.adam.adam_step", lambda: dict(p=f32(4), g=f32(4), m=f32(4), v=f32(4), step=1),
    p=float32(1, (4,)), g=_F4, m=_F4, v=_F4, step=COUNT, decoupled=BOOL, maximize=BOOL,
    variant=variants("adam"), **_ADAM)
add(f"{_O}.sgd.sgd_step", lambda: dict(p=f32(4), g=f32(4), buf=f32(4), first=True,
                                        momentum=0.9),
    p=float32(1, (4,)), g=_F4, buf=_F4.without(None).more((), (None,)), first=BOOL, lr=real(0),
    momentum=real(0), dampening=FINITE, weight_decay=real(0), nesterov=BOOL, maximize=BOOL)
_LOW = Kind("a float16 array", (f32(4), f32(4).tolist(), None), (np.ones((4, 1), np.float16),
                                                                  np.ones(8, np.float16)[::2]))
add(f"{_O}.mixed.adam_step_mixed",
    lambda: dict(p_low=np.ones(4, np.float16), g_low=np.ones(4, np.float16), master=f32(4),
                 m=f32(4), v=f32(4), step=1),
    p_low=_LOW, g_low=_LOW.more((np.ones(4, np.int16),)), master=_F4, m=_F4, v=_F4,
    step=COUNT, decoupled=BOOL, maximize=BOOL, **_ADAM)
for _name in ("adam.v1_unfused", "adam.launch_v2_fused", "adam.launch_v3_shared",
              "adam.launch_v4_multi_tensor", "mixed.launch_mixed", "sgd.launch_sgd"):
    none(f"{_O}.{_name}", "a launcher on kernel arrays and scalars its entry point checked "
                          "(adam_step, adam_step_mixed, sgd_step, gpudl.optim)")
none(f"{_O}.traffic.launch", "the one launch of the optimizer kernels, called by launchers")
none(f"{_O}.traffic.Traffic", RECORD)
add(f"{_O}.traffic.Traffic.total", dict, method("Traffic", lambda: resolve(
    f"{_O}.traffic.Traffic")(), "total"), kind=choice("global", "shared"))
none(f"{_O}.traffic.Traffic.record", "called by launch() while counting")
none(f"{_O}.traffic.traffic", NO_ARGUMENT)
add(f"{_O}.traffic.recorded_launches", dict,
    lambda kw: resolve(f"{_O}.traffic.recorded_launches")(**kw).__enter__(), run=BOOL)

# ------------------------------------------------------------------------------------------
# gpudl.models
# ------------------------------------------------------------------------------------------

_MLP = "gpudl.models.mlp"


@functools.cache
def _trained_mlp():
    model = resolve(f"{_MLP}.KernelMLP")((4, 3, 2))
    model.loss_and_grads(f32(2, 4), np.array([0, 1]))
    return model


def _twin():
    return resolve(f"{_MLP}.TorchTwin")(resolve(f"{_MLP}.KernelMLP")((4, 3, 2)).to_torch())


_KINDS = choice("forward", "loss", "backward", "update")
_OPS = choice("matmul", "bias", "relu", "softmax_xent", "sgd")
_LABELS = Kind("labels", (None, [0, 1], f32(2)), (np.array([0]),))
add(f"{_MLP}.FlopCounter.add", lambda: dict(kind="forward", op="matmul", flops=4),
    method("FlopCounter", lambda: resolve(f"{_MLP}.FlopCounter")(), "add"), kind=_KINDS,
    op=_OPS, flops=SIZE)
add(f"{_MLP}.FlopCounter.total", dict,
    method("FlopCounter", lambda: resolve(f"{_MLP}.FlopCounter")(), "total"),
    kind=_KINDS.allowing_none(), op=_OPS.allowing_none())
none(f"{_MLP}.FlopCounter", NO_ARGUMENT)
none(f"{_MLP}.FlopCounter.by_kind", NO_ARGUMENT)
none(f"{_MLP}.FlopCounter.reset", NO_ARGUMENT)
add(f"{_MLP}.KernelMLP", lambda: dict(sizes=(4, 3, 2)), sizes=widths(2), seed=SIZE)
add(f"{_MLP}.KernelMLP.sgd_step", lambda: dict(lr=0.1), lambda kw: _trained_mlp().sgd_step(
    **kw), lr=POSITIVE)
add(f"{_MLP}.KernelMLP.forward", lambda: dict(x=f32(2, 4)), lambda kw: _trained_mlp().forward(
    **kw), x=Kind("a batch", ([[1.0] * 4], None, f32(2, 4).astype(np.float64)), (f32(2, 5),)))
add(f"{_MLP}.KernelMLP.loss_and_grads", lambda: dict(x=f32(2, 4), labels=np.array([0, 1])),
    lambda kw: resolve(f"{_MLP}.KernelMLP")((4, 3, 2)).loss_and_grads(**kw),
    x=Kind("a batch", ([[1.0] * 4], None, f32(2, 4).astype(np.float64)), (f32(2, 5),)),
    labels=_LABELS.more((), (np.array([0, 2]),)))
add(f"{_MLP}.KernelMLP.to_torch", dict, lambda kw: _trained_mlp().to_torch(**kw),
    dtype=torch_dtype(torch.float32, torch.float64))
add(f"{_MLP}.KernelMLP.from_torch", lambda: dict(module=_trained_mlp().to_torch()),
    module=Kind("a Sequential", (None, torch.nn.Linear(2, 2), "m"),
                (torch.nn.Sequential(torch.nn.ReLU()),)))
none(f"{_MLP}.KernelMLP.host_params", NO_ARGUMENT)
none(f"{_MLP}.KernelMLP.count_flops", NO_ARGUMENT)
add(f"{_MLP}.TorchTwin", lambda: dict(module=_trained_mlp().to_torch()),
    module=Kind("a Sequential", (None, "m", 1)))
add(f"{_MLP}.TorchTwin.sgd_step", lambda: dict(lr=0.1), lambda kw: _twin().sgd_step(**kw),
    lr=POSITIVE)
add(f"{_MLP}.TorchTwin.forward", lambda: dict(x=f32(2, 4)), lambda kw: _twin().forward(**kw),
    x=Kind("a batch", ([[1.0] * 4], None), (f32(4),)))
add(f"{_MLP}.TorchTwin.loss_and_grads", lambda: dict(x=f32(2, 4), labels=np.array([0, 1])),
    lambda kw: _twin().loss_and_grads(**kw), x=Kind("a batch", ([[1.0] * 4], None), (f32(4),)),
    labels=_LABELS)
none(f"{_MLP}.TorchTwin.host_params", NO_ARGUMENT)
add(f"{_MLP}.load_digits_split", dict, seed=SIZE)
add(f"{_MLP}.batches", lambda: dict(n=10, batch_size=3, rng=np.random.default_rng(0)), n=SIZE,
    batch_size=COUNT, rng=Kind("a Generator", (None, 0, np.random.RandomState(0))))
add(f"{_MLP}.accuracy", lambda: dict(model=_trained_mlp(), x=f32(2, 4), y=np.array([0, 1])),
    model=Kind("a model", (None, "m", torch.nn.Linear(2, 2))),
    x=Kind("a batch", ([[1.0] * 4], None), (f32(4),)), y=_LABELS)


def _data():
    return (f32(4, 4), np.array([0, 1, 0, 1]), f32(2, 4), np.array([0, 1]))


add(f"{_MLP}.train", lambda: dict(model=_trained_mlp(), data=_data(), epochs=1, batch_size=2,
                                  lr=0.1),
    model=Kind("a model", (None, "m")), epochs=COUNT, batch_size=COUNT, lr=POSITIVE,
    seed=SIZE, data=Kind("a data split", (None, f32(4, 4), (f32(4, 4),) * 3,
                                          (f32(4, 4), f32(4), f32(2, 4), np.array([0, 1])))))

_ENC = "gpudl.models.encoder"
_CONFIG = instance(object)
add(f"{_ENC}.EncoderConfig", dict, layers=COUNT, hidden=COUNT.more((), (30,)), heads=COUNT,
    ffn=COUNT, seq=COUNT)
for _name in ("SelfAttention", "FeedForward", "EncoderBlock"):
    add(f"{_ENC}.{_name}", lambda: dict(config=resolve(f"{_ENC}.EncoderConfig")()),
        config=_CONFIG)
    none(f"{_ENC}.{_name}.forward", "a torch module's forward: torch checks its input")
_ENC_DTYPE = torch_dtype(torch.float32, torch.float64, torch.bfloat16, torch.float16)
add(f"{_ENC}.make_encoder", lambda: dict(config=resolve(f"{_ENC}.EncoderConfig")(layers=1)),
    config=_CONFIG, seed=SIZE, dtype=_ENC_DTYPE)
add(f"{_ENC}.encoder_batch", lambda: dict(config=resolve(f"{_ENC}.EncoderConfig")(), batch=2),
    config=_CONFIG, batch=COUNT, seed=SIZE, dtype=_ENC_DTYPE)
add(f"{_ENC}.attend", lambda: dict(q=torch.ones(1, 2, 8), k=torch.ones(1, 2, 8),
                                    v=torch.ones(1, 2, 8), head_dim=4),
    q=tensor(shape=(1, 2, 8), contiguous=False).more((), (torch.ones(1, 2, 4),)),
    k=tensor(shape=(1, 2, 8), contiguous=False), v=tensor(shape=(1, 2, 8), contiguous=False),
    head_dim=COUNT.more((), (3,)))

# ------------------------------------------------------------------------------------------
# gpudl.optim
# ------------------------------------------------------------------------------------------

_OPT = "gpudl.optim"


def _param(*shape: int) -> torch.nn.Parameter:
    p = torch.nn.Parameter(torch.ones(*shape))
    p.grad = torch.ones(*shape)
    return p


_TORCH_LR = real(0).more((), (torch.tensor([0.1, 0.2]),))
_SWITCH = Kind("a torch switch", (), (True,))
add(f"{_OPT}.sgd.SGD", lambda: dict(params=[_param(3)], lr=0.1, momentum=0.9),
    params=Kind("parameters", (None, 1, [torch.ones(2, dtype=torch.int64)]), ()),
    lr=_TORCH_LR, momentum=real(0), dampening=FINITE, weight_decay=real(0), nesterov=BOOL,
    maximize=BOOL, foreach=_SWITCH, fused=_SWITCH, differentiable=_SWITCH)
_ADAM_OPTIONS = dict(lr=_TORCH_LR, betas=_BETAS, eps=real(0), weight_decay=real(0),
                     maximize=BOOL,
                     variant=variants("adam"),
                     foreach=_SWITCH, fused=_SWITCH, capturable=_SWITCH,
                     differentiable=_SWITCH, amsgrad=Kind("amsgrad", (), (True,)))
add(f"{_OPT}.adam.Adam", lambda: dict(params=[_param(3)]), decoupled_weight_decay=BOOL,
    **_ADAM_OPTIONS)
add(f"{_OPT}.adam.AdamW", lambda: dict(params=[_param(3)]), **_ADAM_OPTIONS)


def _state(**state: Any) -> dict:
    return {"state": {0: state}, "param_groups": [{"params": [0], "lr": 0.1}]}


_ADAM_STATE = Kind("an Adam state_dict", (None, [1], _state(exp_avg=[1.0] * 3)), (
    _state(step=torch.tensor(1.0), exp_avg=torch.ones(1), exp_avg_sq=torch.ones(3)),
    _state(step=torch.tensor(1.0), exp_avg=torch.ones(3), exp_avg_sq=torch.ones(4)),
    _state(step=torch.tensor(-1.0), exp_avg=torch.ones(3), exp_avg_sq=torch.ones(3)),
    _state(step=torch.tensor(float("nan")), exp_avg=torch.ones(3), exp_avg_sq=torch.ones(3)),
    {"state": {}, "param_groups": [{"params": [0, 1], "lr": 0.1}]}))


def _adam(variant: str = "v2_fused") -> Any:
    return resolve(f"{_OPT}.adam.Adam")([_param(3)], variant=variant)


add(f"{_OPT}.adam.Adam.load_state_dict", lambda: dict(state_dict=_adam().state_dict()),
    method("Adam", _adam, "load_state_dict"), state_dict=_ADAM_STATE.more(
        (_state(step=1, exp_avg=torch.ones(3, dtype=torch.int64), exp_avg_sq=torch.ones(3)),)))
add(f"{_OPT}.adam.Adam.add_param_group", lambda: dict(param_group={"params": [_param(2)]}),
    method("Adam", _adam, "add_param_group"),
    param_group=Kind("a parameter group", ({"params": [torch.ones(2, dtype=torch.int64)]},),
                     ({"params": [_param(2)], "variant": "bogus"},
                      {"params": [_param(2)], "lr": -1.0})))
add(f"{_OPT}.adam.Adam.step", dict, method("Adam", _adam, "step"),
    closure=Kind("a closure", (1, "f")))
add(f"{_OPT}.adam.Adam.zero_grad", dict, method("Adam", _adam, "zero_grad"),
    set_to_none=BOOL)


def _sgd() -> Any:
    return resolve(f"{_OPT}.sgd.SGD")([_param(3)], lr=0.1, momentum=0.9)


add(f"{_OPT}.sgd.SGD.load_state_dict", lambda: dict(state_dict=_sgd().state_dict()),
    method("SGD", _sgd, "load_state_dict"), state_dict=Kind(
        "an SGD state_dict", (None, _state(momentum_buffer=torch.ones(3, dtype=torch.int32))),
        (_state(momentum_buffer=torch.ones(2)), _state(momentum_buffer=torch.ones(3, 1)))))
add(f"{_OPT}.sgd.SGD.add_param_group", lambda: dict(param_group={"params": [_param(2)]}),
    method("SGD", _sgd, "add_param_group"),
    param_group=Kind("a parameter group", ({"params": [torch.ones(2, dtype=torch.int64)]},),
                     ({"params": [_param(2)], "lr": -1.0},)))
add(f"{_OPT}.sgd.SGD.step", dict, method("SGD", _sgd, "step"),
    closure=Kind("a closure", (1, "f")))
_FLAT = f"{_OPT}.flat_buffers"


def _flat(n: int = 2) -> Any:
    return resolve(f"{_FLAT}.flatten")([_param(3) for _ in range(n)],
                                       resolve("gpudl.interop.KernelArrays")())


none(f"{_FLAT}.FlatGroup", "the flat buffers flatten makes (variant v4_multi_tensor)")
none(f"{_FLAT}.FlatGroup.in_place", NO_ARGUMENT)
add(f"{_FLAT}.FlatGroup.arrays_for", lambda: dict(first=0, end=2),
    method("FlatGroup", _flat, "arrays_for"), first=integer(0, 1), end=integer(1, 2))
add(f"{_FLAT}.adopt", lambda: dict(tensor=torch.ones(3), slot=torch.zeros(3)),
    tensor=tensor(shape=(3,), contiguous=False).more((), (torch.ones(4),)),
    slot=tensor(shape=(3,), contiguous=False))
add(f"{_FLAT}.flatten",
    lambda: dict(params=[_param(3)], kernel_arrays=resolve("gpudl.interop.KernelArrays")()),
    params=Kind("parameters of one dtype", (None, 1, [1]),
                ([], [_param(3), torch.nn.Parameter(torch.ones(3, dtype=torch.float16))])),
    kernel_arrays=Kind("KernelArrays", (None, {}), ()))
_HOOKS = f"{_OPT}.gradient_hooks.WrittenGradients"


def _written() -> Any:
    return resolve(_HOOKS)()


none(_HOOKS, NO_ARGUMENT)
add(f"{_HOOKS}.watch", lambda: dict(params=[_param(3)]), method("WrittenGradients", _written,
                                                                "watch"),
    params=Kind("parameters", (None, 1, [1]), ()))
add(f"{_HOOKS}.mark", lambda: dict(param=_param(3)), method("WrittenGradients", _written, "mark"),
    param=Kind("a parameter", (None, 1), ()))
add(f"{_HOOKS}.all_of", lambda: dict(ids=frozenset()),
    method("WrittenGradients", _written, "all_of"),
    ids=Kind("a frozenset of ids", (None, {1}, [1]), ()))
none(f"{_HOOKS}.clear", NO_ARGUMENT)
_STEPS = f"{_OPT}.adam_steps"
_PATH = "plumbing: a step path of Adam.step, on the groups and state it checked (tested " \
        "through Adam.step and tests/test_optim_parts.py)"
for _name in ("adam_state", "launch_flat", "step_flat", "step_flat_general", "step_per_tensor"):
    none(f"{_STEPS}.{_name}", _PATH)
add(f"{_STEPS}.group_scalars", lambda: dict(group=_adam().param_groups[0], step=1),
    step=COUNT.hashable())
add(f"{_STEPS}.adopt_parameter",
    lambda: dict(flat=_flat(1), i=0, states=collections.defaultdict(dict), written=_written(),
                 name="Adam"),
    i=integer(0, 0))
add(f"{_STEPS}.step_runs", lambda: dict(updated=[0, 1], steps=[1.0, 1.0]),
    updated=Kind("increasing indices", (None, "ab", [1.5]), ([1, 0], [0, 2], [-1])),
    steps=Kind("step counts", (None, "ab"), ([-1.0, 1.0], [float("nan"), 1.0])))
add(f"{_OPT}.variant_costs.traffic_table", lambda: dict(sizes=(3,), variants=("v2_fused",)),
    sizes=ints(1), variants=Kind("variant names", ("v2_fused", None, [1]), (["bogus"],)))
_T = f"{_OPT}.tensors"
add(f"{_T}.hyperparameter", lambda: dict(name="lr", value=0.1),
    value=Kind("a number or a one-element tensor", (),
               (torch.tensor([0.1, 0.2]), torch.tensor(1))))
add(f"{_T}.adam_betas", lambda: dict(betas=(0.9, 0.99)),
    betas=Kind("betas", (), ((torch.tensor([0.9, 0.1]), 0.99),)))
none(f"{_T}.refuse_torch_options", "options: torch's switches, refused when on (tested with "
                                   "the optimizers' foreach, fused, capturable, differentiable)")
add(f"{_T}.run_closure", lambda: dict(closure=None), closure=Kind("a closure", (1, "f")))
none(f"{_T}.check_params", "an input check of the optimizers (tested through "
                           "add_param_group)")
none(f"{_T}.check_group", "an input check of the optimizers (tested through "
                          "add_param_group)")
none(f"{_T}.check_params_argument", "an input check of the optimizers (tested through "
                                    "their params)")
none(f"{_T}.check_loaded_state", "an input check of the optimizers (tested through "
                                 "load_state_dict)")
add(f"{_T}.checked_gradient", lambda: dict(p=_param(3), name="SGD"),
    p=Kind("a parameter with a gradient", (None,), ()))
none(f"{_T}.kernel_array", "plumbing: a checked tensor as a kernel array "
                           "(gpudl.interop.KernelArrays checks it)")
add(f"{_T}.array_cache", lambda: dict(params=[torch.ones(2)]),
    params=Kind("tensors", (None, 1), ()))
add(f"{_T}.cached_adam_scalars",
    lambda: dict(step=1, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled=False, maximize=False),
    step=COUNT.hashable(), lr=real(0).hashable(), eps=real(0).hashable())
none(f"{_T}.staged", "tensors: the checked tensors of an optimizer step")

# ------------------------------------------------------------------------------------------
# gpudl.parallel: the launcher, the shared floor and data parallelism
# ------------------------------------------------------------------------------------------

_PAR = "gpudl.parallel"
_WORKER = Kind("a worker", (None, 1, "hello"), (lambda rank, world_size: None,))
COLLECTIVE = ("a collective called on every rank of a process group (inside a worker): "
              "torch.distributed checks its tensors; tested in the distributed tests")
IN_GROUP = "needs a process group (called inside a worker); tested in the distributed tests"


def _spawn(kw: dict) -> Any:
    return resolve(f"{_PAR}.spawn.spawn")(kw["worker"], kw["world_size"], timeout=kw["timeout"],
                                            backend=kw["backend"], num_threads=kw["num_threads"])


add(f"{_PAR}.spawn.spawn",
    lambda: dict(worker=hello, world_size=1, timeout=30.0,
                 backend=None, num_threads=1), _spawn,
    worker=_WORKER, world_size=COUNT, timeout=TIMEOUT, num_threads=COUNT,
    backend=choice("gloo", "nccl").allowing_none().more((), ("nccl",)))
add(f"{_PAR}.spawn.default_backend", lambda: dict(world_size=2), world_size=COUNT)
add(f"{_PAR}.spawn.run_under_torchrun", lambda: dict(worker=None),
    lambda kw: resolve(f"{_PAR}.spawn.run_under_torchrun")(kw["worker"]),
    worker=Kind("a worker", (1, "hello")))
add(f"{_PAR}.spawn.Clock", lambda: dict(device=torch.device("cpu")),
    device=Kind("a torch.device", (None, "cpu", 0)))
none(f"{_PAR}.spawn.Clock.mark", NO_ARGUMENT)
none(f"{_PAR}.spawn.Clock.seconds", "start, mark: marks this clock made (mark())")
none(f"{_PAR}.spawn.WorkerError", EXCEPTION)
none(f"{_PAR}.spawn.rank0_print", "prints whatever it is given, as print does")
none(f"{_PAR}.spawn.device_and_sync", NO_ARGUMENT)

add(f"{_PAR}.degrees.ParallelDegrees", dict, data=COUNT, tensor=COUNT, pipeline=COUNT,
    sharding=COUNT.more((), (3,)), context=COUNT, expert=COUNT.more((), (3,)))


def _degrees():
    return resolve(f"{_PAR}.degrees.ParallelDegrees")(data=2)


add(f"{_PAR}.degrees.ParallelDegrees.check_world_size", lambda: dict(world_size=2),
    method("ParallelDegrees", _degrees, "check_world_size"), world_size=COUNT.more((), (3,)),
    aliases={"world_size": ("world size",)})
none(f"{_PAR}.degrees.ParallelDegrees.device_mesh", IN_GROUP)
add(f"{_PAR}.degrees.ParallelDegrees.check_divides",
    lambda: dict(degree="data", what="the batch size", size=8),
    method("ParallelDegrees", _degrees, "check_divides"),
    degree=choice("data", "tensor", "pipeline", "sharding", "context", "expert"),
    size=COUNT.more((), (-4, 7)))
add(f"{_PAR}.encoder_plan.check_dtensor_plan",
    lambda: dict(module=resolve("gpudl.models.encoder.EncoderBlock")(
        resolve("gpudl.models.encoder.EncoderConfig")()), plan={}),
    module=Kind("a module", (None, "m")), plan=Kind("a plan", (None, ["attn.q"]),
                                                     ({"attn.nope": None},)))
add(f"{_PAR}.messages.rank_input", lambda: dict(rank=1, numel=4), rank=SIZE, numel=SIZE)
add(f"{_PAR}.messages.expected_sum", lambda: dict(world_size=2, numel=4), world_size=COUNT,
    numel=SIZE)
add(f"{_PAR}.messages.check_allreduce", lambda: dict(
    result=resolve(f"{_PAR}.messages.expected_sum")(2, 4), world_size=2),
    result=Kind("a tensor", (None, [1.0])), world_size=COUNT)
add(f"{_PAR}.messages.expected_all_to_all", lambda: dict(rank=1, world_size=2, numel=4),
    rank=integer(0, 1), world_size=COUNT.more((), (3,)), numel=SIZE.more((), (7,)))
add(f"{_PAR}.messages.check_all_to_all", lambda: dict(
    result=resolve(f"{_PAR}.messages.expected_all_to_all")(1, 2, 4), rank=1, world_size=2),
    result=Kind("a tensor", (None, [1.0])), rank=integer(0, 1), world_size=COUNT.more((), (3,)))
add(f"{_PAR}.messages.check_p2p", lambda: dict(
    received=resolve(f"{_PAR}.messages.rank_input")(1, 4), sender=1),
    received=Kind("a tensor", (None, [1.0])), sender=SIZE)

_REF = f"{_PAR}.one_process"
_DIMS = widths(2)
add(f"{_REF}.make_mlp", lambda: dict(dims=(4, 3, 2)), dims=_DIMS, seed=SIZE)
add(f"{_REF}.make_batch", lambda: dict(world_size=2, dims=(4, 2)), world_size=COUNT,
    dims=_DIMS, batch_per_rank=COUNT, seed=SIZE)
add(f"{_REF}.adam_step_loss", lambda: dict(world_size=1, dims=(4, 2)), world_size=COUNT,
    dims=_DIMS, lr=POSITIVE)
add(f"{_REF}.adam_run", lambda: dict(world_size=1, steps=1, lr=0.01, dims=(4, 2)),
    world_size=COUNT, steps=COUNT, lr=POSITIVE, dims=_DIMS)
add(f"{_REF}.mlp_gradients", lambda: dict(world_size=2, dims=(4, 2), batch_per_rank=2),
    world_size=COUNT, dims=_DIMS, batch_per_rank=COUNT,
    ranks=ints(0).allowing_none().more((), ([2],)))

none(f"{_REF}.sgd_on_slice", "a rank's loop: model, x, y and steps are checked by "
                             "sgd_steps; data_group and data_ways come from its mesh")
none(f"{_REF}.gradient_difference", "compares two runs' results, dicts as sgd_steps returns "
                                    "them (tests/test_tensor_parallel.py)")
none(f"{_REF}.compare_under_torchrun", "a strategy's command line: argv as a CLI's, the "
                                       "worker and its arguments the strategy's own")


def _mlp():
    return resolve(f"{_REF}.make_mlp")((4, 2))


add(f"{_REF}.sgd_steps",
    lambda: dict(model=_mlp(), x=torch.ones(2, 4), y=torch.ones(2, 2), steps=1, lr=0.1),
    model=Kind("a module", (None, "m")), x=Kind("a tensor", (None, [1.0])),
    y=Kind("a tensor", (None, [1.0])), steps=COUNT, lr=POSITIVE,
    loss_of=Kind("a function", (None, 1)), gradient_of=Kind("a function", (None, 1)))
add(f"{_REF}.encoder_sgd_run",
    lambda: dict(config=resolve("gpudl.models.encoder.EncoderConfig")(layers=1), batch=1,
                 steps=1, lr=0.1),
    config=instance(object), batch=COUNT, steps=COUNT, lr=POSITIVE,
    dtype=torch_dtype(torch.float32, torch.float64))
add(f"{_REF}.whole", lambda: dict(t=torch.ones(2)), t=Kind("a tensor", (None, [1.0])))
add(f"{_REF}.flat_parameters", lambda: dict(model=_mlp()), model=Kind("a module", (None, 1)))
add(f"{_REF}.local_bytes", lambda: dict(tensors=[torch.ones(2)]),
    tensors=Kind("tensors", (None, torch.ones(2), [1.0])))
add(f"{_REF}.optimizer_state_bytes",
    lambda: dict(optimizer=torch.optim.SGD(_mlp().parameters(), lr=0.1)),
    optimizer=Kind("an optimizer", (None, "sgd")))
none(f"{_REF}.average_gradients", COLLECTIVE)


def _qkv(**more: Any) -> dict:
    return {name: torch.ones(2, 5, 3, dtype=torch.float64) for name in ("q", "k", "v")} | more


#: A (heads, seq, d) tensor of attention: float32 or float64, of the others' shape.
_HEADS = tensor(torch.float64, (2, 5, 3), contiguous=False, wrong_dtype=torch.int64).more(
    (torch.ones(2, 5, 3, dtype=torch.float16),),
    (torch.ones(2, 5, dtype=torch.float64), torch.ones(2, 4, 3, dtype=torch.float64)))
add(f"{_REF}.attention_gradients", _qkv, q=_HEADS, k=_HEADS, v=_HEADS, causal=BOOL,
    grad_out=_HEADS.allowing_none())

_DATA = f"{_PAR}.data"
#: A data-parallel world size that does not divide the batch: the error names the degree.
_DP = {"aliases": {"world_size": ("data-parallel degree",)}}
_SETUP = instance(object)
none(f"{_DATA}.buckets.rank_device", NO_ARGUMENT)
add(f"{_DATA}.buckets.kernel_stream", lambda: dict(device=torch.device("cpu")),
    lambda kw: resolve(f"{_DATA}.buckets.kernel_stream")(**kw).__enter__(),
    device=Kind("a torch.device", (None, "cpu")))


def _grad_params():
    return list(_mlp().parameters())


add(f"{_DATA}.buckets.GradientBuckets",
    lambda: dict(params=_grad_params(), bucket_cap_mb=None, world_size=2),
    params=Kind("parameters", (None, torch.ones(2), [torch.ones(2, dtype=torch.int64)]),
                ([],)),
    bucket_cap_mb=POSITIVE.allowing_none(), world_size=COUNT,
    variant=variants("buckets", "views"))
for _name in ("zero_grad", "arm", "wait"):
    none(f"{_DATA}.buckets.GradientBuckets.{_name}", NO_ARGUMENT)
add(f"{_DATA}.comms.ring_chunks", lambda: dict(numel=10, world_size=3), numel=SIZE,
    world_size=COUNT)
add(f"{_DATA}.comms.ring_all_reduce", lambda: dict(tensor=torch.ones(4)),
    tensor=tensor(wrong_dtype=torch.bool))
add(f"{_DATA}.comms.ring_all_reduce_worker", lambda: dict(rank=0, world_size=1, numels=[3]),
    numels=ints(1))
add(f"{_DATA}.comms.ring_all_reduce_check", lambda: dict(world_size=2, numels=[3]),
    world_size=COUNT, numels=ints(1).allowing_none(), timeout=TIMEOUT)
add(f"{_DATA}.comms.check_replicas", lambda: dict(module=_mlp()),
    module=Kind("a module", (None, "m")))
add(f"{_DATA}.comms.broadcast_parameters", lambda: dict(module=_mlp()),
    module=Kind("a module", (None, "m")))


def _setup(**kw: Any) -> Any:
    return resolve(f"{_DATA}.sampling.Setup")(**kw)


add(f"{_DATA}.sampling.Setup", dict, n_samples=COUNT, global_batch=COUNT, epochs=COUNT,
    dims=_DIMS, lr=POSITIVE, momentum=NONNEGATIVE, seed=SIZE, shuffle=BOOL, drop_last=BOOL,
    accumulation=COUNT, bucket_cap_mb=POSITIVE.allowing_none(),
    variant=variants("buckets", "views"),
    start=choice("broadcast", "verify"), rank_seed_step=SIZE)
add(f"{_DATA}.sampling.check_plan", lambda: dict(setup=_setup(), world_size=2),
    setup=_SETUP, **_DP, world_size=COUNT.more((), (3, 97)))
add(f"{_DATA}.sampling.make_dataset", lambda: dict(setup=_setup()), setup=_SETUP)
add(f"{_DATA}.sampling.rank_indices",
    lambda: dict(setup=_setup(), world_size=2, rank=1, epoch=0), setup=_SETUP, **_DP,
    world_size=COUNT.more((), (3,)), rank=integer(0, 1), epoch=SIZE)
add(f"{_DATA}.sampling.global_order", lambda: dict(setup=_setup(), world_size=2, epoch=0),
    setup=_SETUP, **_DP, world_size=COUNT.more((), (3,)), epoch=SIZE)
add(f"{_DATA}.sampling.sampler_plan", lambda: dict(n_samples=10, world_size=2),
    n_samples=COUNT, world_size=COUNT.more((), (11,)), drop_last=BOOL, shuffle=BOOL,
    seed=SIZE, epoch=SIZE)
add(f"{_DATA}.timeline.expected_buckets", lambda: dict(sizes_bytes=[4, 8], bucket_cap_mb=1.0),
    sizes_bytes=ints(0), bucket_cap_mb=POSITIVE.allowing_none())
add(f"{_DATA}.timeline.gradient_timeline", lambda: dict(world_size=2, dims=(4, 2),
                                                        batch_per_rank=2),
    world_size=COUNT, bucket_cap_mb=POSITIVE.allowing_none(), dims=_DIMS,
    batch_per_rank=COUNT, timeout=TIMEOUT)
add(f"{_DATA}.timeline.timeline_worker",
    lambda: dict(rank=0, world_size=1, bucket_cap_mb=None, dims=(4, 2), batch_per_rank=2),
    bucket_cap_mb=POSITIVE.allowing_none(), dims=_DIMS, batch_per_rank=COUNT)
_STRATEGY = choice("single", "manual", "bucketed", "ddp")
add(f"{_DATA}.training.check_strategy", lambda: dict(strategy="ddp"), strategy=_STRATEGY)
add(f"{_DATA}.training.Replica",
    lambda: dict(strategy="single", setup=_setup(), rank=0, world_size=1,
                 device=torch.device("cpu")),
    strategy=_STRATEGY, setup=_SETUP, rank=integer(0, 0), world_size=COUNT,
    device=Kind("a torch.device", (None, "cpu")))
none(f"{_DATA}.training.Replica.step", "x, y: this rank's share of a global batch, from "
                                       "train_worker (torch checks their shapes)")
none(f"{_DATA}.training.Replica.flat_parameters", NO_ARGUMENT)
add(f"{_DATA}.training.train_worker",
    lambda: dict(rank=0, world_size=1, strategy="single", setup=_setup(epochs=1)),
    rank=integer(0, 0), world_size=COUNT.more((), (2,)), strategy=_STRATEGY, setup=_SETUP)
add(f"{_DATA}.training.run_worker", lambda: dict(rank=0, world_size=1, jobs=[]),
    rank=integer(0, 0), jobs=Kind("jobs", (None, "ddp", [("ddp",)]), ()))
add(f"{_DATA}.training.run_many", lambda: dict(jobs=[("ddp", _setup())], world_size=2),
    jobs=Kind("jobs", (None, "ddp", [("ddp",)]), ([],)), **_DP,
    world_size=COUNT.more((), (3,)), timeout=TIMEOUT)
add(f"{_DATA}.training.run", lambda: dict(strategy="ddp", world_size=2), **_DP,
    strategy=_STRATEGY, world_size=COUNT.more((), (3,)), setup=_SETUP, timeout=TIMEOUT)


def _record(losses=(1.0, 1.0), params=None):
    params = params or [np.ones(3, np.float32)] * len(losses)
    return {"rank": 0, "losses": list(losses), "params": params}


add(f"{_DATA}.training.compare", lambda: dict(records=[_record()], reference=_record()),
    records=Kind("records", (None, _record(), "r"), ([], [_record((1.0,))])),
    reference=Kind("a record", (None, [_record()])))
none(f"{_DATA}.training.main", CLI)

# ------------------------------------------------------------------------------------------
# gpudl.parallel: pipeline, tensor, ZeRO and the 2-D mesh
# ------------------------------------------------------------------------------------------

_PIPE = f"{_PAR}.pipeline"
_SCHEDULE = choice("naive", "gpipe", "1f1b")
_CONFIG12 = instance(object)
add(f"{_PIPE}.schedule.stage_layers", lambda: dict(layers=12, stages=4, stage=1),
    layers=COUNT.more((), (10,)), stages=COUNT.more((), (5,)), stage=integer(0, 3))
add(f"{_PIPE}.schedule.schedule", lambda: dict(name="1f1b", stage=1, stages=2,
                                               microbatches=4),
    name=_SCHEDULE, stage=integer(0, 1), stages=COUNT, microbatches=COUNT)
add(f"{_PIPE}.schedule.simulate", lambda: dict(name="gpipe", stages=2, microbatches=2),
    name=_SCHEDULE, stages=COUNT, microbatches=COUNT, forward=POSITIVE, backward=POSITIVE)
add(f"{_PIPE}.schedule.check_schedule", lambda: dict(name="gpipe", microbatches=2),
    name=_SCHEDULE, microbatches=COUNT)
_EVENT = {"kind": "F", "microbatch": 0, "start_s": 0.0, "end_s": 1.0}
add(f"{_PIPE}.schedule.idle_fraction", lambda: dict(timelines=[[_EVENT]]),
    timelines=Kind("timelines", (None, "t"), ([[]], [[_EVENT | {"end_s": float("nan")}]],
                                             [[_EVENT | {"start_s": -1.0}]],
                                             [[_EVENT | {"end_s": -0.5}]])))
add(f"{_PIPE}.training.PipelinePlan", dict, schedule=_SCHEDULE.more((), ("naive",)),
    microbatches=COUNT.more((), (3,)), engine=choice("hand", "torch"), steps=COUNT,
    batch=COUNT.more((), (6,)), lr=POSITIVE, config=_CONFIG12,
    dtype=torch_dtype(torch.float32, torch.float64), pace_s=POSITIVE.allowing_none())


def _plan():
    return resolve(f"{_PIPE}.training.PipelinePlan")()


add(f"{_PIPE}.training.PipelinePlan.check_world_size", lambda: dict(world_size=4),
    method("PipelinePlan", _plan, "check_world_size"), world_size=COUNT.more((), (5,)),
    aliases={"world_size": ("stages", "pipeline-parallel degree")})
add(f"{_PIPE}.training.run_pipelines", lambda: dict(plans=[_plan()], world_size=4),
    plans=Kind("plans", (None, "p", [1]), ([],)), world_size=COUNT.more((), (5,)),
    timeout=TIMEOUT, aliases={"world_size": ("stages", "pipeline-parallel degree")})
add(f"{_PIPE}.training.pipeline_worker", lambda: dict(rank=0, world_size=1, plans=[]),
    rank=integer(0, 0), plans=Kind("plans", (None, [1]), ()))
none(f"{_PIPE}.training.main", CLI)
none(f"{_PIPE}.comms.exchange", COLLECTIVE)

_TP = f"{_PAR}.tensor"
add(f"{_TP}.training.TensorParallelRun", dict, engine=choice("hand", "dtensor"),
    fused=BOOL.allowing_none(), dtype=torch_dtype(torch.float32, torch.float64),
    config=_CONFIG12, batch=COUNT, steps=COUNT, lr=POSITIVE)


def _tp_run():
    return resolve(f"{_TP}.training.TensorParallelRun")()


add(f"{_TP}.training.TensorParallelRun.check_world_size", lambda: dict(world_size=2),
    method("TensorParallelRun", _tp_run, "check_world_size"), world_size=COUNT.more((), (3,)),
    aliases={"world_size": ("tensor-parallel degree",)})
add(f"{_TP}.training.run_tensor_parallel", lambda: dict(runs=[_tp_run()], world_size=2),
    runs=Kind("runs", (None, "r", [1]), ([],)), world_size=COUNT.more((), (3,)),
    timeout=TIMEOUT, aliases={"world_size": ("tensor-parallel degree",)})
add(f"{_TP}.training.tensor_parallel_worker", lambda: dict(rank=0, world_size=1, runs=[]),
    rank=integer(0, 0), runs=Kind("runs", (None, [1]), ()))
none(f"{_TP}.training.main", CLI)
for _name in ("copy_to_parallel", "reduce_from_parallel", "gather"):
    none(f"{_TP}.comms.{_name}", COLLECTIVE)
none(f"{_TP}.comms.count_all_reduces", NO_ARGUMENT)
for _name in ("ColumnParallelLinear", "RowParallelLinear", "ParallelFeedForward",
              "ParallelSelfAttention"):
    none(f"{_TP}.layers.{_name}", IN_GROUP)
    none(f"{_TP}.layers.{_name}.forward", "a torch module's forward: torch checks its input")
none(f"{_TP}.layers.parallelize_block", IN_GROUP)
none(f"{_TP}.layers.full_gradients", COLLECTIVE)

_Z = f"{_PAR}.zero"
add(f"{_Z}.optimizer.padded_numel", lambda: dict(numel=10, world_size=3), numel=COUNT,
    world_size=COUNT)
add(f"{_Z}.optimizer.shard_range", lambda: dict(numel=10, world_size=3, rank=1), numel=COUNT,
    world_size=COUNT.more((), (11,)), rank=integer(0, 2),
    aliases={"world_size": ("ranks",)})
for _name in ("ZeroAdam", "NaiveZeroAdam"):
    none(f"{_Z}.optimizer.{_name}", IN_GROUP + "; its arguments are torch.optim.Adam's, "
                                    "checked by it")
for _name in ("zero_grad", "step", "state_bytes"):
    none(f"{_Z}.optimizer.ZeroAdam.{_name}", IN_GROUP)
for _name in ("all_gather_shards", "all_reduce_mean_then_slice", "reduce_scatter_mean",
              "all_gather_flat", "reduce_scatter_flat"):
    none(f"{_Z}.comms.{_name}", COLLECTIVE)
_ZDIMS = widths(2).more((), ((1, 1),))
add(f"{_Z}.training.zero_training", lambda: dict(world_size=4, steps=1, dims=(30, 11)),
    world_size=COUNT.more((), (7000,)), steps=COUNT, lr=POSITIVE, dims=_ZDIMS,
    timeout=TIMEOUT, aliases={"world_size": ("ranks",)})
add(f"{_Z}.training.train_worker", lambda: dict(rank=0, world_size=4, steps=1, dims=(30, 11)),
    steps=COUNT, lr=POSITIVE, dims=_ZDIMS)


def _zero_run(steps: int = 1) -> dict:
    return {"params": [torch.ones(3)] * steps}


add(f"{_Z}.training.max_difference", lambda: dict(run=_zero_run(), reference=_zero_run()),
    run=Kind("a run", (None, [1]), (_zero_run(2),)), reference=Kind("a run", (None, [1])))
add(f"{_Z}.training.matches_reference",
    lambda: dict(run=_zero_run(), reference=_zero_run()),
    run=Kind("a run", (None, [1]), (_zero_run(2),)), reference=Kind("a run", (None, [1])))
none(f"{_Z}.training.format_table", "result, reference: records of train_worker and adam_run")
none(f"{_Z}.training.main", CLI)
add(f"{_Z}.fsdp.shard_numel", lambda: dict(shape=(4, 3), world_size=2, rank=1),
    shape=ints(0), world_size=COUNT, rank=integer(0, 1))
add(f"{_Z}.fsdp.state_bytes", lambda: dict(world_size=2, strategy="fsdp2", dims=(4, 2)),
    world_size=COUNT, strategy=choice("replicated", "fsdp2"), dims=_DIMS, timeout=TIMEOUT)
add(f"{_Z}.fsdp.state_bytes_worker",
    lambda: dict(rank=0, world_size=1, strategy="fsdp2", dims=(4, 2)),
    rank=integer(0, 0), strategy=choice("replicated", "fsdp2"), dims=_DIMS)
none(f"{_Z}.fsdp.format_table", "rows: records of state_bytes")

_MESH = f"{_PAR}.mesh"
_RUN = dict(batch=COUNT, steps=COUNT, lr=POSITIVE, config=_CONFIG12,
            dtype=torch_dtype(torch.float32, torch.float64))
add(f"{_REF}.check_encoder_run", lambda: dict(config=resolve(
    "gpudl.models.encoder.EncoderConfig")(layers=1), batch=2, steps=1, lr=0.1,
    dtype=torch.float32), **_RUN)
add(f"{_Z}.fsdp.run_fsdp", lambda: dict(world_size=2), world_size=COUNT, timeout=TIMEOUT,
    **_RUN)
add(f"{_MESH}.run_mesh_2d", dict, timeout=TIMEOUT,
    degrees=Kind("degrees", (None, (2, 2)), (resolve(f"{_PAR}.degrees.ParallelDegrees")(
        data=2, pipeline=2),)), **_RUN)
add(f"{_Z}.fsdp.fsdp_worker", lambda: dict(rank=0, world_size=1, config=resolve(
    "gpudl.models.encoder.EncoderConfig")(layers=1), batch=2, steps=1, lr=0.1,
    dtype=torch.float32), **_RUN)
add(f"{_MESH}.mesh_2d_worker", lambda: dict(rank=0, world_size=1, degrees=resolve(
    f"{_PAR}.degrees.ParallelDegrees")(), config=resolve("gpudl.models.encoder.EncoderConfig")(
    layers=1), batch=2, steps=1, lr=0.1, dtype=torch.float32), **_RUN)
none(f"{_MESH}.main", CLI)
none(f"{_Z}.fsdp.main", CLI)

_CP = f"{_PAR}.context"
_STRATEGIES = choice("ring", "ulysses")
_LAYOUTS = choice("contiguous", "balanced")
_CP_WORLD = {"aliases": {"world_size": ("world size",)}}


def _job() -> Any:
    return resolve(f"{_CP}.run.ContextJob")(**_qkv())


_JOBS = Kind("jobs", (None, "j", [1]), ([],))
add(f"{_CP}.layout.check_context_plan", lambda: dict(seq_len=8, heads=2, world_size=2),
    seq_len=COUNT, heads=COUNT, world_size=COUNT.more((), (9,)), strategy=_STRATEGIES,
    layout=_LAYOUTS, **_CP_WORLD)
add(f"{_CP}.layout.rank_segments", lambda: dict(seq_len=8, world_size=2, layout="balanced"),
    seq_len=COUNT.more((), (3,)), world_size=COUNT.more((), (5,)), layout=_LAYOUTS,
    **_CP_WORLD)
for _name in ("positions", "token_count"):
    none(f"{_CP}.layout.{_name}", "segments: a rank's, as rank_segments makes them")
for _name in ("segment_pairs", "empty_partial", "attend_block", "attend_block_backward"):
    none(f"{_CP}.blocks.{_name}", "a rank's maths on the tensors and segments its worker "
                                  "made from a checked ContextJob")
none(f"{_CP}.comms.note", "appends what happened to a list of events (or to none)")
for _name in ("comms.RingTransfer", "comms.all_to_all", "comms.sequence_to_heads",
              "comms.heads_to_sequence", "ring.ring_forward", "ring.ring_backward",
              "ulysses.ulysses_forward", "ulysses.ulysses_backward"):
    none(f"{_CP}.{_name}", COLLECTIVE)
none(f"{_CP}.comms.RingTransfer.wait", NO_ARGUMENT)
add(f"{_CP}.run.ContextJob", _qkv, q=_HEADS, k=_HEADS, v=_HEADS, causal=BOOL,
    grad_out=_HEADS.allowing_none(), strategy=_STRATEGIES, layout=_LAYOUTS.allowing_none(),
    overlap=BOOL)
add(f"{_CP}.run.ContextJob.check_world_size", lambda: dict(world_size=2),
    method("ContextJob", _job, "check_world_size"), world_size=COUNT.more((), (6,)),
    **_CP_WORLD)
none(f"{_CP}.run.ContextResult", RECORD)
add(f"{_CP}.run.context_worker", lambda: dict(rank=0, world_size=1, jobs=[_job()]),
    rank=integer(0, 0), world_size=COUNT.more((), (6,)), jobs=_JOBS, **_CP_WORLD)
add(f"{_CP}.run.run_context_jobs", lambda: dict(jobs=[_job()], world_size=2), jobs=_JOBS,
    world_size=COUNT.more((), (6,)), timeout=TIMEOUT, **_CP_WORLD)
add(f"{_CP}.run.context_attention", lambda: _qkv(world_size=2), q=_HEADS, k=_HEADS, v=_HEADS,
    causal=BOOL, grad_out=_HEADS.allowing_none(), strategy=_STRATEGIES,
    world_size=COUNT.more((), (6,)), layout=_LAYOUTS.allowing_none(), overlap=BOOL,
    timeout=TIMEOUT, **_CP_WORLD)
add(f"{_CP}.timing.ring_step_worker",
    lambda: dict(rank=0, world_size=1, chunk=2, heads=1, head_dim=2), chunk=COUNT,
    heads=COUNT, head_dim=COUNT, repeats=COUNT)

# ------------------------------------------------------------------------------------------
# gpudl.bench
# ------------------------------------------------------------------------------------------

_BENCH = "gpudl.bench"
_TOPIC = choice("elementwise", "memory", "matmul")


def _timing():
    return resolve(f"{_BENCH}.timing.Timing")((1e-3, 2e-3), "wall-clock", False)


add(f"{_BENCH}.row", lambda: dict(name="x", timing=_timing(), n_bytes=8, n_flops=2.0),
    name=Kind("a row name", (None, 1), ("",)), timing=Kind("a Timing", (None, 0.1, (0.1,))),
    n_bytes=SIZE.allowing_none(), n_flops=NONNEGATIVE.allowing_none())
_ROWS = [{"name": "a", "gbps": 2.0, "median_s": 1.0, "meaningful": True},
         {"name": "b", "gbps": 1.0, "median_s": 2.0, "meaningful": True}]
add(f"{_BENCH}.bar", lambda: dict(name="a_vs_b", what="a over b", rows=_ROWS, numerator="a",
                                  denominator="b", threshold=1.0),
    name=Kind("a bar id", (None, 1), ("A B", "")), what=Kind("a sentence", (None,), ("",)),
    threshold=POSITIVE, compare=choice(">=", "<="), rate=choice("gbps", "tflops", "median_s"),
    numerator=Kind("a row name", (), ("c",)), denominator=Kind("a row name", (), ("c",)),
    rows=Kind("rows", (None, 1), ()))
add(f"{_BENCH}.evaluate_bars", lambda: dict(specs=[], rows=_ROWS),
    specs=Kind("bar specs", (None, 1), ([{"name": "x", "what": "y", "numerator": "a",
                                         "denominator": "b", "threshold": -1.0}],)),
    rows=Kind("rows", (None, 1), ()), aliases={"specs": ("threshold",)})
add(f"{_BENCH}.find_bar", lambda: dict(record={"bars": []}, name="x"),
    record=Kind("a record", (None, [])))
none(f"{_BENCH}.environment.machine", NO_ARGUMENT)
add(f"{_BENCH}.environment.commit", dict, root=Kind("a folder", (None, 1)))
add(f"{_BENCH}.environment.gpus_missing", lambda: dict(ranks=2), ranks=COUNT)
_BODY = {"rows": [], "bars": []}
add(f"{_BENCH}.write_results", lambda: dict(topic="memory", body=dict(_BODY),
                                            directory="/nonexistent/not/written"),
    topic=Kind("a topic", (None, 1), ("Memory!", "")),
    body=Kind("a body", (None, []), ({"rows": None, "bars": []}, {"rows": [], "bars": [],
                                                                  "topic": "x"})))
add(f"{_BENCH}.run_topic", lambda: dict(topic="memory"),
    lambda kw: resolve(f"{_BENCH}.run_topic")(kw["topic"]), topic=_TOPIC)
add(f"{_BENCH}.load_or_run", lambda: dict(topic="memory", directory="/nonexistent"),
    topic=_TOPIC, fresh=BOOL)
add(f"{_BENCH}.results_path", lambda: dict(topic="memory"), topic=Kind(
    "a topic", (None, 1), ("a/b", "")), backend_name=choice("cuda", "simulator").allowing_none())
add(f"{_BENCH}.schema.check_record", lambda: dict(record={}),
    record=Kind("a record", (), (None, [], {"topic": "memory"})),
    aliases={"record": ("result",)})
add(f"{_BENCH}.results.load_record", lambda: dict(path="/nonexistent.json"),
    path=Kind("a path", (None, 1)))
add(f"{_BENCH}.results.import_results", lambda: dict(source="/nonexistent", keep=()),
    source=Kind("a path", (None, 1)), keep=Kind("paths", ("a", 1, None)))

_AR = f"{_BENCH}.allreduce"
_SIZES = Kind("message sizes", ("4", 4, [4.0], [True]), ([], [6], [0], [-4]))
_MS = f"{_BENCH}.message_sizes"
add(f"{_MS}.default_sizes", lambda: dict(world_size=2), world_size=COUNT)
add(f"{_MS}.check_plan", lambda: dict(sizes_bytes=[4], repeats=1, warmup=0), sizes_bytes=_SIZES,
    repeats=COUNT, warmup=SIZE)
none(f"{_MS}.human_size", "n_bytes: a size its callers computed (a message's, checked by "
                          "check_plan)")
add(f"{_AR}.allreduce_bandwidth", lambda: dict(world_size=2, sizes_bytes=[4], repeats=1,
                                               warmup=0),
    world_size=COUNT, sizes_bytes=_SIZES.allowing_none(), repeats=COUNT, warmup=SIZE,
    timeout=TIMEOUT)
add(f"{_AR}.allreduce_bandwidth_worker",
    lambda: dict(rank=0, world_size=1, sizes_bytes=[4], repeats=1, warmup=0),
    sizes_bytes=_SIZES, repeats=COUNT, warmup=SIZE)
add(f"{_AR}.collective_bandwidth_worker",
    lambda: dict(rank=0, world_size=2, sizes_bytes=[8], repeats=1, warmup=0),
    sizes_bytes=_SIZES.more((), ([4],)), repeats=COUNT, warmup=SIZE,
    collectives=Kind("collectives", (None, "all_reduce", [1]), (["broadcast"],)),
    aliases={"sizes_bytes": ("equal part",)})
add(f"{_BENCH}.experts.grouped_experts", lambda: dict(tokens=8),
    config=Kind("a MoEConfig", (None, "x", 1, {})), tokens=COUNT.allowing_none())
add(f"{_BENCH}.p2p.p2p_bandwidth", lambda: dict(sizes_bytes=[4], repeats=1, warmup=0),
    sizes_bytes=_SIZES.allowing_none(), repeats=COUNT, warmup=SIZE, timeout=TIMEOUT)
add(f"{_BENCH}.p2p.p2p_bandwidth_worker",
    lambda: dict(rank=0, world_size=2, sizes_bytes=[4], repeats=1, warmup=0),
    sizes_bytes=_SIZES, repeats=COUNT, warmup=SIZE, world_size=integer(2))
add(f"{_AR}.ring_timings_worker", lambda: dict(rank=0, world_size=1, numels=[3], repeats=1),
    numels=ints(1), repeats=COUNT)
add(f"{_AR}.time_ring_all_reduce", lambda: dict(world_size=2, numels=[3], repeats=1),
    world_size=COUNT, numels=ints(1), repeats=COUNT, timeout=TIMEOUT)
add(f"{_AR}.run", lambda: dict(world_sizes=(2,), sizes_bytes=[4], repeats=1),
    world_sizes=ints(1), sizes_bytes=_SIZES.allowing_none(), repeats=COUNT)
none(f"{_AR}.format_table", "rows: what allreduce_bandwidth returns")
none(f"{_AR}.main", CLI)

add(f"{_BENCH}.context.run", dict, world_size=integer(2), chunk=COUNT.allowing_none(),
    heads=COUNT.allowing_none(), head_dim=COUNT.allowing_none(), repeats=COUNT)
_AT_B = f"{_BENCH}.attention"
add(f"{_AT_B}.attention_flops", lambda: dict(heads=1, s=4, d=4), heads=COUNT, s=COUNT,
    d=COUNT, causal=BOOL)
add(f"{_AT_B}.run", lambda: dict(s_values=(4,), heads=1, d=4),
    s_values=ints(1).allowing_none(), heads=COUNT.allowing_none(), d=integer(1, 128))

_DPB = f"{_BENCH}.dataparallel"
add(f"{_DPB}.predicted_step_time", lambda: dict(times={}), times=Kind("times", (None, [])))
add(f"{_DPB}.step_times", lambda: dict(world_size=2, setup=_setup()),
    world_size=COUNT.more((), (3,)), setup=_SETUP,
    strategies=Kind("strategies", (None, "ddp", [1]), (["bogus"], ["single"])),
    steps=COUNT, warmup=SIZE, timeout=TIMEOUT,
    **_DP)
add(f"{_DPB}.step_times_worker",
    lambda: dict(rank=0, world_size=1, strategies=["ddp"], setup=_setup(), steps=1,
                 warmup=0),
    strategies=Kind("strategies", (None, "ddp", [1]), (["bogus"],)), setup=_SETUP,
    steps=COUNT, warmup=SIZE)
add(f"{_DPB}.run", lambda: dict(world_sizes=(2,), setup=_setup()),
    world_sizes=ints(1).allowing_none(), setup=_SETUP.allowing_none())

add(f"{_BENCH}.elementwise.run", lambda: dict(n=64, repeats=1),
    n=COUNT.allowing_none(), repeats=COUNT.allowing_none())

_HB = f"{_BENCH}.hierarchy"
add(f"{_HB}.latency", lambda: dict(working_set_bytes=4096, steps=4), working_set_bytes=COUNT,
    steps=COUNT, shared=BOOL, stride_bytes=COUNT, seed=SIZE)
add(f"{_HB}.bandwidth", lambda: dict(level="HBM"), level=choice("HBM", "L2", "shared"))
add(f"{_HB}.measure", lambda: dict(steps=4), steps=COUNT)
add(f"{_HB}.table", lambda: dict(results={}), results=Kind("results", (None, [])))

_LB = f"{_BENCH}.launch"
add(f"{_LB}.run", lambda: dict(calls=2, repeats=1, tensors=2), calls=COUNT, repeats=COUNT,
    tensors=COUNT)
add(f"{_LB}.measure_launches", lambda: dict(calls=2, repeats=1, cases=["empty"]),
    calls=COUNT.allowing_none(), repeats=COUNT.allowing_none(),
    measured=choice("full launch", "launch without the driver call",
                    "simulated launch").allowing_none(),
    cases=Kind("cases", ("empty", 1), (["bogus"],)).allowing_none())
add(f"{_LB}.measure_optimizer", lambda: dict(tensors=2, size=2, steps=1), tensors=COUNT,
    size=COUNT, steps=COUNT.allowing_none())
none(f"{_LB}.main", CLI)

_MB = f"{_BENCH}.matmul"
add(f"{_MB}.bench_matmul", lambda: dict(sizes=(8,)), sizes=ints(1).allowing_none())
none(f"{_MB}.bench_mlp", NO_ARGUMENT)
add(f"{_MB}.run", lambda: dict(sizes=(8,), mlp=False), sizes=ints(1).allowing_none(),
    mlp=BOOL, experts=BOOL)
add(f"{_BENCH}.memory.run", lambda: dict(n=64, hierarchy=False),
    n=integer(4).allowing_none(), hierarchy=BOOL)

_OB = f"{_BENCH}.optim"
_HYPER = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8}
add(f"{_OB}.float32_hyper", lambda: dict(hyper=dict(_HYPER)),
    hyper=Kind("hyperparameters", (None, []), ({"lr": float("nan"), "betas": (0.9, 0.9),
                                               "eps": 1e-8},)), aliases={"hyper": ("lr",)})
add(f"{_OB}.hyper_used", lambda: dict(name="torch fused", device=torch.device("cpu")),
    device=Kind("a torch.device", (None, "cpu")))
add(f"{_OB}.check_step", lambda: dict(make=lambda ps, **kw: torch.optim.Adam(ps, **kw),
                                      shapes=[4]),
    make=Kind("an optimizer factory", (None, 1)), shapes=ints(1))
add(f"{_OB}.layouts", lambda: dict(sizes=(8,), small=(2, 3)), sizes=ints(1),
    small=ints(1, 2).more((), ((2, 3, 4),)))
add(f"{_OB}.run", lambda: dict(sizes=(8,), small=(2, 3), repeats=1),
    sizes=ints(1).allowing_none(), small=ints(1, 2).allowing_none(),
    repeats=COUNT.allowing_none())

_PB = f"{_BENCH}.pipeline"
add(f"{_PB}.bubble_sweep", lambda: dict(world_size=4, microbatches=(1,), schedules=("gpipe",)),
    world_size=COUNT.more((), (5,)), microbatches=ints(1),
    schedules=Kind("schedules", (None, "gpipe", [1]), (["bogus"],)), timeout=TIMEOUT,
    aliases={"world_size": ("stages", "pipeline-parallel degree")})
add(f"{_PB}.run", lambda: dict(world_size=4, microbatches=(1,)),
    world_size=COUNT.more((), (5,)), microbatches=ints(1),
    aliases={"world_size": ("stages", "pipeline-parallel degree")})

_PRB = f"{_BENCH}.precision"
for _name in ("matmul_timing", "measured_matmul_flops"):
    add(f"{_PRB}.{_name}", lambda: dict(n=8, repeats=1), n=COUNT,
        dtype=choice("float32", "bfloat16", "float16", "tf32"), repeats=COUNT)
add(f"{_PRB}.run", lambda: dict(n=8), n=COUNT.allowing_none())

_TCB = f"{_BENCH}.tensorcores"
add(f"{_TCB}.datasheet_spec", lambda: dict(device_name="NVIDIA H100 80GB HBM3"),
    device_name=Kind("a device name", (None, 1)), memory_bytes=NONNEGATIVE.allowing_none())
add(f"{_TCB}.run", lambda: dict(sizes=(8,), kernel_sizes=(16,)),
    sizes=ints(1).allowing_none(), kernel_sizes=ints(1).allowing_none())

_TB = f"{_BENCH}.timing"
none(f"{_TB}.Timing", RECORD)
add(f"{_TB}.time_cuda", lambda: dict(fn=abs, warmup=0, repeats=1, inner=1),
    lambda kw: resolve(f"{_TB}.time_cuda")(kw["fn"], 1, warmup=kw["warmup"],
                                           repeats=kw["repeats"], inner=kw["inner"]),
    warmup=SIZE, repeats=COUNT.allowing_none(), inner=COUNT)
add(f"{_TB}.time_cpu", lambda: dict(fn=abs, warmup=0, repeats=1),
    lambda kw: resolve(f"{_TB}.time_cpu")(kw["fn"], 1, warmup=kw["warmup"],
                                          repeats=kw["repeats"]),
    warmup=SIZE, repeats=COUNT)
add(f"{_TB}.time_interleaved", lambda: dict(fns={"a": lambda: None}, warmup=3, repeats=5),
    fns=Kind("calls", (), ({},)), warmup=integer(3), repeats=integer(5).allowing_none(),
    aliases={"warmup": ("fair comparison",), "repeats": ("fair comparison",)})
add(f"{_TB}.choose_inner", lambda: dict(call_s=1e-3), call_s=POSITIVE)
_SAMPLES = Kind("samples in seconds", ("1", 1, None, ["a", 2.0]),
                ([float("nan"), 2.0], [-1.0, 2.0], [1.0, float("inf")]))
add(f"{_TB}.spread", lambda: dict(samples=[1e-3, 2e-3]), samples=_SAMPLES)
add(f"{_TB}.stable", lambda: dict(samples=[1e-3] * 5, seconds=5e-3), samples=_SAMPLES,
    seconds=NONNEGATIVE)
add(f"{_TB}.row_kind", lambda: dict(n_bytes=8), n_bytes=SIZE, l2_bytes=SIZE.allowing_none())
add(f"{_TB}.gbps", lambda: dict(n_bytes=8, seconds=1.0), n_bytes=NONNEGATIVE,
    seconds=POSITIVE)
add(f"{_TB}.gflops", lambda: dict(n_flops=8, seconds=1.0), n_flops=NONNEGATIVE,
    seconds=POSITIVE)
add(f"{_TB}.fp32_matmuls", lambda: dict(precision="ieee"),
    lambda kw: resolve(f"{_TB}.fp32_matmuls")(**kw).__enter__(),
    precision=choice("ieee", "tf32"))

# ------------------------------------------------------------------------------------------
# gpudl.plots (refusals come before any figure is drawn)
# ------------------------------------------------------------------------------------------

_PL = "gpudl.plots"
_STR = Kind("a str", (None, 1))
_NUMBERS = Kind("names to numbers", (None, [1.0]), ({"a": float("nan")}, {"a": -1.0}))
_ROWSK = Kind("rows", (None, "r", {}), ([],))
add(f"{_PL}.ch01.sm_diagram", dict, compute_capability=_CC.more((), ((5, 1),)))
add(f"{_PL}.ch01.occupancy_curves", lambda: dict(compute_capability=(9, 0)),
    compute_capability=_CC.more((), ((5, 1),)), block_sizes=ints(1), registers=ints(1))
add(f"{_PL}.ch01.time_bars", lambda: dict(seconds={"a": 1.0}, title="t"), seconds=_NUMBERS,
    title=_STR, note=_STR)
add(f"{_PL}.ch05.allreduce_bandwidth", lambda: dict(rows=[{"size_bytes": 4}]), rows=_ROWSK,
    model=Kind("(latency, bandwidth)", (1.0, "m"), ((float("nan"), 1.0), (1.0,))))
add(f"{_PL}.ch05.ring_allreduce_model",
    lambda: dict(n_bytes=1e6, bus_bandwidth_gbs=100.0, latency_s=1e-5, world_sizes=[2, 4]),
    n_bytes=NONNEGATIVE, bus_bandwidth_gbs=POSITIVE, latency_s=NONNEGATIVE,
    world_sizes=ints(1))
add(f"{_PL}.ch02.memory_levels", dict, gpu=_GPU, l2_mb=POSITIVE)
add(f"{_K}.access_patterns.copy_requests", lambda: dict(patterns=[("stride", 1)]),
    patterns=Kind("patterns", (None, "stride", [("stride",)], [("stride", 1.5)]),
                  ([("gather", 1)], [("stride", 0)])))
add(f"{_PL}.ch02.warp_sectors", lambda: dict(rows=[{"addresses": [0, 4]}]), rows=_ROWSK,
    size=COUNT)
none(f"{_K}.access_patterns.tile_load_requests", NO_ARGUMENT)
add(f"{_PL}.ch02.bank_conflicts", lambda: dict(words={"row": [0, 1]}),
    words=Kind("accesses", (None, [0], {"row": "0"}), ({}, {"row": [-1]})))
add(f"{_PL}.ch02.tile_banks",
    lambda: dict(tiles={"t": {"rows": 2, "width": 3, "read": [0, 3]}}),
    tiles=Kind("tiles", (None, [1], {"t": 1}, {"t": {"rows": 2.0, "width": 3, "read": []}}),
               ({}, {"t": {"rows": 2, "width": 1, "read": [0]}},
                {"t": {"rows": 2, "width": 3, "read": [-1]}})))
add(f"{_PL}.ch02.reduction_stages", lambda: dict(threads_per_block=256, warp=32),
    threads_per_block=Kind("threads per block", (1.5, "256", None, True), (0, 96, 16)),
    warp=Kind("a warp size", (1.5, None), (0, 3)))
add(f"{_PL}.ch02.block_loads", lambda: dict(loads={"k": [[[0], [2]], [[1], [3]]]}),
    loads=Kind("loads", (None, [1], {"k": "x"}),
               ({}, {"k": [[[0], [1]], [[2]]]}, {"k": [[[-1]]]})),
    warp=COUNT, itemsize=COUNT)
add(f"{_PL}.ch02.sectors_per_request", lambda: dict(rows=[{"pattern": "p", "sectors": 4}]),
    rows=_ROWSK)
add(f"{_PL}.ch02.roofline",
    lambda: dict(peak_flops=1e15, peak_bandwidth=1e12, points={}, title="t"),
    peak_flops=POSITIVE, peak_bandwidth=POSITIVE, points=Kind("points", (None, [])),
    title=_STR)
add(f"{_PL}.ch05.bandwidth_vs_size",
    lambda: dict(rows=[{"size_bytes": 4, "gbps": 1.0}], key="gbps", title="t"), rows=_ROWSK,
    title=_STR)
add(f"{_PL}.ch06.state_bytes", lambda: dict(rows=[{}]), rows=_ROWSK)
add(f"{_PL}.ch02.hierarchy", lambda: dict(levels={}), levels=Kind("levels", (None, [])))
add(f"{_PL}.ch03.tile_geometry", lambda: dict(variant="v3_tiled"),
    variant=choice("v3_tiled", "v4_register_1d", "v5_register_2d"))
add(f"{_PL}.ch03.matmul_tiling", lambda: dict(variants=("v3_tiled",)),
    variants=Kind("variants", (None, "v3_tiled", []), (["v1_naive"],)))
add(f"{_PL}.ch03.linear_dataflow", dict, batch=COUNT, in_features=COUNT, out_features=COUNT)
add(f"{_PL}.ch05.gradient_timeline", lambda: dict(events=[{"kind": "grad_ready"}]),
    events=_ROWSK)
add(f"{_PL}.ch04.optimizer_traffic", lambda: dict(rows=[{}]), rows=_ROWSK)
add(f"{_PL}.ch04.weight_after_updates", dict, steps=COUNT, update=FINITE, start=FINITE)
add(f"{_PL}.ch04.master_weight_updates", dict, steps=COUNT, update=FINITE)
add(f"{_PL}.ch06.zero_partition", dict, world_size=COUNT, stages=ints(0).more((), ([4],)))
add(f"{_PL}.ch05.ring_schedule", lambda: dict(world_size=3), world_size=COUNT)
add(f"{_PL}.ch05.ring_steps", dict, world_size=COUNT)
_TIMELINE = dict(compute_s=NONNEGATIVE, grad_bytes=NONNEGATIVE, world_size=COUNT,
                 bandwidth=POSITIVE, latency=NONNEGATIVE)
add(f"{_PL}.ch05.bucket_timeline",
    lambda: dict(compute_s=0.1, grad_bytes=1e6, world_size=4, bandwidth=1e9),
    backward_fraction=FRACTION, n_buckets=COUNT, **_TIMELINE)
add(f"{_PL}.ch05.ddp_overlap", dict, bucket_counts=ints(1), **_TIMELINE)
add(f"{_PL}.ch06.pipeline_timelines", lambda: dict(timelines_by_name={"g": [[_EVENT]]}),
    timelines_by_name=Kind("timelines", (None, []), ({}, {"g": [[]]})),
    unit=choice("ms", "s", "units"))
add(f"{_PL}.ch06.pipeline_schedules", dict, stages=COUNT, microbatches=COUNT)
add(f"{_PL}.ch06.tensor_parallel_split", dict, hidden=COUNT, ffn=COUNT,
    degree=COUNT.more((), (3,)))
add(f"{_PL}.buffers.gradient_buckets", dict, dims=_DIMS, bucket_cap_mb=POSITIVE)
add(f"{_PL}.buffers.zero_shards", dict, dims=_DIMS, world_size=COUNT)
add(f"{_PL}.ch07.training_time_and_cost",
    lambda: dict(flops=1e20, peak_flops=1e15, gpu_name="H100 SXM"), flops=POSITIVE,
    peak_flops=POSITIVE, gpu_name=_STR, gpus=ints(1), mfus=Kind("MFUs", (None, 0.4), (
        [0.0], [1.5], [float("nan")])),
    claimed=Kind("(GPUs, hours)", (8, "x"), ((8, -1.0), (8,))))
add(f"{_PL}.ch07.memory_by_zero_stage", lambda: dict(cases={"a": [1.0]},
                                                     gpu_memory_gb={"H100": 80.0}),
    cases=Kind("cases", (None, [1.0], {"a": "1"}), ({"a": [float("nan")]},)),
    gpu_memory_gb=_NUMBERS.more((), ({"a": 0.0},)))
add(f"{_PL}.ch08.roofline_precisions",
    lambda: dict(peaks={"fp32": 1e14}, peak_bandwidth=1e12, points={}, title="t"),
    peaks=_NUMBERS.more((), ({"a": 0.0},)), peak_bandwidth=POSITIVE,
    points=Kind("points", (None, [])), title=_STR)
add(f"{_PL}.ch08.online_softmax_tiles", lambda: dict(s=32, tile=16, causal=True), s=COUNT,
    tile=COUNT, causal=BOOL)
add(f"{_PL}.ch08.mma_fragments", lambda: dict(owners={"a": np.zeros((2, 2), np.int64)}),
    owners=Kind("owners", (None, [], {"a": [[0]]}), ({"a": np.zeros(2, np.int64)},)),
    registers=Kind("registers", ("r", [1], {"a": [[0]]}), (
        {"a": np.zeros((3, 3), np.int64)}, {"b": np.zeros((2, 2), np.int64)})))
add(f"{_PL}.ch08.fragment_registers", lambda: dict(matrix="a"), matrix=choice("a", "b", "c"))
add(f"{_PL}.ch08.observed_errors", lambda: dict(cases=[(1, 1, False, 1.0)]),
    cases=Kind("cases", (None, "c", [(1, 1, False)], [("1", 1, False, 1.0)]),
               ([], [(0, 1, False, 1.0)], [(1, 129, False, 1.0)], [(1, 1, False, 0.0)])),
    seed=SIZE)
add(f"{_PL}.ch08.attention_errors", lambda: dict(labels=["a"], ratios={"v": [1.0]}, title="t"),
    labels=Kind("labels", (None, "l", [1]), ([],)),
    ratios=Kind("ratios", (None, [1.0]), ({"v": [float("nan")]}, {"v": [1.0, 2.0]})),
    title=_STR)
add(f"{_PL}.ch08_layouts.footprint",
    lambda: dict(kernel=len, griddim=1, blockdim=1, args=[], block=(0,), threads=(0,)),
    kernel=CALLABLE, block=ints(0).more((), ([0, 0, 0, 0],)), threads=ints(0),
    shared=Kind("shared rows", ("x", 1, [1]), ({"a": 0},)))
add(f"{_PL}.ch08_layouts.attention_footprints", lambda: dict(variant="v2_fused", s=17, d=1),
    variant=choice("v1_three_kernels", "v2_fused"), s=integer(17), d=integer(1, 128))
add(f"{_PL}.ch08_layouts.tensor_core_footprints", lambda: dict(variant="v1_warp_tiles"),
    variant=choice("v1_warp_tiles", "v2_shared_tiles"))
add(f"{_PL}.ch08_layouts.kernel_footprints",
    lambda: dict(panels=[{"title": "t", "out": ("o", np.zeros((2, 2), np.int8))}], title="t"),
    panels=Kind("panels", (None, "p", {}, [1], [{"title": 1, "out": ("o", np.zeros((1, 1)))}]),
                ([], [{"title": "t"}], [{"title": "t", "out": ("o", np.zeros(2, np.int8))}])),
    title=_STR, unit=choice("thread", "warp"))
add(f"{_PL}.ch08_layouts.online_softmax_steps", lambda: dict(x=np.ones(3), tile=2),
    x=real_array(1).more((), (np.array([1.0, float("nan")]), np.zeros(0))), tile=COUNT)
add(f"{_PL}.ch08_layouts.online_softmax_row", lambda: dict(x=np.ones(3), tile=2),
    x=real_array(1).more((), (np.array([1.0, float("inf")]),)), tile=COUNT)
add(f"{_PL}.ch08.attention_bytes", lambda: dict(s_values=[16], bytes_by_variant={"v": [1.0]}),
    s_values=ints(1), bytes_by_variant=Kind("bytes", (None, [1.0]), (
        {"v": [float("nan")]}, {"v": [-1.0]})), title=_STR)
# Chapters 3 and 4's data-layout figures (gpudl.plots.ch03, ch04, ch04_threads, traced)
_FOOTPRINT = Kind("a footprint (dict)", (None, [], "x"), ({},))
_LAYOUT = {"offsets": [0, 2], "sizes": [2, 1], "blocks": 1, "threads_per_block": 2,
           "pass": [0, 0, 1], "thread": [0, 1, 0]}
add(f"{_PL}.ch03.warp_footprint", lambda: dict(variant="v2_coalesced", m=1, k=1, n=1),
    variant=choice("v1_naive", "v2_coalesced"), m=COUNT, k=COUNT, n=COUNT)
add(f"{_PL}.ch03.warp_footprints", lambda: dict(footprints=[{}]), footprints=_ROWSK)
add(f"{_PL}.ch03.thread_registers", lambda: dict(threads=[0]),
    threads=ints(0).more((), ([256],)))
add(f"{_PL}.ch03.register_tile", lambda: dict(footprint={}), footprint=_FOOTPRINT)
add(f"{_PL}.ch04.adam_error_ratios", lambda: dict(n=2), n=COUNT, step=COUNT,
    lr=NONNEGATIVE, weight_decay=NONNEGATIVE, seed=SIZE)
add(f"{_PL}.ch04.error_within_bound", lambda: dict(ratios={"a": {"p": 0.1}}, title="t"),
    ratios=Kind("ratios", (None, [], "x", {"a": 1.0}), (
        {}, {"a": {"p": -1.0}}, {"a": {"p": float("nan")}})), title=_STR)
add(f"{_PL}.ch04.bf16_rounding", lambda: dict(value=1.0), value=FINITE)
add(f"{_PL}.ch04.bf16_bits", lambda: dict(rounding={}), rounding=_FOOTPRINT)
add(f"{_PL}.ch04_threads.adam_thread_footprint",
    lambda: dict(variant="v2_fused", n=4, element=3),
    variant=choice("v2_fused", "v3_shared"), n=COUNT, element=SIZE.more((), (4,)))
add(f"{_PL}.ch04_threads.adam_thread_work", lambda: dict(footprints=[{}]), footprints=_ROWSK)
add(f"{_PL}.ch04_threads.grid_stride_layout", lambda: dict(shapes=[(2,)]),
    shapes=Kind("shapes", (None, 1, [1.5], [[1.5]]), ([], [[0]], [[]])))
add(f"{_PL}.ch04_threads.multi_tensor_layout",
    lambda: dict(layout=dict(_LAYOUT), names=["a", "b"], title="t"),
    layout=Kind("layout", (None, [], "x"), ({},)), names=Kind("names", (None, 1), (["a"],)),
    title=_STR)


def _trace() -> object:
    from gpudl.trace import Trace

    return Trace("k", ("x",), ())


add(f"{_PL}.traced.base_address", lambda: dict(t=_trace(), array="x"),
    t=Kind("a Trace", (None, "x", 1)), array=_STR.more((), ("nope",)))
add(f"{_PL}.traced.element_indices", lambda: dict(t=_trace(), array="x", addresses=[2**32]),
    addresses=ints(0, 0), itemsize=COUNT)
add(f"{_PL}.traced.sector_elements",
    lambda: dict(t=_trace(), array="x", addresses=[2**32], size=4),
    addresses=ints(0, 0), size=COUNT, itemsize=COUNT)
none(f"{_PL}.style.finish", "fig: a Figure that a plot function of the package made")
none(f"{_PL}.style.font_sizes", "fig: a Figure (tests/test_plots.py reads every figure's)")
none(f"{_PL}.style.check_rows", "the rows check of the plots that take rows: their entries "
                                "here give it bad rows")
add(f"{_PL}.measured.rate_bars",
    lambda: dict(groups={"": {"a": 1.0}}, references={}, unit="GB/s", title="t",
                 reference_label="r"),
    groups=_NUMBERS.more((), ({"": {"a": float("inf")}},)), references=_NUMBERS,
    unit=_STR, title=_STR, reference_label=_STR)

# ------------------------------------------------------------------------------------------
# Chapter 9: inference (gpudl.estimate, gpudl.kernels, gpudl.models, gpudl.bench, plots)
# ------------------------------------------------------------------------------------------

_DEVICE_FUNCTION = "a device function, called inside kernels"
for _name in ("decode_tile.contiguous_scores", "decode_tile.online_softmax_step",
              "decode_tile.contiguous_values", "decode_tile.load_query", "decode_tile.attend_keys",
              "decode_tile.store_row", "decoder_layers.row_sum", "paged.paged_scores",
              "paged.paged_values", "quant.warp_sum"):
    none(f"{_K}.{_name}", _DEVICE_FUNCTION)

_INF = "gpudl.estimate.inference"
_MODEL = dict(n_params=POSITIVE, batch=COUNT, context_tokens=SIZE,
              kv_bytes_per_token=NONNEGATIVE, bytes_per_param=POSITIVE)
_PEAKS = dict(peak_flops=POSITIVE, peak_bandwidth=POSITIVE)
_SHAPE = dict(name="m", params=1e9, layers=2, heads=4, kv_heads=2, head_dim=8, source="s")
add(f"{_INF}.ModelShape", lambda: dict(_SHAPE), name=_STR, source=_STR, params=POSITIVE,
    layers=COUNT, heads=COUNT, kv_heads=COUNT.more((), (3,)), head_dim=COUNT)
add(f"{_INF}.ModelShape.kv_bytes_per_token", dict, method(
    "ModelShape", lambda: resolve(f"{_INF}.ModelShape")(**_SHAPE), "kv_bytes_per_token"),
    bytes_per_value=POSITIVE)
add(f"{_INF}.kv_cache_bytes", lambda: dict(layers=2, kv_heads=2, head_dim=8, tokens=4),
    layers=COUNT, kv_heads=COUNT, head_dim=COUNT, tokens=SIZE, bytes_per_value=POSITIVE)
add(f"{_INF}.decode_flops", lambda: dict(n_params=7e9, batch=1), n_params=POSITIVE,
    batch=COUNT)
for _name in ("decode_bytes", "decode_intensity"):
    add(f"{_INF}.{_name}", lambda: dict(n_params=7e9, batch=1), **_MODEL)
for _name in ("decode_step_time", "decode_tokens_per_second"):
    add(f"{_INF}.{_name}",
        lambda: dict(n_params=7e9, batch=1, peak_flops=1e15, peak_bandwidth=3e12),
        **_MODEL, **_PEAKS)
add(f"{_INF}.prefill_intensity", lambda: dict(n_params=7e9, prompt_tokens=512),
    n_params=POSITIVE, prompt_tokens=COUNT, kv_bytes_per_token=NONNEGATIVE,
    bytes_per_param=POSITIVE)
add(f"{_INF}.prefill_time",
    lambda: dict(n_params=7e9, tokens=512, peak_flops=1e15, peak_bandwidth=3e12),
    n_params=POSITIVE, tokens=COUNT, kv_bytes_per_token=NONNEGATIVE, bytes_per_param=POSITIVE,
    **_PEAKS)
add(f"{_INF}.critical_batch", lambda: dict(peak_flops=1e15, peak_bandwidth=3e12, n_params=7e9),
    n_params=POSITIVE, kv_bytes_per_sequence=NONNEGATIVE, bytes_per_param=POSITIVE, **_PEAKS)
add(f"{_INF}.tokens_per_price", lambda: dict(tokens_per_second=100.0, price_per_gpu_hour=2.0),
    tokens_per_second=POSITIVE, price_per_gpu_hour=POSITIVE, n_gpus=COUNT)

_BAT = "gpudl.estimate.batching"


def _request(arrival_s: float = 0.0) -> Any:
    return resolve(f"{_BAT}.Request")(arrival_s, 4, 4)


def _cost() -> Any:
    return resolve(f"{_BAT}.StepCost")(7e9, 1e15, 3e12, 5e5)


_REQUESTS = Kind("requests", (None, "r", [1], [(0.0, 4, 4)]), ([],))
_RANGE = Kind("a (low, high) range", (None, 16, "16,512", (16, 2.5), (True, 4)),
              ((0, 4), (8, 4), (1, 2, 3), (4,)))
add(f"{_BAT}.Request", lambda: dict(arrival_s=0.0, prompt=4, output=4),
    arrival_s=NONNEGATIVE, prompt=COUNT, output=COUNT)
add(f"{_BAT}.StepCost",
    lambda: dict(n_params=7e9, peak_flops=1e15, peak_bandwidth=3e12, kv_bytes_per_token=5e5),
    n_params=POSITIVE, kv_bytes_per_token=NONNEGATIVE, bytes_per_param=POSITIVE, **_PEAKS)
add(f"{_BAT}.StepCost.decode", lambda: dict(batch=2, context_tokens=8),
    method("StepCost", _cost, "decode"), batch=COUNT, context_tokens=SIZE)
add(f"{_BAT}.StepCost.prefill", lambda: dict(tokens=8), method("StepCost", _cost, "prefill"),
    tokens=COUNT)
none(f"{_BAT}.Served", RECORD)
add(f"{_BAT}.request_stream", lambda: dict(n=3, rate_per_s=1.0, seed=0), n=COUNT,
    rate_per_s=POSITIVE, seed=SIZE, prompt=_RANGE, output=_RANGE)
add(f"{_BAT}.simulate", lambda: dict(requests=[_request()], cost=_cost(), max_batch=2),
    requests=_REQUESTS.more((), ([_request(1.0), _request(0.0)],)), cost=instance(object),
    max_batch=COUNT, policy=choice("static", "continuous"))
none(f"{_BAT}.check_requests", "an input check of simulate and measure_waste (tested through "
                               "their requests)")

_DEC = f"{_K}.decode"
_LENGTHS = np.array([1, 6], np.int32)
_INT32 = Kind("int32 lengths", ([1, 6], _LENGTHS.astype(np.int64), _LENGTHS.astype(np.float32),
                                None, 6),
              (np.array([0, 6], np.int32), np.array([-1, 2], np.int32),
               np.array([[1, 6]], np.int32), np.array([1, 1, 6, 6], np.int32)[::2]))
_DLENGTHS = _INT32.more((), (np.array([1, 7], np.int32), np.array([1], np.int32)))


def _decode_arrays(device: bool = False) -> dict:
    arrays = dict(q=f32(2, 2, 3), k_cache=f32(2, 2, 6, 3), v_cache=f32(2, 2, 6, 3),
                  lengths=_LENGTHS.copy())
    return {k: resolve("numba.cuda").to_device(v) for k, v in arrays.items()} if device else arrays


_DQ_WRONG = (f32(3, 2, 3), f32(2, 2, 4), f32(2, 3, 3))  # batch, head size, heads per group
_DECODE = dict(q=float32(3, (2, 2, 3)).more((), _DQ_WRONG), k_cache=float32(4, (2, 2, 6, 3)),
               v_cache=float32(4, (2, 2, 6, 3)).more((), (f32(2, 2, 7, 3),)), lengths=_DLENGTHS)
_DECODE64 = dict(q=real_array(3, (2, 2, 3)).more((), _DQ_WRONG),
                 k_cache=real_array(4, (2, 2, 6, 3)),
                 v_cache=real_array(4, (2, 2, 6, 3)).more((), (f32(2, 2, 7, 3),)),
                 lengths=_DLENGTHS)
_DVARIANT = variants("decode")
add(f"{_DEC}.decode_attention", _decode_arrays, variant=_DVARIANT, split_size=COUNT,
    launch=CALLABLE, **_DECODE)
add(f"{_DEC}.reference", _decode_arrays, **_DECODE64)
add(f"{_DEC}.reference_split_kv", _decode_arrays, split_size=COUNT, **_DECODE64)
add(f"{_K}.decode_error.error_bound", _decode_arrays, split_size=COUNT.allowing_none(),
    **_DECODE64)
for _name in ("check_lengths", "check_decode_inputs", "check_decode_arrays"):
    none(f"{_DEC}.{_name}", "an input check of decode_attention, its reference and bound "
                            "(tested through them)")
none(f"{_DEC}.plain_launch", "starts the kernel it is given; gpudl.launches.check_launch "
                             "checks the launch")
def _launch_v2(kw: dict) -> Any:
    kw = {**kw, "o": resolve("gpudl.kernels.arrays.poisoned")((2, 2, 3))}
    return resolve(f"{_DEC}.launch_v2_split_kv")(**kw)


_HOST_WORKSPACE = (f32(2, 2, 1), f32(2, 2, 1), f32(2, 2, 1, 3))
add(f"{_DEC}.launch_v2_split_kv", lambda: _decode_arrays(device=True), _launch_v2, split_size=COUNT,
    workspace=Kind("three device arrays", ("w", 1, (1, 2, 3), _HOST_WORKSPACE[:2],
                                           _HOST_WORKSPACE), (
        tuple(_device(*s) for s in ((2, 2, 1), (2, 2, 1), (2, 2, 1, 4))),
        tuple(_device(*s) for s in ((2, 2, 2), (2, 2, 2), (2, 2, 2, 3))))))
add(f"{_K}.decode_reads.cache_reads", lambda: dict(lengths=_LENGTHS.copy(), heads=2,
                                                    kv_heads=1, d=3),
    lengths=_INT32, heads=COUNT, kv_heads=COUNT.more((), (3,)), d=integer(1, 128))
add(f"{_K}.decode_reads.traced_cache_reads",
    lambda: dict(variant="v1_one_block_per_head", **_decode_arrays()), variant=_DVARIANT,
    split_size=COUNT, **_DECODE)

_PG = f"{_K}.paged"
_SEQ = {"seq_id": ("sequence",)}  # an unknown or freed id: "sequence 7 is unknown"
_SEQ_ID = SIZE.more((), (1, 7))  # freed, unknown


def _allocator() -> Any:
    allocator = resolve(f"{_PG}.BlockAllocator")(4, 2)
    allocator.reserve(0, 1)
    allocator.reserve(1, 1)
    allocator.free(1)
    return allocator


def _paged_cache() -> Any:
    cache = resolve(f"{_PG}.PagedKVCache")(4, 2, 1, 3)
    cache.allocator.reserve(0, 1)  # no token written: the tables only
    cache.allocator.reserve(1, 1)
    cache.free(1)
    return cache


add(f"{_PG}.BlockAllocator", lambda: dict(num_blocks=4, block_size=2), num_blocks=COUNT,
    block_size=COUNT)
add(f"{_PG}.BlockAllocator.reserve", lambda: dict(seq_id=0, tokens=1),
    method("BlockAllocator", _allocator, "reserve"), seq_id=SIZE.more((), (1,)),
    tokens=COUNT.more((), (100,)), aliases=_SEQ)
for _name in ("free", "block_table", "length"):
    add(f"{_PG}.BlockAllocator.{_name}", lambda: dict(seq_id=0),
        method("BlockAllocator", _allocator, _name), seq_id=_SEQ_ID, aliases=_SEQ)
add(f"{_PG}.PagedKVCache", lambda: dict(num_blocks=4, block_size=2, kv_heads=1, head_dim=3),
    num_blocks=COUNT, block_size=COUNT, kv_heads=COUNT, head_dim=integer(1, 128))
add(f"{_PG}.PagedKVCache.append", lambda: dict(seq_id=0, k=f32(1, 1, 3), v=f32(1, 1, 3)),
    method("PagedKVCache", _paged_cache, "append"), seq_id=SIZE.more((), (1,)),
    k=float32(3, (1, 1, 3)).more((), (f32(1, 2, 3), f32(0, 1, 3))),
    v=float32(3, (1, 1, 3)).more((), (f32(2, 1, 3),)), aliases=_SEQ)
for _name in ("free", "block_table"):
    add(f"{_PG}.PagedKVCache.{_name}", lambda: dict(seq_id=0),
        method("PagedKVCache", _paged_cache, _name), seq_id=_SEQ_ID, aliases=_SEQ)
_SEQ_IDS = Kind("sequence ids", ("0", 0, None, [0.5], [True]), ([-1], [7], [1]))
add(f"{_PG}.PagedKVCache.tables", lambda: dict(seq_ids=[0]),
    method("PagedKVCache", _paged_cache, "tables"), seq_ids=_SEQ_IDS,
    aliases={"seq_ids": ("sequence",)})
add(f"{_PG}.paged_decode_attention", lambda: dict(q=f32(1, 1, 3), cache=_paged_cache(),
                                                  seq_ids=[0]),
    q=float32(3, (1, 1, 3)).more((), (f32(2, 1, 3), f32(1, 1, 4))),
    cache=instance(object), seq_ids=_SEQ_IDS, launch=CALLABLE,
    aliases={"seq_ids": ("sequence",)})
add(f"{_PG}.measure_waste",
    lambda: dict(requests=[_request()], block_size=2, max_len=8, step_s=0.1),
    requests=_REQUESTS, block_size=COUNT, max_len=COUNT.more((), (7,)), step_s=POSITIVE)

_QU = f"{_K}.quant"
_INT8 = Kind("an int8 array", (f32(3, 4), np.ones((3, 4), np.int16), [[1] * 4] * 3, None),
             (np.ones((3, 4, 1), np.int8), np.ones((3, 8), np.int8)[:, ::2]))
_SCALE = float32(1, (3,)).more((), (f32(2),))
_QVARIANT = variants("quant")
_HOST_Q = Kind("an integer array", (f32(3, 4), [[1] * 4] * 3, None), (np.ones((3, 4, 1),
                                                                          np.int8),))
add(f"{_QU}.quantize_int8", lambda: dict(w=f32(3, 4)), w=float32(2, (3, 4)).more((), (
    np.full((3, 4), np.nan, np.float32), np.full((3, 4), np.inf, np.float32))))
add(f"{_QU}.dequantize_int8", lambda: dict(q=np.ones((3, 4), np.int8), scale=f32(3)),
    q=_INT8, scale=_SCALE)
add(f"{_QU}.gemv_int8", lambda: dict(x=f32(4), q=np.ones((3, 4), np.int8), scale=f32(3)),
    x=float32(1, (4,)).more((), (f32(5), f32(1, 1, 4))), q=_INT8, scale=_SCALE,
    variant=_QVARIANT)
for _name in ("reference", "error_bound"):
    add(f"{_QU}.{_name}", lambda: dict(x=f32(2, 4), q=np.ones((3, 4), np.int8), scale=f32(3)),
        x=real_array(2, (2, 4)).more((), (f32(2, 5),)), q=_HOST_Q,
        scale=real_array(1, (3,)).more((np.ones(3, np.int32),), (f32(2),)))
add(f"{_QU}.quantization_bound", lambda: dict(x=f32(2, 4), scale=f32(3)),
    x=real_array(2, (2, 4)), scale=real_array(1, (3,)).more((np.ones(3, np.int32),)))
add(f"{_QU}.weight_bytes", lambda: dict(variant="v2_dequantize_in_registers",
                                         out_features=8, in_features=8),
    variant=_QVARIANT, out_features=SIZE, in_features=SIZE)

_ST = f"{_K}.streams"
add(f"{_ST}.chunk_bounds", lambda: dict(n=10, chunks=4), n=SIZE, chunks=COUNT)
add(f"{_ST}.pinned_copy", lambda: dict(a=f32(4)), a=Kind("a NumPy array", (None, [1.0], 1.0)))
add(f"{_ST}.saxpy_streamed", lambda: dict(alpha=2.0, x=f32(5), y=f32(5)), alpha=FINITE,
    x=float32(1, (5,)), y=float32(1, (5,)).more((), (f32(6),)), chunks=COUNT, streams=COUNT,
    threads_per_block=_TPB)

_DM = "gpudl.models.decoder"
_KD = "gpudl.models.kernel_decoder"


def _decoder_config(**kw: Any) -> Any:
    return resolve(f"{_DM}.DecoderConfig")(**kw)


@functools.cache
def _tiny() -> Any:
    return resolve(f"{_DM}.make_decoder")()


@functools.cache
def _kernel_decoder() -> Any:
    return resolve(f"{_KD}.KernelDecoder")(_tiny())


_DCONFIG = instance(object, also=(resolve(f"{_ENC}.EncoderConfig")(),))
_DMODEL = instance(object, also=(torch.nn.Linear(2, 2),))
# the default configuration: vocab 40, 2 blocks of width 16, 2 heads of 8, 1 KV head, 16 tokens
_PROMPT = Kind("token ids", ("abc", 3, None, [1.5], [True]), ([], [40], [-1], [1] * 17))
_CACHE1 = (torch.zeros(1, 1, 16, 8), torch.zeros(1, 1, 16, 8))
_LAYER_CACHE = Kind("a (keys, values) pair", (None, _CACHE1[0], [_CACHE1[0]],
                                              (np.zeros((1, 1, 16, 8), np.float32),) * 2,
                                              (torch.zeros(1, 1, 16, 8, dtype=torch.float64),) * 2),
                    ((torch.zeros(1, 1, 8, 8),) * 2, (torch.zeros(2, 1, 16, 8),) * 2))
_BLOCK_INPUT = dict(x=tensor(shape=(1, 1, 16), contiguous=False, wrong_dtype=torch.float64).more(
    (), (torch.ones(1, 1, 15), torch.ones(1, 16))), cache=_LAYER_CACHE, start=integer(0, 15))
add(f"{_DM}.DecoderConfig", dict, vocab=COUNT, layers=COUNT, hidden=COUNT.more((), (15, 258)),
    heads=COUNT, kv_heads=COUNT.more((), (3,)), ffn=COUNT, max_len=COUNT)
for _name in ("CausalSelfAttention", "DecoderBlock", "TinyDecoder"):
    add(f"{_DM}.{_name}", lambda: dict(config=_decoder_config()), config=_DCONFIG)
for _name in ("CausalSelfAttention", "DecoderBlock"):
    add(f"{_DM}.{_name}.forward",
        lambda: dict(x=torch.ones(1, 1, 16), cache=tuple(t.clone() for t in _CACHE1), start=0),
        method(_name, lambda name=_name: resolve(f"{_DM}.{name}")(_decoder_config()), "forward"),
        **_BLOCK_INPUT)
add(f"{_DM}.TinyDecoder.forward",
    lambda: dict(tokens=torch.tensor([[3]]), cache=_tiny().new_cache(1), start=0),
    lambda kw: _tiny()(**kw),
    tokens=Kind("token ids", (None, [[3]], torch.ones(1, 1), np.ones((1, 1), np.int64)),
                (torch.tensor([[40]]), torch.tensor([[-1]]), torch.tensor([3]))),
    cache=Kind("a cache", (None, _CACHE1, [None, None]),
               ([_CACHE1], [(torch.zeros(1, 1, 8, 8),) * 2, _CACHE1])),
    start=integer(0, 15))
add(f"{_DM}.TinyDecoder.new_cache", lambda: dict(batch=1),
    lambda kw: _tiny().new_cache(**kw), batch=COUNT)
add(f"{_DM}.make_decoder", dict, config=_DCONFIG, seed=SIZE)
add(f"{_DM}.check_prompt", lambda: dict(prompt=[3], new_tokens=2, config=_decoder_config()),
    prompt=_PROMPT, new_tokens=COUNT.more((), (20,)), config=Kind("a DecoderConfig", ()))
add(f"{_DM}.generate_torch", lambda: dict(model=_tiny(), prompt=[3], new_tokens=2),
    model=_DMODEL, prompt=_PROMPT, new_tokens=COUNT.more((), (20,)))
add(f"{_KD}.step_bytes_after", lambda: dict(model=_tiny(), prompt=[3]), model=_DMODEL,
    prompt=_PROMPT)
add(f"{_KD}.KernelDecoder", lambda: dict(model=_tiny()), model=_DMODEL, attention=_DVARIANT)
add(f"{_KD}.KernelDecoder.generate", lambda: dict(prompt=[3], new_tokens=2),
    lambda kw: _kernel_decoder().generate(**kw), prompt=_PROMPT,
    new_tokens=COUNT.more((), (20,)), run_step=CALLABLE.allowing_none())
add(f"{_KD}.KernelDecoder.set_token", lambda: dict(token=3, position=0),
    lambda kw: _kernel_decoder().set_token(**kw), token=integer(0, 39),
    position=integer(0, 15))
add(f"{_KD}.KernelDecoder.step", dict, lambda kw: _kernel_decoder().step(**kw),
    launch=CALLABLE)
none(f"{_KD}.KernelDecoder.traced_step_bytes", NO_ARGUMENT)
add(f"{_KD}.launches_per_step", lambda: dict(decoder=_kernel_decoder()),
    decoder=instance(object, also=(torch.nn.Linear(2, 2),)))
add("gpudl.models.graphs.capture", lambda: dict(step=lambda launch: None), step=CALLABLE,
    warmup=BOOL)
none("gpudl.models.graphs.stream_launch", "stream: a CUDA stream (numba's or an external "
                                          "one), which numba checks when a kernel starts")

add(f"{_BENCH}.decode.run", lambda: dict(s=4, heads=1, d=4, n=4),
    s=COUNT.allowing_none(), heads=COUNT.allowing_none(),
    d=integer(1, 128).allowing_none(), n=COUNT.allowing_none(), decoder=BOOL)


@functools.cache
def _served() -> Any:
    requests = resolve(f"{_BAT}.request_stream")(3, 1.0, seed=0)
    return resolve(f"{_BAT}.simulate")(requests, _cost(), 2)


_LINES = Kind("names to values", (None, [1.0], {"m": "1"}, {"m": [1.0, "a"]}),
              ({"m": [float("nan"), 1.0]}, {"m": [1.0]}))
add(f"{_PL}.ch09.kv_cache_growth", lambda: dict(tokens=[1, 10], bytes_by_model={"m": [2e9, 2e10]},
                                                limits={"80 GB": 8e10}, title="t"),
    tokens=ints(1), bytes_by_model=_LINES.more((), ({"m": [0.0, 1.0]},)),
    limits=_NUMBERS.more((), ({"a": 0.0},)), title=_STR)
add(f"{_PL}.ch09.word_banks", lambda: dict(rows=4, row_words=5, banks=32), rows=COUNT,
    row_words=COUNT, banks=COUNT)
add(f"{_PL}.ch09.decode_layout",
    lambda: dict(threads=32, columns=4, padded=33, banks=32, value_bytes=4), threads=COUNT,
    columns=COUNT, padded=COUNT.more((), (31,)), banks=COUNT, value_bytes=COUNT)
add(f"{_PL}.ch09.decode_blocks", lambda: dict(lengths=[128, 256], blocks_by_variant={
    "v": [32, 64]}, sms=132, title="t"), lengths=ints(1),
    blocks_by_variant=Kind("names to block counts", (None, [1], {"v": "1"}, {"v": [1.5, 2]}),
                           ({"v": [0, 1]}, {"v": [1]})), sms=COUNT, title=_STR)
add(f"{_PL}.ch09.paged_waste",
    lambda: dict(block_sizes=[8, 16], paged=[0.01, 0.02], contiguous=0.78, title="t"),
    block_sizes=ints(1), contiguous=FRACTION, title=_STR,
    paged=Kind("fractions", (None, 0.1, "a", [0.1, "a"]), (
        [0.1, float("nan")], [0.1, 1.5], [0.1, -0.1], [0.1])))
add(f"{_PL}.ch09.batching_timeline", lambda: dict(runs=[_served()], max_batch=2, title="t"),
    runs=Kind("simulated runs", (None, "r", [1], {}), ([],)), max_batch=COUNT, title=_STR)


# ------------------------------------------------------------------------------------------
# Chapter 11: mixture of experts (gpudl.kernels.experts, gpudl.parallel.experts)
# ------------------------------------------------------------------------------------------

_KE = f"{_K}.experts"


def i32(*values: Any) -> np.ndarray:
    """An int32 array of ``values`` (nested lists for more than one dimension)."""
    return np.array(values, np.int32)


#: int32 indices into 3 tokens (or rows): a row of -1 (dropped) is allowed where noted.
_SOURCES = Kind("int32 indices", ([0.0], None, np.zeros(1, np.float32), np.zeros(1, np.int64)),
                (i32([0]), i32(3), i32(-1)))
_SLOTS = Kind("int32 slots", ([[0]], None, np.zeros((1, 1), np.int64)),
              (i32(0), i32([3]), i32([-2])))
add(f"{_KE}.reference_route", lambda: dict(logits=f32(4, 3), top_k=2),
    logits=real_array(2, (4, 3)), top_k=integer(1, 3))
add(f"{_KE}.route_top_k", lambda: dict(logits=f32(4, 3), top_k=2),
    logits=float32(2, (4, 3)).more((), (f32(4, 0),)), top_k=integer(1, 3))
add(f"{_KE}.reference_permute", lambda: dict(x=f32(3, 2), sources=i32(0, 2)),
    x=real_array(2, (3, 2)), sources=_SOURCES)
add(f"{_KE}.permute_rows", lambda: dict(x=f32(3, 2), sources=i32(0, 2)),
    x=float32(2, (3, 2)), sources=_SOURCES)
add(f"{_KE}.reference_unpermute",
    lambda: dict(rows=f32(3, 2), slots=i32([0], [-1]), gates=f32(2, 1)),
    rows=real_array(2, (3, 2)), slots=_SLOTS, gates=real_array(2, (2, 1)).more((), (f32(3, 1),)))
add(f"{_KE}.unpermute_rows",
    lambda: dict(rows=f32(3, 2), slots=i32([0], [-1]), gates=f32(2, 1)),
    rows=float32(2, (3, 2)), slots=_SLOTS, gates=float32(2, (2, 1)).more((), (f32(3, 1),)))

_EX = f"{_PAR}.experts"
_T2 = Kind("a 2-D tensor", (None, [[1.0]], f32(4, 3)), (torch.ones(4),))
_COUNTS = Kind("a 1-D tensor of counts", (None, [2, 2]), (torch.ones(2, 2, dtype=torch.long),
                                                           torch.tensor([1, 1])))
_MOE_DTYPE = torch_dtype(torch.float32, torch.float64, torch.bfloat16, torch.float16)
_MOE = Kind("a MoEConfig", (None, "x", 1, {}))


def _moe(**kw: Any) -> Any:
    return resolve(f"{_EX}.layer.MoEConfig")(**kw)


def _routing() -> Any:
    return resolve(f"{_EX}.router.route")(torch.ones(4, 3), 2, 1.0)


add(f"{_EX}.router.route", lambda: dict(logits=torch.ones(4, 3), top_k=2, capacity_factor=1.0),
    logits=_T2, top_k=COUNT.more((), (4,)), capacity_factor=POSITIVE)
none(f"{_EX}.router.Routing", RECORD)
add(f"{_EX}.router.load_balancing_loss",
    lambda: dict(probs=torch.ones(4, 3) / 3, counts=torch.tensor([4, 2, 2]), top_k=2),
    probs=_T2, counts=Kind("a 1-D tensor", (None, [4, 2, 2]), (torch.ones(3, 1),)),
    top_k=COUNT)
add(f"{_EX}.router.combine",
    lambda: dict(rows=torch.ones(_routing().sources.numel(), 2), routing=_routing(), tokens=4),
    rows=_T2, routing=Kind("a Routing", (None, "r", 1)), tokens=COUNT)
add(f"{_EX}.layer.MoEConfig", dict, hidden=COUNT, ffn=COUNT, experts=COUNT, top_k=_TOP_K,
    capacity_factor=POSITIVE, aux_weight=NONNEGATIVE, router_skew=FINITE, seed=SIZE)
none(f"{_EX}.layer.MoEOutput", RECORD)
add(f"{_EX}.layer.MoELayer", dict, config=_MOE, dtype=_MOE_DTYPE)


def _moe_layer() -> Any:
    return resolve(f"{_EX}.layer.MoELayer")(_moe())


add(f"{_EX}.layer.MoELayer.forward", lambda: dict(x=torch.ones(4, 8), groups=2),
    method("MoELayer", _moe_layer, "forward"),
    x=Kind("tokens", (None, [[1.0]]), (torch.ones(8), torch.ones(4, 3))),
    groups=COUNT.more((), (3,)))
_BY_EXPERT = dict(rows=_T2, counts=_COUNTS)
add(f"{_EX}.layer.experts_loop",
    lambda: dict(rows=torch.ones(3, 8), counts=torch.tensor([2, 1]), **{
        k: v.detach()[:2] for k, v in _moe_layer().named_parameters() if k != "router"}),
    **_BY_EXPERT)
add(f"{_EX}.layer.pad_to_capacity",
    lambda: dict(rows=torch.ones(3, 2), counts=torch.tensor([2, 1]), capacity=2),
    **_BY_EXPERT, capacity=COUNT.more((), (1,)))
add(f"{_EX}.layer.experts_grouped",
    lambda: dict(rows=torch.ones(3, 8), counts=torch.tensor([2, 1]), capacity=2, **{
        k: v.detach()[:2] for k, v in _moe_layer().named_parameters() if k != "router"}),
    **_BY_EXPERT, capacity=COUNT.more((), (1,)))
add(f"{_EX}.layer.moe_batch", lambda: dict(config=_moe(), tokens=4), config=_MOE,
    tokens=COUNT, seed=SIZE, dtype=_MOE_DTYPE)
for _name in ("all_to_all", "exchange_counts", "gather_tokens", "scatter_tokens",
              "reduce_gradients"):
    none(f"{_EX}.comms.{_name}", COLLECTIVE)
for _name in ("ExpertParallelMoE", "NaiveExpertParallelMoE"):
    none(f"{_EX}.parallel.{_name}", IN_GROUP)
    none(f"{_EX}.parallel.{_name}.run_experts", COLLECTIVE)
none(f"{_EX}.parallel.ExpertParallelMoE.forward", "a torch module's forward, on a rank of its "
                                                  "group: torch checks its input")
none(f"{_EX}.parallel.ExpertParallelMoE.experts", "rows and counts from run_experts, which "
                                                  "experts_loop checks")
none(f"{_EX}.parallel.full_gradients", COLLECTIVE)
add(f"{_EX}.parallel.by_local_expert", lambda: dict(received=torch.tensor([[1, 0], [2, 1]])),
    received=Kind("a 2-D tensor of counts", (None, [[1]]), (torch.ones(3, dtype=torch.long),)))


def _ep_run(**kw: Any) -> Any:
    return resolve(f"{_EX}.training.ExpertParallelRun")(**kw)


_DEG = resolve("gpudl.parallel.degrees.ParallelDegrees")
add(f"{_EX}.training.ExpertParallelRun", dict,
    degrees=Kind("degrees", (None, (2, 2), 1), (_DEG(data=3, expert=3), _DEG(data=2, tensor=2))),
    dispatcher=choice("all_to_all", "all_gather"), config=_MOE, tokens_per_rank=COUNT,
    steps=COUNT, lr=POSITIVE, dtype=_MOE_DTYPE, aliases={"degrees": ("degree",)})
add(f"{_EX}.training.ExpertParallelRun.check_world_size", lambda: dict(world_size=2),
    method("ExpertParallelRun", _ep_run, "check_world_size"), world_size=COUNT.more((), (3,)),
    aliases={"world_size": ("world size",)})
add(f"{_EX}.training.moe_sgd_run",
    lambda: dict(config=_moe(), groups=1, tokens_per_group=4, steps=1), config=_MOE,
    groups=COUNT, tokens_per_group=COUNT, steps=COUNT, lr=POSITIVE, dtype=_MOE_DTYPE)
add(f"{_EX}.training.expert_parallel_worker", lambda: dict(rank=0, world_size=1, runs=[]),
    rank=integer(0, 0), runs=Kind("runs", (None, [1]), ([_ep_run()],)),
    aliases={"runs": ("world size",)})
add(f"{_EX}.training.run_expert_parallel", lambda: dict(runs=[_ep_run()], world_size=2),
    runs=Kind("runs", (None, "r", [1]), ([],)), world_size=COUNT.more((), (3,)),
    timeout=TIMEOUT, aliases={"world_size": ("world size",)})
add(f"{_EX}.training.differences", lambda: dict(result={}, reference={"losses": []}),
    result=Kind("a run", (None, [1])), reference=Kind("a run", (None, [1])))
none(f"{_EX}.training.main", CLI)


# Chapter 11's figures (gpudl.plots.ch11, gpudl.plots.ch11_context)
_DEGREES5 = Kind("ParallelDegrees", (None, (2, 2), {}))
add(f"{_PL}.ch11.rank_routings", lambda: dict(config=_moe(), tokens_per_rank=2, ranks=2),
    config=_MOE, tokens_per_rank=COUNT, ranks=COUNT)
add(f"{_PL}.ch11.router_counts", lambda: dict(config=_moe(), tokens=4), config=_MOE,
    tokens=COUNT)
add(f"{_PL}.ch11.expert_loads", lambda: dict(counts_by_router={"r": [1, 2]}, capacity=2),
    counts_by_router=Kind("names to counts", (None, [1], {"r": "1"}, {"r": [1.5]}),
                          ({}, {"r": [-1, 2]}, {"r": []})), capacity=COUNT)
add(f"{_PL}.ch11.moe_all_to_alls", lambda: dict(config=_moe(experts=4), tokens_per_rank=2),
    config=_MOE, tokens_per_rank=COUNT, ranks=COUNT.more((), (3,)))
add(f"{_PL}.ch11_context.ring_attention_steps", dict, world_size=COUNT.more((), (9,)))
add(f"{_PL}.ch11_context.ring_timelines",
    lambda: dict(cases={"c": {"compute_s": 1.0, "transfer_s": 2.0}}),
    cases=Kind("ring steps", (None, [1], {"c": 1}), ({}, {"c": {"compute_s": 1.0}})),
    world_size=COUNT.more((), (1,)))
add(f"{_PL}.ch11_context.query_owners", lambda: dict(seq_len=8, world_size=2,
                                                     layout="balanced"),
    seq_len=COUNT.more((), (3,)), world_size=COUNT, layout=choice("contiguous", "balanced"))
add(f"{_PL}.ch11_context.causal_balance", lambda: dict(seq_len=8, world_size=2),
    seq_len=COUNT.more((), (3,)), world_size=COUNT.more((), (9,)))
add(f"{_PL}.ch11_context.mesh_groups", lambda: dict(degrees=_degrees()), degrees=_DEGREES5,
    order=Kind("an order of the mesh dimensions", (None, ["data"]), (("data",),)))
add(f"{_PL}.ch11_context.parallel_mesh", lambda: dict(degrees=_degrees()),
    degrees=_DEGREES5, per_node=COUNT)


# ------------------------------------------------------------------------------------------
# Appendix E: the profiles (gpudl.profiles, gpudl.bench.profiler, gpudl.bench.profiles,
# gpudl.plots.profiles)
# ------------------------------------------------------------------------------------------

_PROF = "gpudl.profiles"
_TRACE = Kind("a profile read by gpudl.profiles.load", (None, 1, "ddp-gloo"))


def _stored_profile() -> dict:
    return resolve(f"{_PROF}.load")("ddp-gloo")


add(f"{_PROF}.load", lambda: dict(source="ddp-gloo"), source=Kind("a profile", (None, 1, [])))
add(f"{_PROF}.path", lambda: dict(name="ddp-gloo"),
    name=choice(*resolve(f"{_PROF}.STORED")))
add(f"{_PROF}.rows", lambda: dict(trace=_stored_profile()), trace=_TRACE)
add(f"{_PROF}.spans", lambda: dict(trace=_stored_profile()), trace=_TRACE,
    names=Kind("slice names", ("gloo:all_reduce", 1)))
add(f"{_PROF}.action_timelines", lambda: dict(trace=_stored_profile()), trace=_TRACE)
none(f"{_PROF}.Span", RECORD)
add(f"{_PROF}.Span.overlap_s", dict, lambda kw: resolve(f"{_PROF}.spans")(
    _stored_profile())[0].overlap_s(**kw), other=instance(object))
_PROFILER = f"{_BENCH}.profiler"
none(f"{_PROFILER}.host_ranges", NO_ARGUMENT)
add(f"{_PROFILER}.record", lambda: dict(function=int), lambda kw: resolve(
    f"{_PROFILER}.record")(kw.pop("function"), **kw), function=CALLABLE, shapes=BOOL)
add(f"{_PROFILER}.profiled_worker",
    lambda: dict(rank=0, world_size=1, worker=hello, shapes=False, keep=()),
    worker=CALLABLE, shapes=BOOL, keep=Kind("name prefixes", (None, 1, "gloo")))
add(f"{_PROFILER}.trimmed",
    lambda: dict(traces=[], processes=[], windows=[(0.0, 1.0)], keep=bool), keep=CALLABLE)
none(f"{_PROFILER}.starts_us", "trace: an exported Chrome trace, read by event name")
add(f"{_PROFILER}.write", lambda: dict(name="x", events=[], about={}),
    about=Kind("a dict", (None, 1, "x")))
_PRS = f"{_BENCH}.profiles"
add(f"{_PRS}.record_ddp", dict, world_size=COUNT.more((), (1,)), bucket_cap_mb=POSITIVE,
    dims=_DIMS, timeout=TIMEOUT, distributed=True)
add(f"{_PRS}.record_pipeline", lambda: dict(schedule="gpipe"),
    schedule=choice("gpipe", "1f1b"), microbatches=COUNT, world_size=COUNT, pace_s=POSITIVE,
    steps=COUNT, timeout=TIMEOUT, distributed=True)
add(f"{_PRS}.record_mlp_step", dict, sizes=widths(2), batch=COUNT)
add(f"{_PRS}.record_streams", dict, n=COUNT.allowing_none(), chunks=COUNT, streams=COUNT)
add(f"{_PRS}.record_decode", dict, repeats=COUNT)
add(f"{_PRS}.record_stored", lambda: dict(names=["ddp-gloo"]),
    names=Kind("profile names", (None, "ddp-gloo", 1), (["nccl"],)),
    folder=Kind("a folder", (None, 1)))
add(f"{_PRS}.run", dict, n=COUNT.allowing_none(), sizes=widths(2), batch=COUNT, decode=BOOL)
none(f"{_MLP}.KernelMLP.launches_per_step", NO_ARGUMENT)
for _name in ("ddp_profile", "mlp_step_profile", "streams_profile"):
    add(f"{_PL}.profiles.{_name}", lambda: dict(trace=_stored_profile()), trace=_TRACE)
add(f"{_PL}.profiles.pipeline_profiles", lambda: dict(traces=[_stored_profile()]),
    traces=Kind("profiles", (None, {}, 1, "x", [1]), ([],)))
add(f"{_PL}.profiles.gpu_profiles", lambda: dict(traces={"a": _stored_profile()}),
    traces=Kind("profiles by name", (None, [], 1), ({},)))


# ------------------------------------------------------------------------------------------
# Every registered kernel and every variant's launcher not listed above, from gpudl.registry
# (so that a new variant needs no entry here)
# ------------------------------------------------------------------------------------------

def _public(module: str, name: str) -> bool:
    return name in getattr(importlib.import_module(module), "__all__", ())


def _registered() -> None:
    from gpudl import registry

    for k in registry.load_all().values():
        key = f"{k.module}.{k.function}"
        if k.kind == "triton" and key not in TABLE:
            none(key, "raw Triton kernel: its launcher checks the arrays and sizes its grid, "
                      "gpudl.kernels.tiles.runtime.launch holds the grid to CUDA's limits")
        elif k.builds[0][0] is None and _public(k.module, k.function) and key not in TABLE:
            kernel(key)
    for records in (*registry.VARIANTS.values(), *registry.ABSENT.values()):
        for v in records.values():
            module, name = v.launch.__module__, getattr(v.launch, "__name__", "")
            if _public(module, name) and f"{module}.{name}" not in TABLE:
                none(f"{module}.{name}", f"the launcher of variant {v.name}, on device arrays: "
                     "its entry point checks the arrays, gpudl.launches.check_launch its launch")


_registered()
