"""Which CUDA compiler pieces numba-cuda uses here, whether this machine's driver can run what
they make, and which to install for it: ``python -m gpudl toolchain [--install]``.

Book section: *Preface, "Three ways to use this book"* (the labs' first cell runs it on Colab) and
README, "Running on a GPU".

numba-cuda 0.30.4 compiles a kernel with NVVM and links it. Where it finds nvJitLink 12.3 or
newer it compiles to LTO-IR and nvJitLink links a cubin on this machine, which the driver only
loads; without nvJitLink the driver's own linker compiles NVVM's PTX. A cubin from nvJitLink
of CUDA N loads on any driver of CUDA N or later (CUDA's minor-version compatibility: from
the 525 series for CUDA 12, the 580 series for CUDA 13); PTX needs a driver at least as new
as its ISA version; and nvJitLink must be at least as new as the NVVM whose output it links.
CONTRIBUTING.md ("Which driver runs the kernels") gives the lines of numba-cuda's source this
rests on.

:func:`facts` gathers what this machine has, :func:`verdict` says in one line whether it
works (``OK: ...``) or what to change (``MISMATCH: ...``), and :func:`install_requirements`
is what pip adds for a driver: gpudl's ``gpu`` (CUDA 12) or ``gpu-cu13`` extra, following the
CUDA of an installed torch, with NVVM held to the nvJitLink that torch pinned.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from importlib import metadata

from gpudl import backend
from gpudl.checks import OneLineArgumentParser, check_instance

__all__ = ["Toolchain", "MINIMUM_DRIVER", "driver_cuda", "gpu_and_driver", "installed_nvjitlink",
           "install_requirements", "ptx_cuda", "facts", "verdict", "report", "smoke_test",
           "main"]

#: The first driver series of each CUDA major version. Every driver from it on loads a cubin
#: that a toolkit of that major version made (the CUDA Compatibility guide's table).
MINIMUM_DRIVER = {12: 525, 13: 580}
#: The wheel that holds nvJitLink, per CUDA major version (what torch's CUDA builds pin).
_NVJITLINK_WHEELS = {12: "nvidia-nvjitlink-cu12", 13: "nvidia-nvjitlink"}
_EXTRAS = {12: "gpu", 13: "gpu-cu13"}

Version = tuple[int, int]


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """What numba-cuda compiles and links with here. ``driver_cuda``: the newest CUDA the
    driver runs (None: no driver); ``nvjitlink``: the nvJitLink numba-cuda links with (None:
    none, the driver links); ``ptx_isa``: the PTX ISA version NVVM writes and ``ptx_cuda`` the
    CUDA version that reads it (None: no NVVM, ``nvvm_error`` says why)."""

    gpu: str | None
    driver: str | None
    driver_cuda: Version | None
    nvjitlink: Version | None
    ptx_isa: str | None
    ptx_cuda: Version | None
    nvvm_error: str | None = None


def driver_cuda() -> Version | None:
    """The newest CUDA version the installed driver runs (``cuDriverGetVersion``), or None."""
    lib = backend.libcuda()
    version = ctypes.c_int(0)
    if lib is None or lib.cuDriverGetVersion(ctypes.byref(version)) != 0 or not version.value:
        return None
    return version.value // 1000, version.value % 1000 // 10


def gpu_and_driver() -> tuple[str | None, str | None]:
    """The first GPU's name and the driver's version, as ``nvidia-smi`` reports them."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version",
                              "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    first = out.strip().splitlines()[:1]
    name, _, driver = first[0].rpartition(", ") if first else ("", "", "")
    return name or None, driver or None


def installed_nvjitlink() -> dict[int, Version | None]:
    """CUDA major version -> the version of its nvJitLink wheel installed here (None: none)."""
    found = {}
    for major, wheel in _NVJITLINK_WHEELS.items():
        try:
            parts = metadata.version(wheel).split(".")
        except metadata.PackageNotFoundError:
            found[major] = None
            continue
        found[major] = int(parts[0]), int(parts[1])
    return found


def _extra_requirements(extra: str) -> list[str]:
    """gpudl's requirements for ``extra``, markers dropped: from its installed metadata, or,
    where gpudl runs from a checkout it was not installed from (``PYTHONPATH``, as on a lent
    GPU machine), from the pyproject.toml beside the package."""
    from packaging.requirements import Requirement

    try:
        lines = metadata.requires("gpudl") or []
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml")
                                .read_text())["project"]
        return list(project["optional-dependencies"][extra])
    found = []
    for line in lines:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": extra}):
            requirement.marker = None
            found.append(str(requirement))
    return found


def install_requirements(cuda: Version, nvjitlink: Mapping[int, Version | None],
                         requirements: Mapping[str, list[str]] | None = None) -> list[str]:
    """What pip installs for a driver that runs CUDA ``cuda``, given the nvJitLink wheels
    installed already (``nvjitlink``: CUDA major version -> version, as a CUDA build of torch
    pins one): gpudl's ``gpu`` extra (CUDA 12) or ``gpu-cu13`` (CUDA 13), the major version of
    the newest nvJitLink installed that the driver runs, else the driver's own (13 for a newer
    one: a cubin loads on any later driver). That keeps torch's pins (its CUDA 12 builds pin
    cuda-bindings 12 as well). NVVM is then held to that nvJitLink's minor version
    (``cuda-toolkit==X.Y.*``): nvJitLink links only what an NVVM no newer than itself wrote.
    ``requirements`` maps an extra to its requirements (default: gpudl's installed metadata)."""
    cuda = tuple(check_instance("cuda", cuda, tuple))
    if len(cuda) != 2 or cuda[0] < 12:
        raise ValueError(f"cuda must be a CUDA version (12, x) or newer, as a driver of the "
                         f"{MINIMUM_DRIVER[12]} series or later runs; got {cuda!r}")
    runs = [m for m, version in nvjitlink.items() if version and m in _EXTRAS and m <= cuda[0]]
    major = max(runs) if runs else min(cuda[0], 13)
    extra = _EXTRAS[major]
    found = (requirements or {}).get(extra) or _extra_requirements(extra)
    pinned = nvjitlink.get(major)
    return found + ([f"cuda-toolkit=={pinned[0]}.{pinned[1]}.*"] if pinned else [])


def ptx_cuda(isa: str) -> Version | None:
    """The CUDA version that first reads PTX ISA ``isa`` (cuda-bindings' table), or None (a
    cuda-bindings 12 does not know CUDA 13's PTX)."""
    try:
        from cuda.bindings.utils import get_minimal_required_cuda_ver_from_ptx_ver
        version = get_minimal_required_cuda_ver_from_ptx_ver(isa)
    except (ImportError, ValueError):
        return None
    return version // 1000, version % 1000 // 10


def _empty() -> None:
    """The kernel whose PTX shows which ISA version NVVM writes."""


def _compiled_facts() -> dict:
    """nvJitLink and NVVM, as numba-cuda's real CUDA target finds them (on a GPU or with the
    ``compile`` backend)."""
    from gpudl import ptx

    out: dict = {"nvjitlink": None, "ptx_isa": None, "nvvm_error": None}
    from numba.cuda.cudadrv import driver  # numba-cuda turns LTO on when this finds nvJitLink

    if driver._have_nvjitlink():
        from cuda.bindings import nvjitlink

        out["nvjitlink"] = tuple(nvjitlink.version())[:2]
    try:
        from numba import cuda

        ptx.prepare_compiler()
        cc = (cuda.get_current_device().compute_capability if backend.name() == "cuda"
              else (9, 0))
        text, _ = cuda.compile_ptx(_empty, "void()", cc=cc)
        out["ptx_isa"] = re.search(r"^\.version\s+(\d+\.\d+)", text, re.M).group(1)
    except Exception as error:  # noqa: BLE001  (whatever NVVM says is the fact to report)
        out["nvvm_error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return out


def facts() -> Toolchain:
    """What this machine has. On the simulator the compiler facts come from a child process
    on numba-cuda's real target (``GPUDL_BACKEND=compile``)."""
    if backend.is_simulator():
        env = {**os.environ, "GPUDL_BACKEND": "compile"}
        done = subprocess.run([sys.executable, "-m", "gpudl.toolchain", "--compiled-json"],
                              capture_output=True, text=True, env=env, timeout=300)
        if done.returncode:
            raise RuntimeError(f"the compiler check failed:\n{done.stderr[-2000:]}")
        compiled = json.loads(done.stdout)
    else:
        compiled = _compiled_facts()
    gpu, driver = gpu_and_driver()
    nvjitlink = tuple(compiled["nvjitlink"]) if compiled["nvjitlink"] else None
    isa = compiled["ptx_isa"]
    return Toolchain(gpu=gpu, driver=driver, driver_cuda=driver_cuda(), nvjitlink=nvjitlink,
                     ptx_isa=isa, ptx_cuda=ptx_cuda(isa) if isa else None,
                     nvvm_error=compiled["nvvm_error"])


def _v(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def verdict(t: Toolchain) -> str:
    """One line: ``OK: ...`` when the driver can run what numba-cuda makes here, ``MISMATCH:
    ...`` with what to change, ``NO GPU: ...`` without a driver."""
    check_instance("t", t, Toolchain)
    if t.driver_cuda is None:
        return ("NO GPU: no CUDA driver here, so the kernels run on Numba's CUDA simulator (on "
                "Colab: Runtime > Change runtime type > a GPU)")
    extra = _EXTRAS[min(max(t.driver_cuda[0], 12), 13)]
    driver = f"this driver runs CUDA {_v(t.driver_cuda)}"
    if t.driver_cuda[0] < 12:
        return (f"MISMATCH: numba-cuda 0.30 needs a driver of CUDA 12 or later (the "
                f"{MINIMUM_DRIVER[12]} series on); {driver}")
    if t.ptx_isa is None:
        return (f"MISMATCH: numba-cuda finds no NVVM ({t.nvvm_error}): install gpudl[{extra}] "
                f"(python -m gpudl toolchain --install)")
    isa = f"NVVM writes PTX ISA {t.ptx_isa}" + (
        f" (CUDA {_v(t.ptx_cuda)})" if t.ptx_cuda else "")
    if t.nvjitlink is None:
        if t.ptx_cuda is None or t.driver_cuda < t.ptx_cuda:
            return (f"MISMATCH: without nvJitLink the driver compiles the PTX itself, but {isa} "
                    f"and {driver} (CUDA_ERROR_UNSUPPORTED_PTX_VERSION at the first kernel): "
                    f"install gpudl[{extra}], which brings nvJitLink")
        return f"OK: {isa}, which the driver compiles itself: {driver}"
    linker = f"nvJitLink {_v(t.nvjitlink)}"
    if t.ptx_cuda is not None and t.nvjitlink < t.ptx_cuda:
        return (f"MISMATCH: {isa}, newer than {linker} can link: hold NVVM to it with pip "
                f"install 'cuda-toolkit=={_v(t.nvjitlink)}.*'")
    if t.nvjitlink[0] > t.driver_cuda[0]:
        return (f"MISMATCH: {linker} links cubins for CUDA {t.nvjitlink[0]} and {driver}: "
                f"install gpudl[{extra}] instead, or a driver of the "
                f"{MINIMUM_DRIVER[t.nvjitlink[0]]} series or later")
    return (f"OK: {linker} links each kernel into a cubin on this machine, which any driver "
            f"of CUDA {t.nvjitlink[0]} or later loads (the {MINIMUM_DRIVER[t.nvjitlink[0]]} "
            f"series on); {driver}")


def smoke_test() -> str:
    """Compile, link, load and run one of the book's kernels (a vector add of 3 elements)
    and check its sum: the first kernel, as a lab launches it. One line."""
    import numpy as np

    from gpudl.kernels.elementwise import vector_add

    try:
        out = vector_add(np.arange(3, dtype=np.float32), np.ones(3, dtype=np.float32))
    except Exception as error:  # noqa: BLE001  (the first line of any failure is the fact)
        return f"the first kernel failed: {type(error).__name__}: {str(error).splitlines()[0]}"
    ok = np.array_equal(out, np.arange(1, 4, dtype=np.float32))
    return f"the first kernel ran ({backend.name()}): vector_add {'correct' if ok else 'WRONG'}"


def report(t: Toolchain) -> list[str]:
    """The lines ``python -m gpudl toolchain`` prints."""
    check_instance("t", t, Toolchain)
    gpu = (f"GPU: {t.gpu or 'unknown'}, driver {t.driver or 'unknown'}, which runs CUDA "
           f"{_v(t.driver_cuda)} and older" if t.driver_cuda else "GPU: none (no CUDA driver)")
    nvvm = (f"NVVM: writes PTX ISA {t.ptx_isa}" + (f", which CUDA {_v(t.ptx_cuda)} and later "
                                                   "read" if t.ptx_cuda else "")
            if t.ptx_isa else f"NVVM: not usable ({t.nvvm_error})")
    linker = (f"nvJitLink: {_v(t.nvjitlink)} (numba-cuda links with it, LTO on)" if t.nvjitlink
              else "nvJitLink: none (the driver links, from PTX)")
    return [gpu, nvvm, linker, verdict(t)]


def _install() -> int:
    cuda = driver_cuda()
    gpu, driver = gpu_and_driver()
    if cuda is None:
        print("GPU: none (no CUDA driver): nothing to install; the kernels run on Numba's CUDA "
              "simulator", flush=True)
        return 0
    print(f"GPU: {gpu}, driver {driver}, which runs CUDA {_v(cuda)} and older", flush=True)
    if cuda[0] < 12:
        print(verdict(Toolchain(gpu, driver, cuda, None, None, None)), flush=True)
        return 1
    wanted = install_requirements(cuda, installed_nvjitlink())
    print("installing:", " ".join(wanted), flush=True)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *wanted])
    return done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m gpudl toolchain",
                                   description=__doc__.split("\n\n")[0])
    parser.add_argument("--install", action="store_true",
                        help="first install the CUDA pieces (gpudl's gpu or gpu-cu13 extra) "
                             "that suit this driver")
    parser.add_argument("--compiled-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.compiled_json:
        print(json.dumps(_compiled_facts()))
        return 0
    if args.install:  # then a new process: one that imported numba before pip ran is stale
        return _install() or subprocess.run([sys.executable, "-m", "gpudl", "toolchain"]).returncode
    t = facts()
    print("\n".join(report(t)), flush=True)
    if t.driver_cuda is not None and not backend.is_simulator():
        print(smoke_test(), flush=True)
    return 0 if verdict(t).startswith(("OK", "NO GPU")) else 1


if __name__ == "__main__":
    sys.exit(main())
