"""The registers, shared memory and spills of every registered kernel, as ``ptxas`` reports
them, without a GPU.

Book section: Chapter 1, "Occupancy" (the book's own kernels: the registers each thread needs
and the occupancy that allows); Chapter 2, "Reading the compiler's output: PTX and SASS".

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

from gpudl import ptx, registry

__all__ = ["RESOURCES", "TARGETS", "Report", "parse", "assemble_many", "version", "jobs",
           "compile_all", "table", "load", "main"]

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
    """Every build of every kernel (:func:`jobs`) compiled for each of :data:`TARGETS` and
    assembled: ``{"jobs": [...], "texts": {cc: [PTX per job]}, "reports": [Report per
    target, then per job]}``. ``ToolkitMissing`` without NVVM, libdevice or ptxas."""
    kernels, builds = registry.load_all(), jobs()
    texts = ptx.compile_for_targets(
        [(kernels[n].module, kernels[n].function, s, a, kernels[n].item) for n, a, s in builds],
        TARGETS)
    reports = assemble_many([t for cc in TARGETS for t in texts[cc]],
                            [cc for cc in TARGETS for _ in builds])
    return {"jobs": builds, "texts": texts, "reports": reports}


def table(compiled: dict | None = None) -> dict:
    """The stored table: ``{"ptxas": version, "kernels": [one row per build]}``, each row with
    ``kernel``, ``arguments`` (a factory's, or None), ``signature`` and, per target
    (``"sm_80"``, ``"sm_90"``), ``registers`` and ``shared_bytes``. From ``compiled``
    (:func:`compile_all`'s result), or a fresh :func:`compile_all`."""
    reports = compile_all() if compiled is None else compiled
    builds, flat = reports["jobs"], reports["reports"]
    rows = []
    for j, (name, args, signature) in enumerate(builds):
        row = {"kernel": name, "arguments": None if args is None else list(args),
               "signature": signature}
        for i, (major, minor) in enumerate(TARGETS):
            report = flat[i * len(builds) + j]
            row[f"sm_{major}{minor}"] = {"registers": report.registers,
                                         "shared_bytes": report.shared_bytes}
        rows.append(row)
    return {"ptxas": version(), "kernels": rows}


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
