"""The PTX of the book's kernels for a GPU (sm_90 by default), compiled without one.

Book section: Chapter 2, "Reading the compiler's output: PTX and SASS" (a kernel's loads and
stores in its PTX),
and Chapter 8, "A warp-level mma from Numba" (the ``mma.sync`` instruction in a kernel's PTX).

``python -m gpudl ptx KERNEL`` prints the PTX that numba-cuda generates for one of the kernels
registered in :mod:`gpudl.registry` (``--list`` names them), for compute capability 9.0 (an
H100 or H200) or the one given with ``--cc``; for a Triton kernel, the PTX Triton's compiler
generates for its first build (:mod:`gpudl.triton_ptx`; ``sm_90a`` for 9.0). PTX is the
GPU's virtual instruction set: the loads (``ld.global``), stores (``st.global``), their
width (``.f32``, ``.v4.f32``) and the index arithmetic can be read there before any GPU runs
the kernel. ``--memory`` keeps only the loads, stores and atomics, ``--body`` only the
instructions, ``--counts`` counts each instruction (what a Triton kernel's PTX holds that a
hand-written one does not: ``cp.async``, ``ldmatrix``, ``mma``, ``wgmma``). PTX is not what
the GPU runs: the assembler ``ptxas`` turns it into the machine code (SASS) and schedules it
anew; ``--sass`` prints that too, where ``ptxas`` and ``nvdisasm`` are installed.

Compiling needs numba's real CUDA target and the CUDA compiler pieces (NVVM and libdevice, from
a CUDA toolkit or the ``nvidia-*`` wheels that ``pip install -e '.[gpu]'`` brings), but no GPU
and no driver: :mod:`gpudl.backend`'s ``compile`` backend. On the simulator the command runs
itself in a child process with ``GPUDL_BACKEND=compile``. Two lookups that numba-cuda makes
through libraries a compile does not need (the architectures NVRTC supports, and libdevice
found through the NVRTC search) fall back to the toolkit's own files when those libraries are
missing. Without NVVM or libdevice the command says so and exits with status 2.

From Python, :func:`ptx` and :func:`ptx_many` compile registered kernels by name (their first
signature);
:func:`compile_ptx` and :func:`compile_many` any kernel, given its module, name and signature
(and, for a kernel built by a factory, the factory's arguments); :func:`ptxas` assembles PTX to
report registers, shared memory and spills.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudl import backend, registry, triton_ptx
from gpudl.checks import (
    OneLineArgumentParser,
    check_choice,
    check_compute_capability,
    check_positive,
)

__all__ = ["kernels", "CompileTarget", "ToolkitMissing", "prepare_compiler", "find_libdevice",
           "find_tool", "available", "compile_ptx", "compile_many", "compile_for_targets", "ptx",
           "ptx_many", "ptxas", "sass", "body", "memory_instructions", "instruction_counts",
           "main"]

#: A compile job: the kernel's module, its name, its signature, the arguments of the factory
#: that builds it (None for a kernel defined at module level) and, optionally, which of the
#: kernels the factory returns (an index, where it returns several; None otherwise).
Job = tuple

_DEFAULT_CC = (9, 0)
# The targets CUDA 13's NVVM compiles for, used when NVRTC (which numba-cuda asks) is absent.
_CUDA13_CCS = [(7, 5), (8, 0), (8, 6), (8, 7), (8, 9), (9, 0), (10, 0), (10, 3), (11, 0),
               (12, 0), (12, 1)]


class ToolkitMissing(RuntimeError):
    """NVVM or libdevice, which compiling to PTX needs, cannot be found."""


def find_libdevice() -> Path | None:
    """``libdevice.10.bc`` from ``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda`` or the
    ``nvidia-nvvm`` wheel (numba-cuda's own lookup), or None."""
    candidates = [Path(os.environ[v]) / "nvvm" / "libdevice" / "libdevice.10.bc"
                  for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    candidates.append(Path("/usr/local/cuda/nvvm/libdevice/libdevice.10.bc"))
    try:
        from numba.cuda.cuda_paths import get_libdevice_wheel_path

        wheel = get_libdevice_wheel_path()
        if wheel:
            candidates.append(Path(wheel))
    except Exception:  # noqa: BLE001  (any failure of the lookup means: not found there)
        pass
    return next((c for c in candidates if c.is_file()), None)


def find_tool(name: str) -> Path | None:
    """A CUDA command-line tool (``ptxas``, ``nvdisasm``) on ``PATH`` or in the ``bin`` of
    ``CUDA_HOME``, ``CUDA_PATH`` or ``/usr/local/cuda``, or None."""
    found = shutil.which(name)
    if found:
        return Path(found)
    homes = [os.environ.get(v) for v in ("CUDA_HOME", "CUDA_PATH")] + ["/usr/local/cuda"]
    return next((Path(h) / "bin" / name for h in homes
                 if h and (Path(h) / "bin" / name).is_file()), None)


def sass(text: str, cc: tuple[int, int] = _DEFAULT_CC) -> str:
    """The machine code (SASS) that ``ptxas`` makes of the PTX ``text`` for ``cc``, as
    ``nvdisasm`` prints it. ``ToolkitMissing`` if either tool is not installed."""
    major, minor = check_compute_capability("cc", cc)
    tools = {name: find_tool(name) for name in ("ptxas", "nvdisasm")}
    missing = [name for name, path in tools.items() if path is None]
    if missing:
        raise ToolkitMissing(f"{' and '.join(missing)} not found (the nvidia-cuda-nvcc and "
                             "nvidia-cuda-nvdisasm wheels, or a CUDA toolkit, have them)")
    with tempfile.TemporaryDirectory() as tmp:
        source, binary = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        source.write_text(text)
        subprocess.run([str(tools["ptxas"]), f"-arch=sm_{major}{minor}", str(source), "-o",
                        str(binary)], check=True, capture_output=True, text=True)
        return subprocess.run([str(tools["nvdisasm"]), "-c", str(binary)], check=True,
                              capture_output=True, text=True).stdout


def prepare_compiler() -> None:
    """Point numba-cuda's driver- and NVRTC-dependent lookups at the toolkit's files."""
    from numba.cuda.cudadrv import libs, nvrtc, nvvm

    try:
        nvvm.NVVM()
    except Exception as error:
        raise ToolkitMissing(f"NVVM (libnvvm) was not found: {error}") from None
    try:
        nvrtc.get_supported_ccs()
    except Exception:  # noqa: BLE001  (no NVRTC: CUDA 13's list of targets)
        nvrtc.get_supported_ccs = lambda: list(_CUDA13_CCS)
    try:
        libs.get_libdevice()
    except Exception:  # noqa: BLE001  (numba's lookup needs NVRTC: search the toolkit)
        path = find_libdevice()
        if path is None:
            raise ToolkitMissing("libdevice.10.bc was not found (set CUDA_HOME to a CUDA "
                                 "toolkit)") from None
        libs.get_libdevice = nvvm.get_libdevice = lambda: str(path)
        libs.open_libdevice = nvvm.open_libdevice = path.read_bytes


class CompileTarget:
    """What numba-cuda asks of the current device when it compiles a device function."""

    def __init__(self, cc: tuple[int, int]) -> None:
        self.compute_capability = cc


def available() -> bool:
    """Whether kernels can be compiled to PTX here: on a GPU (numba-cuda finds its own
    compiler pieces), or where libdevice (and with it NVVM) is installed."""
    return not backend.is_simulator() or find_libdevice() is not None


def _compile(job: Job, cc: tuple[int, int]) -> str:
    from numba import cuda
    from numba.cuda import dispatcher

    if backend.name() == "compile":  # no driver to ask which device device functions target
        dispatcher.get_current_device = lambda: CompileTarget(cc)
    module, function, signature, args, item = job
    kernel = getattr(importlib.import_module(module), function)
    if hasattr(kernel, "arg_names"):  # a Triton kernel: Triton's compiler, its configuration
        return triton_ptx.compile_build((module, function, signature, args), cc)["ptx"]
    if args is not None:
        kernel = kernel(*args)
    if item is not None:
        kernel = kernel[item]
    text, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc)
    return text


def compile_many(jobs: list[Job], cc: tuple[int, int] = _DEFAULT_CC,
                 timeout: float = 600) -> list[str]:
    """The PTX of each ``(module, name, signature, factory arguments[, item])`` job for compute
    capability ``cc``. On the simulator one child process compiles them all, on numba's
    real CUDA target. ``ToolkitMissing`` without NVVM or libdevice."""
    return compile_for_targets(jobs, [cc], timeout)[check_compute_capability("cc", cc)]


def compile_for_targets(jobs: list[Job], ccs: list[tuple[int, int]],
                        timeout: float = 600) -> dict[tuple[int, int], list[str]]:
    """:func:`compile_many` for each compute capability of ``ccs`` (in one child process on
    the simulator): ``{cc: [PTX of each job]}``."""
    if not isinstance(ccs, list | tuple) or not ccs:
        raise TypeError(f"ccs must be a non-empty list of compute capabilities, got {ccs!r}")
    ccs = [check_compute_capability(f"ccs[{i}]", cc) for i, cc in enumerate(ccs)]
    check_positive("timeout", timeout)
    jobs = [(job[0], job[1], job[2], None if job[3] is None else tuple(job[3]),
             job[4] if len(job) > 4 else None) for job in jobs]
    if not backend.is_simulator():
        prepare_compiler()
        return {cc: [_compile(job, cc) for job in jobs] for cc in ccs}
    done = backend.compile_in_child("gpudl.ptx", jobs, ccs, timeout)
    if done.returncode == 2:
        raise ToolkitMissing(done.stderr.strip().splitlines()[-1])
    if done.returncode:
        raise RuntimeError(f"compiling to PTX failed:\n{done.stderr[-3000:]}")
    return dict(zip(ccs, json.loads(done.stdout), strict=True))


def compile_ptx(module: str, name: str, signature: str, cc: tuple[int, int] = _DEFAULT_CC,
                args: tuple | None = None) -> str:
    """The PTX of kernel ``module.name`` (or, with ``args``, of the kernel that the factory
    ``module.name(*args)`` builds) for ``signature`` and compute capability ``cc``."""
    return compile_many([(module, name, signature, args)], cc)[0]


def kernels() -> dict[str, registry.Kernel]:
    """Every registered kernel (:func:`gpudl.registry.load_all`), by name."""
    return registry.load_all()


def _first_job(name: str) -> Job:
    entry = kernels()[name]
    args, signature = entry.builds[0]
    return entry.module, entry.function, signature, args, entry.item


def ptx_many(names: list[str], cc: tuple[int, int] = _DEFAULT_CC,
             timeout: float = 600) -> dict[str, str]:
    """The PTX of each registered kernel in ``names`` (its first signature) for ``cc``."""
    check_compute_capability("cc", cc)
    check_positive("timeout", timeout)
    if not isinstance(names, list | tuple):
        raise TypeError(f"names must be a list of kernel names, got {names!r}")
    for i, name in enumerate(names):
        check_choice(f"names[{i}]", name, sorted(kernels()))
    texts = compile_many([_first_job(name) for name in names], cc, timeout)
    return dict(zip(names, texts, strict=True))


def ptx(name: str, cc: tuple[int, int] = _DEFAULT_CC) -> str:
    """The PTX of the registered kernel ``name`` for ``cc``."""
    check_choice("name", name, sorted(kernels()))
    return ptx_many([name], cc)[name]


def ptxas(text: str, cc: tuple[int, int] = _DEFAULT_CC) -> str:
    """Assemble the PTX ``text`` for ``sm_<cc>`` with ``ptxas -v`` and return its report
    (registers, shared memory, spills). ``ToolkitMissing`` without ``ptxas``;
    ``RuntimeError`` if it refuses the PTX."""
    major, minor = check_compute_capability("cc", cc)
    exe = find_tool("ptxas")
    if exe is None:
        raise ToolkitMissing("ptxas not found (the nvidia-cuda-nvcc wheel, or a CUDA toolkit, "
                             "has it)")
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(text)
        done = subprocess.run([str(exe), f"-arch=sm_{major}{minor}", "-v", str(source), "-o",
                               str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ptxas refused the PTX:\n{done.stderr[-3000:]}")
    return done.stderr + done.stdout


def body(text: str) -> list[str]:
    """The instructions of a PTX kernel: the lines of its body (up to the brace that closes
    it: Triton's PTX goes on with debug sections), without the parameter loads,
    declarations, line markers (``.loc``) and blank lines."""
    lines = text[text.index("{", text.index(".entry")):].splitlines()
    depth, end = 0, len(lines)
    for i, line in enumerate(lines):
        depth += {"{": 1, "}": -1}.get(line.strip(), 0)
        if depth == 0:
            end = i
            break
    kept = [line.strip() for line in lines[1:end]]
    return [line for line in kept
            if line and not line.startswith((".reg", "ld.param", "//", ".loc"))]


_MEMORY = re.compile(r"^(@%p\d+ )?(ld|st|atom|red)\.(global|shared)")


def memory_instructions(text: str) -> list[str]:
    """The global and shared-memory loads, stores and atomics of a PTX kernel, in order,
    with operands (``ld.global.f32 %f1, [%rd14];``)."""
    return [line for line in body(text) if _MEMORY.match(line)]


def instruction_counts(text: str) -> list[tuple[int, str]]:
    """``(count, instruction)`` for each instruction of a PTX kernel's body (its full name
    with its modifiers, ``ld.global.v4.b32``; a predicate ``@%p1`` dropped), most frequent
    first, then by name. Labels and braces are not instructions."""
    counts: dict[str, int] = {}
    for line in body(text):
        words = line.split()
        if words[0].startswith("@"):
            words = words[1:]
        if not words or words[0].endswith(":") or words[0] in ("{", "}"):
            continue
        op = words[0].rstrip(";")
        counts[op] = counts.get(op, 0) + 1
    return sorted(((n, op) for op, n in counts.items()), key=lambda c: (-c[0], c[1]))


def main(argv: list[str] | None = None) -> int:
    """``python -m gpudl ptx``: print a kernel's PTX (or, with ``--json``, several as JSON)."""
    parser = OneLineArgumentParser(prog="python -m gpudl ptx",
                                     description="Print a kernel's PTX, compiled without a GPU.")
    parser.add_argument("kernels", nargs="*", help="registered kernels (--list names them)")
    parser.add_argument("--cc", default="9.0", help="compute capability (default 9.0)")
    parser.add_argument("--list", action="store_true", help="list the kernels and exit")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--memory", action="store_true",
                       help="print only the loads, stores and atomics")
    shown.add_argument("--body", action="store_true", help="print only the instructions")
    shown.add_argument("--counts", action="store_true",
                       help="print how many times each instruction occurs")
    shown.add_argument("--sass", action="store_true",
                       help="print the machine code ptxas makes of it (needs nvdisasm)")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--jobs", help=argparse.SUPPRESS)  # compile_many's child: JSON out
    opts = parser.parse_args(argv)
    if opts.list:
        for name, entry in sorted(kernels().items()):
            print(f"{name:36} {entry.module}.{entry.function}  {entry.signatures[0]}")
        return 0
    if not opts.kernels and not opts.jobs:
        parser.error("name a kernel (--list lists them)")
    if opts.jobs:  # the child of compile_for_targets: --cc lists the targets
        targets = [tuple(int(p) for p in cc.split(".")) for cc in opts.cc.split(",")]
        try:
            texts = compile_for_targets(json.loads(opts.jobs), targets)
        except (ToolkitMissing, ModuleNotFoundError) as error:
            print(f"cannot compile to PTX: {error}", file=sys.stderr)
            return 2
        print(json.dumps([texts[cc] for cc in targets]))
        return 0
    try:
        major, minor = (int(part) for part in opts.cc.split("."))
    except ValueError:
        parser.error(f"--cc must be MAJOR.MINOR, such as 9.0, got {opts.cc!r}")
    try:
        texts = ptx_many(opts.kernels, (major, minor))
    except ModuleNotFoundError as error:  # a Triton kernel without Triton
        print(f"cannot compile to PTX: {error}", file=sys.stderr)
        return 2
    except ToolkitMissing as error:
        print(f"cannot compile to PTX: {error}. Install the CUDA compiler pieces "
              "(pip install -e '.[gpu]' or '.[gpu-cu13]') or a CUDA toolkit, and set "
              "CUDA_HOME to it.", file=sys.stderr)
        return 2
    except ValueError as error:
        parser.error(str(error))
    if opts.json:
        print(json.dumps(texts))
        return 0
    for name, text in texts.items():
        if len(texts) > 1 or opts.memory or opts.body or opts.counts:
            print(f"// {name} (sm_{major}{minor})")
        if opts.sass:
            try:
                print(sass(text, (major, minor)))
            except ToolkitMissing as error:
                print(f"cannot show the SASS: {error}", file=sys.stderr)
                return 2
        elif opts.memory or opts.body:
            print("\n".join(memory_instructions(text) if opts.memory else body(text)))
        elif opts.counts:
            print("\n".join(f"{n:5} {op}" for n, op in instruction_counts(text)))
        else:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
