"""The PTX, registers, spills and shared memory of the book's Triton kernels, compiled by
Triton's own compiler for a GPU, without one.

Book section: Chapter 10, "A matmul of tiles" and "What the compiler takes over" (what Triton
emits that a hand-written kernel does not, and the registers and shared memory it gives each
kernel); Chapter 1, "Occupancy" (the registers each kernel needs).

A Triton kernel registered with :func:`gpudl.registry.triton_kernel` has builds made of a
configuration (its ``tl.constexpr`` values, ``num_warps`` and ``num_stages``) and a signature
(``"(*fp32:16, *fp32:16, i32)"``: each parameter that is not a constexpr, ``:16`` where the
launches the book makes pass a pointer or an integer that is a multiple of 16, which Triton
specializes on). :func:`compile_build` hands one build to ``triton.compile`` for a target
(``sm_80``; ``sm_90`` is compiled as Triton compiles for an H100, ``sm_90a``) and returns its
PTX and what Triton decided (``num_warps``, ``num_stages``, the shared memory it allocates);
:func:`assemble` runs the ``ptxas`` Triton ships, the one that makes its cubin for that
target, with ``-v`` on that PTX (registers, spills). On the simulator the compile runs in a
child process with ``GPUDL_BACKEND=compile``, where ``@triton.jit`` gives Triton's compiler
rather than its interpreter (:func:`compile_for_targets`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from gpudl import backend, registry
from gpudl.checks import OneLineArgumentParser, check_compute_capability, check_positive

__all__ = ["installed", "parse_signature", "compile_build", "compile_for_targets",
           "ptxas_path", "assemble", "version", "main"]

#: A compile job: the kernel's module, its function, its signature and its configuration,
#: ``((name, value), ...)``, as :data:`gpudl.registry.KERNELS` holds them.
Job = tuple


def installed() -> bool:
    """Whether Triton, and with it its compiler and its ``ptxas``, is installed here."""
    return registry.installed("triton")


def _require() -> None:
    if not installed():
        raise ModuleNotFoundError("compiling a Triton kernel needs the package 'triton', which "
                                  "is not installed here (pip install triton==3.9.0, on Linux "
                                  "x86_64)", name="triton")


def parse_signature(signature: str) -> list[tuple[str, bool]]:
    """``[(type, divisible by 16), ...]`` of a Triton signature ``"(*fp32:16, i32)"``."""
    if not (isinstance(signature, str) and signature.startswith("(")
            and signature.endswith(")")):
        raise ValueError(f"signature must read '(*fp32:16, ..., i32)', got {signature!r}")
    parts = [p.strip() for p in signature[1:-1].split(",") if p.strip()]
    return [(p.removesuffix(":16"), p.endswith(":16")) for p in parts]


def _target(cc: tuple[int, int]) -> object:
    from triton.backends.compiler import GPUTarget

    major, minor = cc
    return GPUTarget("cuda", 10 * major + minor, 32)


def compile_build(job: Job, cc: tuple[int, int]) -> dict:
    """The build ``job`` compiled by Triton for ``cc`` (on the ``compile`` backend or a GPU):
    ``{"ptx", "num_warps", "num_stages", "shared_bytes"}``."""
    import triton

    module, function, signature, config = job
    kernel = getattr(importlib.import_module(module), function)
    config = dict(config)
    options = {"num_warps": config.pop("num_warps"), "num_stages": config.pop("num_stages")}
    params = [name for name in kernel.arg_names if name not in config]
    types = parse_signature(signature)
    if len(params) != len(types):
        raise ValueError(f"{module}.{function}: signature {signature} has {len(types)} types "
                         f"for its {len(params)} parameters {params}")
    spec = {name: kind for name, (kind, _) in zip(params, types, strict=True)}
    spec |= {name: "constexpr" for name in config}
    attrs = {(kernel.arg_names.index(name),): [["tt.divisibility", 16]]
             for name, (_, divisible) in zip(params, types, strict=True) if divisible}
    source = triton.compiler.ASTSource(fn=kernel, signature=spec, constexprs=config,
                                       attrs=attrs)
    compiled = triton.compile(source, target=_target(cc), options=options)
    meta = compiled.metadata
    return {"ptx": compiled.asm["ptx"], "num_warps": meta.num_warps,
            "num_stages": meta.num_stages, "shared_bytes": meta.shared}


def compile_for_targets(jobs: list[Job], ccs: list[tuple[int, int]],
                        timeout: float = 900) -> dict[tuple[int, int], list[dict]]:
    """:func:`compile_build` of each job for each compute capability of ``ccs``: ``{cc: [one
    dict per job]}``; on the simulator in one child process on the ``compile`` backend.
    ``ModuleNotFoundError`` without Triton."""
    if not isinstance(ccs, list | tuple) or not ccs:
        raise TypeError(f"ccs must be a non-empty list of compute capabilities, got {ccs!r}")
    ccs = [check_compute_capability(f"ccs[{i}]", cc) for i, cc in enumerate(ccs)]
    check_positive("timeout", timeout)
    _require()
    jobs = [(m, f, s, tuple(tuple(pair) for pair in c)) for m, f, s, c in jobs]
    if not backend.is_simulator():
        return {cc: [compile_build(job, cc) for job in jobs] for cc in ccs}
    done = backend.compile_in_child("gpudl.triton_ptx", jobs, ccs, timeout)
    if done.returncode:
        raise RuntimeError(f"compiling with Triton failed:\n{done.stderr[-3000:]}")
    return dict(zip(ccs, json.loads(done.stdout), strict=True))


def ptxas_path(cc: tuple[int, int]) -> str:
    """The ``ptxas`` Triton assembles its PTX for ``cc`` with (it ships two)."""
    major, minor = check_compute_capability("cc", cc)
    _require()
    from triton.backends.nvidia.compiler import get_ptxas

    return get_ptxas(10 * major + minor).path


def assemble(text: str, cc: tuple[int, int]) -> str:
    """``ptxas -v``'s report on Triton's PTX ``text`` for ``cc``, with the options Triton's own
    assembly uses (``-lineinfo``, ``--regAllocOptLevel=2``), so that the registers and
    spills are those of the cubin Triton loads."""
    exe = ptxas_path(cc)
    arch = "sm_90a" if tuple(cc) == (9, 0) else f"sm_{cc[0]}{cc[1]}"
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "kernel.ptx"
        source.write_text(text)
        done = subprocess.run([exe, "-lineinfo", "-v", "--regAllocOptLevel=2",
                               f"--gpu-name={arch}", str(source), "-o",
                               str(Path(tmp) / "kernel.cubin")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ptxas refused Triton's PTX:\n{done.stderr[-3000:]}")
    return done.stderr + done.stdout


def version(ccs: list[tuple[int, int]]) -> dict:
    """Triton's version and, per target of ``ccs`` (``"sm_80"``), the release of the ``ptxas``
    it assembles with: what the registers stored for its kernels depend on."""
    paths = {f"sm_{cc[0]}{cc[1]}": ptxas_path(cc) for cc in ccs}
    import triton

    releases = {}
    for target, path in paths.items():
        out = subprocess.run([path, "--version"], capture_output=True, text=True,
                             check=True).stdout
        releases[target] = out.strip().splitlines()[-2].split("release ")[-1]
    return {"triton": triton.__version__, "ptxas": releases}


def main(argv: list[str] | None = None) -> int:
    """The child of :func:`compile_for_targets`: ``--jobs`` JSON in, a JSON list (one list of
    builds per target of ``--cc``) out."""
    parser = OneLineArgumentParser(prog="python -m gpudl.triton_ptx",
                                   description=argparse.SUPPRESS)
    parser.add_argument("--jobs", required=True)
    parser.add_argument("--cc", required=True)
    opts = parser.parse_args(argv)
    targets = [tuple(int(p) for p in cc.split(".")) for cc in opts.cc.split(",")]
    texts = compile_for_targets(json.loads(opts.jobs), targets)
    print(json.dumps([texts[cc] for cc in targets]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
