"""What a kernel launch costs the host: microseconds per launch, by number and kind of argument.

Book section: Chapter 4, "What a launch costs".

A launch returns before the kernel runs, but the host pays for it first: numba-cuda finds the
compiled kernel for the arguments' types, turns every argument into the words the driver
copies to the GPU (an array is 7 of them: two null pointers, size, item size, data pointer,
shape, strides), then calls the driver. :func:`run` measures that cost for an empty kernel,
kernels of 2 and 4 arrays, and one of 4 arrays and 9 scalars (Adam's 13 arguments), with
numba device arrays, with torch tensors converted at every call
(:func:`gpudl.interop.as_kernel_array`) and with tensors whose arrays are kept
(:class:`gpudl.interop.KernelArrays`); and the host time of one :class:`gpudl.optim.Adam` step
over 1,000 tensors, one launch (``v4_multi_tensor``) or one per tensor (``v2_fused``).

What is measured depends on the machine, and each row says which (``measured``):

* on a GPU, ``"full launch"``: the host's wall clock over 1,000 launches queued back to back
  (the GPU runs each empty kernel faster than the host issues the next);
* without a GPU but with the CUDA compiler pieces (NVVM), ``"launch without the driver
  call"``: numba-cuda's own launch path in a child process on the ``compile`` backend, with
  what needs a driver replaced: loading the compiled module, the device's compute capability,
  the query for the current context, and ``cuLaunchKernel`` itself, which is left out (the
  arguments are still packed as ``cuda.core`` packs them for it). Device arrays and tensors
  are real numba objects over a fake device address; a tensor's ``__cuda_array_interface__``
  is computed as torch computes it for a CUDA tensor. On a GPU the driver calls add to it;
* on the simulator, ``"simulated launch"`` (the empty kernel only): a launch starts a Python
  thread for every GPU thread, and its cost means nothing for a GPU; the
  optimizer's host time is measured with its kernel launches replaced by a no-op (``"host
  time, launches not run"``), and each row counts the launches of one step.

``python -m gpudl bench launch`` runs :func:`run` and stores ``results/launch-<backend>.json``;
``python -m gpudl.bench.launch`` prints the rows (as JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stdout
from types import SimpleNamespace

from gpudl import backend

# isort: split
import numpy as np
import torch
from numba import cuda

from gpudl import interop, registry
from gpudl.bench import row
from gpudl.bench.environment import ROOT
from gpudl.bench.timing import Timing
from gpudl.checks import check_choice, check_int

__all__ = ["BARS", "VIEWS", "CASES", "KINDS", "TENSORS", "TENSOR_SIZE", "run", "measure_launches",
           "measure_optimizer", "main"]


# The kernels do nothing: what is timed is the launch.


@registry.kernel("launch_empty", "void()")
@cuda.jit
def _empty():
    pass


@registry.kernel("launch_two", "void(float32[::1], float32[::1])")
@cuda.jit
def _two(a, b):
    pass


@registry.kernel("launch_four", "void(float32[::1], float32[::1], float32[::1], float32[::1])")
@cuda.jit
def _four(a, b, c, d):
    pass


@registry.kernel("launch_thirteen",
                 "void(float32[::1], float32[::1], float32[::1], float32[::1], boolean, "
                 "float32, float32, float32, float32, float32, float32, float32, float32)")
@cuda.jit
def _thirteen(p, g, m, v, maximize, l2, decay, w1, beta2, w2, neg_step_size, bc2_sqrt, eps):
    pass


#: For each case, its kernel and its numbers of arrays and of scalars (Adam's launch last).
CASES: dict[str, tuple[object, int, int]] = {
    "empty": (_empty, 0, 0),
    "2 arrays": (_two, 2, 0),
    "4 arrays": (_four, 4, 0),
    "4 arrays + 9 scalars": (_thirteen, 4, 9),
}
#: How the arrays reach the kernel.
KINDS = ("device arrays", "torch tensors", "torch tensors, kept")
#: The number of parameters of the Adam step whose host time is measured, and their size.
TENSORS, TENSOR_SIZE = 1000, 10
_SCALARS = (False, *(np.float32(0.5),) * 8)  # Adam's: a flag and 8 float32
_SUFFIX = {"full launch": "", "launch without the driver call": ", no driver call",
           "simulated launch": ", simulated"}


#: The topic has no speed goal; the launch costs are taught, not held to a threshold.
BARS: tuple[dict, ...] = ()
#: The book's boxes of this topic (``{gpudl-measured} launch <view>``) and the bars
#: (of :data:`BARS`) each is held to.
VIEWS = {"costs": ()}


def _row(name: str, samples: list[float], measured: str, **extra: object) -> dict:
    """:func:`gpudl.bench.row` of host wall-clock ``samples`` (seconds per call), saying what
    was ``measured``."""
    timing = Timing(tuple(samples), "wall-clock", measured != "simulated launch")
    return row(name, timing, measured=measured, **extra)


def _per_call(call: Callable[[], object], calls: int, repeats: int,
              sync: Callable[[], None]) -> list[float]:
    """Seconds per call of ``call``: the host's wall clock over ``calls`` calls, ``repeats``
    times, after one untimed call; ``sync`` waits for the device before each repeat (not
    timed)."""
    call()
    samples = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        samples.append((time.perf_counter() - start) / calls)
    sync()
    return samples


def _launchers(cases: list[str], make_array: Callable[[], object],
               make_tensor: Callable[[], torch.Tensor]) -> Iterator[tuple[str, str, Callable]]:
    """``(case, kind, launch)`` for every kind of each of ``cases``."""
    arrays = [make_array() for _ in range(4)]
    tensors = [make_tensor() for _ in range(4)]
    kept = interop.KernelArrays()
    for case in cases:
        kernel, n_arrays, n_scalars = CASES[case]
        launch = kernel[1, 1]
        scalars = _SCALARS[:n_scalars]
        for kind in KINDS if n_arrays else KINDS[:1]:
            if kind == "device arrays":
                args = (*arrays[:n_arrays], *scalars)
                yield case, kind, lambda launch=launch, args=args: launch(*args)
            elif kind == "torch tensors":
                ts = tensors[:n_arrays]
                yield case, kind, lambda launch=launch, ts=ts, s=scalars: launch(
                    *(interop.as_kernel_array(t) for t in ts), *s)
            else:
                ts = tensors[:n_arrays]
                yield case, kind, lambda launch=launch, ts=ts, s=scalars: launch(
                    *(kept.get(t) for t in ts), *s)


def measure_launches(calls: int | None = None, repeats: int | None = None,
                     measured: str | None = None, cases: list[str] | None = None) -> list[dict]:
    """One row per case (all of :data:`CASES` by default) and kind: host seconds per launch
    in this process (a GPU's full launch, the simulator's simulated one, or, in the
    compile-only child, the launch without the driver call)."""
    if measured is None:
        measured = "simulated launch" if backend.is_simulator() else "full launch"
    cases = list(CASES) if cases is None else cases
    calls = backend.pick(gpu=1000, sim=5) if calls is None else calls
    repeats = backend.pick(gpu=20, sim=3) if repeats is None else repeats
    check_choice("measured", measured, tuple(_SUFFIX))
    if isinstance(cases, str) or not isinstance(cases, list | tuple):
        raise TypeError(f"cases must be a list of case names, got {cases!r}")
    for i, case in enumerate(cases):
        check_choice(f"cases[{i}]", case, tuple(CASES))
    check_int("calls", calls, 1)
    check_int("repeats", repeats, 1)
    if measured == "launch without the driver call":
        make_array, make_tensor, sync = _fake_device_objects()
    else:
        device = interop.tensor_device()
        make_array = lambda: cuda.device_array(1024, dtype=np.float32)  # noqa: E731
        make_tensor = lambda: torch.zeros(1024, device=device)  # noqa: E731
        sync = cuda.synchronize if measured == "full launch" else (lambda: None)
    rows = []
    for case, kind, launch in _launchers(cases, make_array, make_tensor):
        n_arrays, n_scalars = CASES[case][1:]
        name = f"launch {case} ({kind})" + _SUFFIX[measured]
        rows.append(_row(name, _per_call(launch, calls, repeats, sync), measured, case=case,
                        kind=kind, arguments=n_arrays + n_scalars))
    return rows


def measure_optimizer(tensors: int = TENSORS, size: int = TENSOR_SIZE, steps: int | None = None
                      ) -> list[dict]:
    """Host seconds per ``step()`` of :class:`gpudl.optim.Adam` over ``tensors`` parameters of
    ``size`` elements, gradients in place, for the ``v4_multi_tensor`` and ``v2_fused`` variants;
    with the kernel launches on a GPU, without them on the simulator (where a launch would
    be simulated). Each row also counts the launches and the tensor-to-array conversions of
    one step after the first."""
    from gpudl import optim
    from gpudl.kernels.optim import recorded_launches

    steps = backend.pick(gpu=50, sim=10) if steps is None else steps
    for name, value in (("tensors", tensors), ("size", size), ("steps", steps)):
        check_int(name, value, 1)
    device = interop.tensor_device()
    rows = []
    for variant in ("v4_multi_tensor", "v2_fused"):
        params = [torch.nn.Parameter(torch.randn(size, device=device)) for _ in range(tensors)]
        opt = optim.Adam(params, lr=1e-3, variant=variant)
        for p in params:
            p.grad = torch.randn_like(p)
        with recorded_launches(run=not backend.is_simulator()) as launched:
            opt.step()  # the first step flattens (v4_multi_tensor) and converts
            launched.clear()
            conversions = opt.kernel_arrays.conversions
            opt.step()
            per_step = (len(launched), opt.kernel_arrays.conversions - conversions)
            sync = (lambda: None) if backend.is_simulator() else cuda.synchronize
            samples = _per_call(opt.step, 1, steps, sync)
        measured = ("host time, launches not run" if backend.is_simulator()
                    else "host time, full launches")
        rows.append(_row(f"Adam step host time ({variant}, {tensors} tensors)", samples,
                        measured, variant=variant, tensors=tensors,
                        launches_per_step=per_step[0], conversions_per_step=per_step[1]))
    return rows


# ------------------------------------------------------------------------------------------
# Without a GPU: numba-cuda's launch path, the driver calls replaced (a compile-only child)
# ------------------------------------------------------------------------------------------


class _Exported:
    """A CPU tensor exporting the ``__cuda_array_interface__`` torch exports for a CUDA
    tensor (torch's own code, without its device check), at a fake device address."""

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    @property
    def __cuda_array_interface__(self) -> dict:
        t = self.tensor
        typestr = np.dtype(str(t.dtype).removeprefix("torch.")).str
        strides = None if t.is_contiguous() else tuple(s * t.element_size()
                                                       for s in t.stride())
        return {"typestr": typestr, "shape": tuple(t.shape), "strides": strides,
                "data": (0x7F0000000000, False), "version": 2}


def _fake_device_objects() -> tuple[Callable, Callable, Callable]:
    """Stub the driver calls of numba-cuda's launch path (compile-only backend); return
    makers of device arrays and tensors, and a no-op sync."""
    from cuda.core._kernel_arg_handler import ParamHolder
    from numba.cuda import api, codegen, dispatcher
    from numba.cuda.cudadrv import devicearray, devices, driver

    from gpudl import ptx

    ptx.prepare_compiler()
    dispatcher.get_current_device = lambda: ptx.CompileTarget((9, 0))
    codegen.CUDACodeLibrary._ensure_cc = lambda self, cc: cc or (9, 0)
    codegen.CUDACodeLibrary.get_cufunc = lambda self: SimpleNamespace(kernel=None)
    dispatcher._Kernel.bind = lambda self: None
    dispatcher.launch = lambda stream, config, kernel, *args: ParamHolder(args)  # packed, not sent
    api.current_context = lambda: None
    runtime = devices._runtime

    @contextmanager
    def ensure_context():  # numba's, without asking the driver for the current context
        old = runtime._get_attached_context()
        runtime._set_attached_context(None)
        try:
            yield
        finally:
            runtime._set_attached_context(old)

    runtime.ensure_context = ensure_context

    def make_array():
        memory = driver.MemoryPointer(context=None,
                                      pointer=driver.binding.CUdeviceptr(0x7F0000000000),
                                      size=4096)
        return devicearray.DeviceNDArray((1024,), (4,), np.float32, gpu_data=memory)

    def convert(tensor, name="tensor", owned=True):
        return cuda.as_cuda_array(_Exported(tensor.detach()))

    interop.as_kernel_array = convert
    return make_array, lambda: torch.zeros(1024), lambda: None


def _without_driver(calls: int = 2000, repeats: int = 5,
                    timeout: float = 600) -> list[dict] | str:
    """The rows of a compile-only child (``"launch without the driver call"``, ``calls``
    launches per sample), or why there are none."""
    env = {**os.environ, "GPUDL_BACKEND": "compile"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, "-m", "gpudl.bench.launch", "--json",
                           "--without-driver", f"--calls={calls}", f"--repeats={repeats}"],
                          capture_output=True, text=True, env=env, timeout=timeout)
    if done.returncode:
        return f"not measured: {done.stderr.strip().splitlines()[-1]}"
    return json.loads(done.stdout)


# ------------------------------------------------------------------------------------------
# The result, in the shape shared by the team's benchmarks
# ------------------------------------------------------------------------------------------


def run(calls: int = 2000, repeats: int = 5, tensors: int = TENSORS) -> dict:
    """Every measurement of this topic on the machine it runs on: ``rows`` (no ``bars``: the
    numbers are taught, not held to a goal) and ``note``. Without a GPU the launch rows come
    from a compile-only child (``calls`` launches per sample, ``repeats`` samples); ``note``
    says why they are missing if they are. The optimizer's rows step over ``tensors``
    parameters."""
    for name, value in (("calls", calls), ("repeats", repeats), ("tensors", tensors)):
        check_int(name, value, 1)
    rows, note = [], ""
    if backend.is_simulator():
        found = _without_driver(calls, repeats)
        if isinstance(found, str):
            note = found
        else:
            rows += found
    # on the simulator one simulated launch shows what it costs: nothing about a GPU
    rows += measure_launches(cases=["empty"] if backend.is_simulator() else None)
    rows += measure_optimizer(tensors)
    return {"rows": rows, "bars": [], "note": note}


def main(argv: list[str] | None = None) -> None:
    """``python -m gpudl.bench.launch``: print the rows (as JSON with ``--json``)."""
    parser = argparse.ArgumentParser(prog="python -m gpudl.bench.launch",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--without-driver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, default=2000, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    # each row is printed as it is measured: to stderr, so that --json's stdout is JSON only
    with redirect_stdout(sys.stderr if opts.json else sys.stdout):
        if opts.without_driver:
            rows = measure_launches(calls=opts.calls, repeats=opts.repeats,
                                    measured="launch without the driver call")
        else:
            rows = run()["rows"]
    if opts.json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['name']:55} {r['median_s'] * 1e6:10.1f} us  ({r['measured']})")


if __name__ == "__main__":
    main()
