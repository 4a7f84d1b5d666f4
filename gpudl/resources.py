"""The registers, shared memory and spills of every registered kernel, as ``ptxas`` reports
them, without a GPU.

Book section: Chapter 1, "Occupancy" (the book's own kernels: the registers each thread needs
and the occupancy that allows); Chapter 2, "Reading the compiler's output: PTX and SASS".

Triton's kernels are in the same table: each build (a configuration of constexpr values,
``num_warps`` and ``num_stages``) compiled by Triton's own compiler (:mod:`gpudl.triton_ptx`)
and assembled by the ``ptxas`` Triton ships for the target. Their rows add ``num_warps`` and
``num_stages``, their ``arguments`` are the constexpr values (``"BLOCK=1024"``) and their
shared memory is what Triton allocates (dynamic shared memory, which ``ptxas`` does not see);
the table's ``"triton"`` names the versions those figures depend on. Where Triton is not
installed only the Numba kernels are compiled.

:func:`assemble_many` runs ``ptxas -v`` on PTX texts (on every core) and parses each report
into a :class:`Report`. :func:`table` gathers the reports of every build of every kernel of
:mod:`gpudl.registry` for sm_80 and sm_90 into the JSON stored as
``gpudl/kernel_resources.json``: deterministic for one CUDA version (``ptxas`` names it), and
checked against a fresh compile by ``tests/test_kernels_compile.py``. Regenerate it with
``python -m gpudl.resources > gpudl/kernel_resources.json``. :func:`load` reads it back.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gpudl import ptx, registry, triton_ptx

__all__ = ["RESOURCES", "TARGETS", "Report", "parse", "assemble_many", "version", "jobs",
           "compile_all", "table", "load", "threads_per_block", "main"]

#: Where the table is stored (next to the package's code, so that an installed package has it)
RESOURCES = Path(__file__).resolve().parent / "kernel_resources.json"
#: The targets the table holds, an A100's sm_80 and an H100's or H200's sm_90.
TARGETS = [(8, 0), (9, 0)]


@dataclass(frozen=True)
class Report:
    """What ``ptxas -v`` says of a kernel's entry function."""

    registers: int
    shared_bytes: int
    local_bytes: int
    spill_stores: int
    spill_loads: int


def _number(pattern: str, text: str) -> int:
    found = re.search(pattern, text)
    return int(found.group(1)) if found else 0


def parse(text: str) -> Report:
    """The :class:`Report` of the (one) entry function in ``ptxas -v``'s output ``text``."""
    if "Compiling entry function" not in text:
        raise ValueError("text must be ptxas -v output for a kernel (no entry function in it)")
    entry = text[text.index("Compiling entry function"):]
    used = re.search(r"Used (\d+) registers[^\n]*", entry)
    if used is None:
        raise ValueError("ptxas's report names no register count")
    line = used.group(0)
    return Report(int(used.group(1)), _number(r"(\d+) bytes smem", line),
                  _number(r"(\d+) bytes lmem", line),
                  _number(r"(\d+) bytes spill stores", entry),
                  _number(r"(\d+) bytes spill loads", entry))


def assemble_many(texts: list[str], ccs: list[tuple[int, int]]) -> list[Report]:
    """``ptxas -v`` of each PTX text for its compute capability (one per text), on every core."""
    if len(texts) != len(ccs):
        raise ValueError(f"texts and ccs must have one entry each, got {len(texts)} and "
                         f"{len(ccs)}")
    with ThreadPoolExecutor() as pool:
        return [parse(out) for out in pool.map(ptx.ptxas, texts, ccs)]


def version() -> str:
    """The release of the ``ptxas`` found (``13.0, V13.0.88``); ``ToolkitMissing`` without."""
    exe = ptx.find_tool("ptxas")
    if exe is None:
        raise ptx.ToolkitMissing("ptxas not found (the nvidia-cuda-nvcc wheel, or a CUDA "
                                 "toolkit, has it)")
    out = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                         check=True).stdout
    found = re.search(r"release ([^\n]+)", out)
    return found.group(1).strip() if found else out.strip().splitlines()[-1]


def jobs() -> list[tuple[str, tuple | None, str]]:
    """``(name, factory arguments or None, signature)`` of every build of every kernel, by
    name (the order in which modules registered them depends on what was imported first)."""
    return [(name, args, signature) for name, entry in sorted(registry.load_all().items())
            for args, signature in entry.builds]


def compile_all() -> dict:
    """Every build of every kernel (:func:`jobs`; a Triton kernel's only where Triton is
    installed) compiled for each of :data:`TARGETS` and assembled: ``{"jobs": [...], "texts":
    {cc: [PTX per job]}, "reports": [Report per target, then per job], "triton": {cc: [what
    Triton decided, or None for a Numba kernel, per job]}}``. ``ToolkitMissing`` without
    NVVM, libdevice or ptxas."""
    kernels = registry.load_all()
    builds = [job for job in jobs() if kernels[job[0]].kind == "numba"
              or triton_ptx.installed()]
    numba = [j for j, (n, _, _) in enumerate(builds) if kernels[n].kind == "numba"]
    tiled = [j for j, (n, _, _) in enumerate(builds) if kernels[n].kind == "triton"]
    texts = ptx.compile_for_targets(
        [(kernels[n].module, kernels[n].function, s, a, kernels[n].item)
         for n, a, s in (builds[j] for j in numba)], TARGETS)
    reports = assemble_many([t for cc in TARGETS for t in texts[cc]],
                            [cc for cc in TARGETS for _ in numba])
    merged = {cc: [None] * len(builds) for cc in TARGETS}
    flat: list[Report | None] = [None] * (len(TARGETS) * len(builds))
    meta: dict = {cc: [None] * len(builds) for cc in TARGETS}
    for i, cc in enumerate(TARGETS):
        for k, j in enumerate(numba):
            merged[cc][j] = texts[cc][k]
            flat[i * len(builds) + j] = reports[i * len(numba) + k]
    if tiled:
        made = triton_ptx.compile_for_targets(
            [(kernels[n].module, kernels[n].function, s, a)
             for n, a, s in (builds[j] for j in tiled)], TARGETS)
        with ThreadPoolExecutor() as pool:
            outs = list(pool.map(triton_ptx.assemble, [m["ptx"] for cc in TARGETS
                                                       for m in made[cc]],
                                 [cc for cc in TARGETS for _ in tiled]))
        for i, cc in enumerate(TARGETS):
            for k, j in enumerate(tiled):
                merged[cc][j] = made[cc][k]["ptx"]
                meta[cc][j] = made[cc][k]
                flat[i * len(builds) + j] = parse(outs[i * len(tiled) + k])
    return {"jobs": builds, "texts": merged, "reports": flat, "triton": meta}


def table(compiled: dict | None = None) -> dict:
    """The stored table: ``{"ptxas": version, "triton": Triton's versions (None without it),
    "kernels": [one row per build]}``, each row with ``kernel``, ``arguments`` (a factory's,
    a Triton kernel's constexpr values as ``"NAME=value"``, or None), ``signature`` and, per
    target (``"sm_80"``, ``"sm_90"``), ``registers`` and ``shared_bytes``; a Triton kernel's
    rows also ``num_warps`` and ``num_stages``. From ``compiled`` (:func:`compile_all`'s
    result), or a fresh :func:`compile_all`."""
    reports = compile_all() if compiled is None else compiled
    builds, flat = reports["jobs"], reports["reports"]
    rows = []
    for j, (name, args, signature) in enumerate(builds):
        meta = [reports["triton"][cc][j] for cc in TARGETS]
        if meta[0] is None:
            row = {"kernel": name, "arguments": None if args is None else list(args),
                   "signature": signature}
        else:
            row = {"kernel": name, "arguments": [f"{k}={v}" for k, v in args
                                                 if k not in ("num_warps", "num_stages")],
                   "signature": signature, "num_warps": meta[0]["num_warps"],
                   "num_stages": meta[0]["num_stages"]}
        for i, (major, minor) in enumerate(TARGETS):
            report = flat[i * len(builds) + j]
            shared = report.shared_bytes if meta[i] is None else meta[i]["shared_bytes"]
            row[f"sm_{major}{minor}"] = {"registers": report.registers, "shared_bytes": shared}
        rows.append(row)
    tiled = triton_ptx.version(TARGETS) if any(m is not None for m in
                                               reports["triton"][TARGETS[0]]) else None
    return {"ptxas": version(), "triton": tiled, "kernels": rows}


def threads_per_block(row: dict, entry: registry.Kernel) -> int | None:
    """The threads per block of a stored row's build: a Triton build's ``num_warps`` warps,
    else the block size its kernel declares (None where it declares none)."""
    return 32 * row["num_warps"] if "num_warps" in row else entry.threads_per_block


def load() -> dict:
    """The stored table (:data:`RESOURCES`)."""
    return json.loads(RESOURCES.read_text())


def main() -> int:
    """``python -m gpudl.resources``: print the table as JSON (2 if the compiler is missing)."""
    try:
        print(json.dumps(table(), indent=1))
    except ptx.ToolkitMissing as error:
        print(f"cannot compile: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
