"""Every kernel of the book, declared beside its definition: its one name, the signatures it
is compiled for, its book section and what its results are checked against.

Book section: Chapter 2, "Reading the compiler's output: PTX and SASS" (every kernel listed by
``python -m gpudl ptx --list``, and compiled for sm_80 and sm_90 by the tests); Chapter 1,
"Occupancy" (the registers each kernel needs).

A module-level kernel is registered by a decorator written above ``@cuda.jit``::

    @registry.kernel("vector_add_v1_naive", f"void({F1}, {F1}, {F1})",
                     reference="gpudl.kernels.elementwise.reference_vector_add")
    @cuda.jit
    def v1_naive(a, b, out): ...

Its book section is the one its module's docstring names ("Book section: ..."), unless
``section=`` says otherwise.

A kernel that a factory builds (its shared-memory shapes are compile-time constants) is
registered on the factory, with the factory's arguments for each build
(:func:`factory`). :data:`KERNELS` holds what the imported modules have registered;
:func:`load_all` imports every module of the package that defines a kernel, so that the
table is complete. ``tests/test_kernels_compile.py`` compiles every entry for sm_80 and sm_90
and fails on a ``@cuda.jit`` kernel under ``gpudl/`` that is not registered.

The versions of one operation that a chapter improves step by step (vector add v1 to v4) are
*variants*: each is declared on its host launcher with :func:`variant`, under its family
(``"vector_add"``) and its key ``vN_what`` (``"v2_grid_stride"``). Its one name, the one the
book, the benchmark rows and the PTX listing use, is ``<family>_<key>``
(``vector_add_v2_grid_stride``), the name of the kernel it launches. A module's ``VARIANTS``
table is :func:`variants` of its family, so no second list exists::

    @registry.variant("vector_add", "v2_grid_stride", bytes_per_element=12,
                      flops_per_element=1)
    def launch_v2_grid_stride(a, b, out, threads_per_block): ...

    VARIANTS = registry.variants("vector_add")

A Triton kernel (:mod:`gpudl.kernels.tiles`) is an entry of its own kind, registered with
:func:`triton_kernel` above ``@triton.jit``: its builds are its configurations (the values of
its ``tl.constexpr`` parameters, ``num_warps`` and ``num_stages``) times its signatures, which
Triton's own compiler compiles (:mod:`gpudl.triton_ptx`). A variant that launches one is
declared with ``requires="triton"``: where that package is not installed the variant is absent
from its family (:data:`ABSENT` keeps its record, so that the numbering holds), and
:func:`check_variant` refuses it naming the package.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudl.checks import check_choice, check_int, check_real

__all__ = ["ABSENT", "F1", "F2", "F3", "F4", "I1", "KERNELS", "KINDS", "NO_FLOAT64", "PRECISIONS",
           "VARIANT_KEY", "Kernel", "Variant", "check_variant", "factory", "installed", "kernel",
           "kernel_modules", "load_all", "module_section", "triton_kernel", "variant",
           "variant_records", "variants"]

#: Signature spellings of the arrays most kernels take (contiguous float32 of 1 to 4
#: dimensions, and contiguous int32 vectors).
F1, F2, F3, F4 = "float32[::1]", "float32[:, ::1]", "float32[:, :, ::1]", "float32[:, :, :, ::1]"
I1 = "int32[::1]"

#: What a kernel computes in, one of "float32" (its PTX holds no float64 instruction),
#: "float16" or "bfloat16" (its data in that format, bfloat16 as int16 bits, arithmetic in
#: it or in float32: no float64 instruction either), "float64" (a float64 twin, or an exact
#: check) or "integer" (bits and counts only). The floating-point names are those of
#: :data:`gpudl.checks.FLOAT_DTYPES`, with which its host function checks and allocates.
PRECISIONS = ("float32", "float16", "bfloat16", "float64", "integer")
#: The precisions whose kernels' PTX must hold no float64 instruction (``.f64``).
NO_FLOAT64 = ("float32", "float16", "bfloat16")
#: The two kinds of kernel, Numba-CUDA's (``@cuda.jit``) and Triton's (``@triton.jit``).
KINDS = ("numba", "triton")


@dataclass(frozen=True)
class Kernel:
    """One registered kernel. ``builds`` are the compile jobs: ``(factory arguments or None,
    signature)``, one per signature (and, for a factory, per build); for a Triton kernel
    (``kind`` ``"triton"``) the arguments are its configuration, ``((name, value), ...)``."""

    name: str
    module: str
    function: str
    builds: tuple[tuple[tuple | None, str], ...]
    section: str
    reference: str | None
    precision: str
    threads_per_block: int | None
    item: int | None = None  # which kernel of those its factory returns, where several
    kind: str = "numba"

    @property
    def signatures(self) -> tuple[str, ...]:
        """The distinct signatures the kernel is compiled for."""
        return tuple(dict.fromkeys(signature for _, signature in self.builds))


#: Name -> :class:`Kernel`, in the order the modules registered them.
KERNELS: dict[str, Kernel] = {}


def module_section(module: str) -> str | None:
    """The "Book section: ..." paragraph of module ``module``'s docstring (whitespace joined),
    or None."""
    doc = getattr(sys.modules.get(module), "__doc__", None) or ""
    found = re.search(r"Book section:\s*(.+?)(?:\n\s*\n|$)", doc, re.S)
    return " ".join(found.group(1).split()) if found else None


def _register(name: str, module: str, function: str, builds: list, section: str | None,
              reference: str | None, precision: str, threads_per_block: int | None,
              item: int | None = None, kind: str = "numba") -> None:
    section = module_section(module) if section is None else section
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__} {name!r}")
    if not name.isidentifier():
        raise ValueError(f"name must be an identifier (one name per kernel), got {name!r}")
    if threads_per_block is not None:
        check_int("threads_per_block", threads_per_block, 1, 1024)
    if item is not None:
        check_int("item", item, 0)
    if reference is not None and not (isinstance(reference, str) and "." in reference):
        raise TypeError(f"reference must be a function's dotted name (a str), got {reference!r}")
    if not builds:
        raise ValueError(f"kernel {name!r}: give at least one signature")
    for _, signature in builds:
        if not isinstance(signature, str) or "(" not in signature:
            raise ValueError(f"kernel {name!r}: a signature must read 'void(...)', got "
                             f"{signature!r}")
    if not isinstance(section, str) or not section:
        raise ValueError(f"kernel {name!r}: section must name the book section (or the "
                         "module's docstring, in a 'Book section:' paragraph)")
    check_choice("precision", precision, PRECISIONS)
    known = KERNELS.get(name)
    if known is not None and (known.module, known.function) != (module, function):
        raise ValueError(f"kernel name {name!r} is taken by {known.module}.{known.function}")
    KERNELS[name] = Kernel(name, module, function, tuple(builds), section, reference,
                           precision, threads_per_block, item, kind)


def kernel(name: str, *signatures: str, section: str | None = None, reference: str | None = None,
           precision: str = "float32", threads_per_block: int | None = None) -> Callable:
    """Register the ``@cuda.jit`` kernel the decorator is written above, compiled for each of
    ``signatures``; ``threads_per_block``: the block size the book launches it with on a GPU."""

    def register(compiled):
        py_func = getattr(compiled, "py_func", None) or getattr(compiled, "fn", None)
        if py_func is None:
            raise TypeError(f"kernel {name!r}: write @registry.kernel above @cuda.jit")
        _register(name, py_func.__module__, py_func.__name__,
                  [(None, s) for s in signatures], section, reference, precision,
                  threads_per_block)
        return compiled

    return register


def factory(name: str, builds: Sequence[tuple[tuple, str]], *, section: str | None = None,
            reference: str | None = None, precision: str = "float32",
            threads_per_block: int | None = None, item: int | None = None) -> Callable:
    """Register a function that builds a kernel: ``builds`` holds ``(arguments,
    signature)`` pairs, the kernel ``function(*arguments)`` (or, with ``item``, the kernel
    ``function(*arguments)[item]`` of several it returns) compiled for ``signature``."""

    def register(function):
        _register(name, function.__module__, function.__name__,
                  [(tuple(args), signature) for args, signature in builds], section,
                  reference, precision, threads_per_block, item)
        return function

    return register


#: The ``num_warps`` a Triton configuration may ask for.
_WARPS = (1, 2, 4, 8, 16, 32)


def _triton_config(name: str, config: object) -> tuple[tuple[str, object], ...]:
    """A Triton build's configuration as ``((name, value), ...)``: its constexpr values, then
    ``num_warps`` (required) and ``num_stages`` (3, Triton's default, unless given)."""
    if not isinstance(config, dict):
        raise TypeError(f"kernel {name!r}: a configuration must be a dict, got {config!r}")
    config = dict(config)
    warps = check_choice(f"kernel {name!r}: num_warps", config.pop("num_warps", None), _WARPS)
    stages = check_int(f"kernel {name!r}: num_stages", config.pop("num_stages", 3), 1, 8)
    for key, value in config.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise ValueError(f"kernel {name!r}: a constexpr's name must be an identifier, got "
                             f"{key!r}")
        if not isinstance(value, bool | int | str):
            raise TypeError(f"kernel {name!r}: constexpr {key} must be an int, a bool or a str,"
                            f" got {value!r}")
    return (*config.items(), ("num_warps", warps), ("num_stages", stages))


def triton_kernel(name: str, *signatures: str, configs: Sequence[dict],
                  section: str | None = None, reference: str | None = None,
                  precision: str = "float32") -> Callable:
    """Register the ``@triton.jit`` kernel the decorator is written above, compiled for each of
    ``signatures`` (its parameters that are not ``tl.constexpr``, in order, in Triton's
    spelling: ``"(*fp32:16, *fp32:16, i32)"``, ``:16`` where a launch's pointer or integer is
    a multiple of 16, as Triton specializes it) at each configuration of ``configs``, the
    first being the one the book launches on a GPU (its ``num_warps`` sets
    ``threads_per_block``)."""
    if isinstance(configs, dict | str) or not isinstance(configs, Sequence) or not configs:
        raise TypeError(f"kernel {name!r}: configs must be a non-empty list of dicts, got "
                        f"{configs!r}")

    def register(jitted):
        function = getattr(jitted, "fn", jitted)  # Triton's JITFunction, or the bare function
        if not callable(function) or not hasattr(function, "__module__"):
            raise TypeError(f"kernel {name!r}: write @registry.triton_kernel above @triton.jit")
        builds = [(_triton_config(name, config), signature) for config in configs
                  for signature in signatures]
        for _, signature in builds:
            if not (isinstance(signature, str) and signature.startswith("(")
                    and signature.endswith(")")):
                raise ValueError(f"kernel {name!r}: a Triton signature must read '(*fp32:16, "
                                 f"..., i32)', got {signature!r}")
        warps = dict(builds[0][0])["num_warps"]
        _register(name, function.__module__, function.__name__, builds, section, reference,
                  precision, 32 * warps, kind="triton")
        return jitted

    return register


#: The key of a variant, its version number and what it changes (``v2_grid_stride``).
VARIANT_KEY = re.compile(r"v[1-9][0-9]*_[a-z0-9]+(?:_[a-z0-9]+)*")


@dataclass(frozen=True)
class Variant:
    """One version of an operation (:func:`variant`). ``bytes_per_element`` and
    ``flops_per_element``: the bytes it moves to and from global memory and the flops it does
    per element of its output (a reduction: of its input), the figures its benchmark row's
    bandwidth and rate use; None where the count is not per element."""

    family: str
    key: str
    launch: Callable
    kernels: tuple[str, ...]
    bytes_per_element: float | None
    flops_per_element: float | None
    requires: str | None = None  # a package it needs ("triton")

    @property
    def name(self) -> str:
        """The variant's one name, ``<family>_<key>``."""
        return f"{self.family}_{self.key}"

    @property
    def kind(self) -> str:
        """The kind of its kernels (:data:`KINDS`): ``"numba"`` or ``"triton"``."""
        found = {KERNELS[k].kind for k in self.kernels if k in KERNELS}
        if len(found) != 1 or any(k not in KERNELS for k in self.kernels):
            raise ValueError(f"variant {self.name}: its kernels {list(self.kernels)} must be "
                             f"registered, of one kind, got {sorted(found)}")
        return found.pop()

    @property
    def precision(self) -> str:
        """The precision its kernels declare (:data:`PRECISIONS`): the format of the arrays
        its host function checks and allocates."""
        found = {KERNELS[k].precision for k in self.kernels if k in KERNELS}
        if len(found) != 1 or any(k not in KERNELS for k in self.kernels):
            raise ValueError(f"variant {self.name}: its kernels {list(self.kernels)} must be "
                             f"registered with one precision, got {sorted(found)}")
        return found.pop()


#: Family -> key -> :class:`Variant`, in the order the modules declared them.
VARIANTS: dict[str, dict[str, Variant]] = {}
#: Family -> key -> :class:`Variant`, of the variants left out because the package they
#: require is not installed here (a Triton variant without ``triton``).
ABSENT: dict[str, dict[str, Variant]] = {}
#: The packages a variant may require, and how to install them.
_INSTALL = {"triton": "pip install triton==3.9.0, on Linux x86_64; a CUDA build of torch "
                      "brings it"}


def installed(package: str) -> bool:
    """Whether ``package`` (one a variant may require: ``"triton"``) can be imported here."""
    check_choice("package", package, _INSTALL)
    return importlib.util.find_spec(package) is not None


def variant(family: str, key: str, *, kernels: Sequence[str] | None = None,
            bytes_per_element: float | None = None,
            flops_per_element: float | None = None, requires: str | None = None) -> Callable:
    """Declare the host launcher the decorator is written above as variant ``key`` of
    ``family``. ``kernels``: the registered kernels it launches (by default the one named
    ``<family>_<key>``). Keys are numbered in order: a family's n-th variant is ``vn_...``.
    ``requires``: a package it needs (``"triton"``); where it is not installed, the variant
    is left out of the family and kept in :data:`ABSENT`."""
    if requires is not None:
        check_choice("requires", requires, _INSTALL)
    for label, value in (("family", family), ("key", key)):
        if not isinstance(value, str):
            raise TypeError(f"{label} must be a str, got {type(value).__name__} {value!r}")
    if not family.isidentifier():
        raise ValueError(f"family must be an identifier, got {family!r}")
    if VARIANT_KEY.fullmatch(key) is None:
        raise ValueError(f"key must read 'vN_what' (v2_grid_stride), got {key!r}")
    names = (f"{family}_{key}",) if kernels is None else tuple(kernels)
    if not names or not all(isinstance(k, str) and k.isidentifier() for k in names):
        raise ValueError(f"kernels must be registered kernel names, got {kernels!r}")
    for label, value in (("bytes_per_element", bytes_per_element),
                         ("flops_per_element", flops_per_element)):
        if value is not None:
            check_real(label, value, 0)

    def register(launch: Callable) -> Callable:
        if not callable(launch):
            raise TypeError(f"variant {family}_{key}: write @registry.variant above a launcher")
        table = VARIANTS.get(family, {})
        known = table.get(key)
        absent = ABSENT.get(family, {})
        if known is None and key not in absent:
            expected = f"v{len(table) + len(absent) + 1}_"
            if not key.startswith(expected):
                raise ValueError(f"variant {family}_{key}: the next key of {family!r} must "
                                 f"start with {expected!r}")
        elif known is not None and _where(known.launch) != _where(launch):
            raise ValueError(f"variant {family}_{key} is taken by {_where(known.launch)}")
        record = Variant(family, key, launch, names, bytes_per_element, flops_per_element,
                         requires)
        if requires is not None and not installed(requires):
            ABSENT[family] = absent | {key: record}
            VARIANTS.setdefault(family, {})
            return launch
        VARIANTS[family] = table | {key: record}
        return launch

    return register


def _where(launch: Callable) -> str:
    """Where a launcher is defined (a ``functools.partial``: where its function is)."""
    function = getattr(launch, "func", launch)
    return f"{function.__module__}.{getattr(function, '__qualname__', function)}"


def variant_records(family: str) -> dict[str, Variant]:
    """Key -> :class:`Variant` of ``family``, in order (``KeyError`` naming the families)."""
    if family not in VARIANTS:
        raise KeyError(f"family must be one of {sorted(VARIANTS)}, got {family!r}")
    return dict(VARIANTS[family])


def variants(family: str) -> dict[str, Callable]:
    """Key -> launcher of ``family``, in order: the ``VARIANTS`` table of its module."""
    return {key: v.launch for key, v in variant_records(family).items()}


def check_variant(family: str, variant: object, choices: Iterable[str]) -> str:
    """``variant`` if it is one of ``choices`` (the module's ``VARIANTS``), as
    :func:`gpudl.checks.check_choice` checks it; a variant of ``family`` left out because
    the package it requires is not installed (:data:`ABSENT`) is a ``ModuleNotFoundError``
    naming the package and how to install it."""
    absent = ABSENT.get(family, {}).get(variant) if isinstance(variant, str) else None
    if absent is not None:
        raise ModuleNotFoundError(f"variant {absent.name} needs the package "
                                  f"{absent.requires!r}, which is not installed here "
                                  f"({_INSTALL[absent.requires]})", name=absent.requires)
    return check_choice("variant", variant, choices)


_PACKAGE = Path(__file__).resolve().parent


def kernel_modules() -> list[str]:
    """The modules of the package whose source defines a kernel (``@cuda.jit`` that is not a
    device function, or ``@triton.jit``) or registers one."""
    found = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        if path == Path(__file__).resolve():  # its docstring shows the decorator
            continue
        text = path.read_text()
        if any(mark in text for mark in ("registry.kernel(", "registry.factory(", "@cuda.jit\n",
                                         "registry.triton_kernel(", "@triton.jit\n")):
            parts = path.relative_to(_PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def load_all() -> dict[str, Kernel]:
    """Import every module of :func:`kernel_modules` and return :data:`KERNELS`."""
    for module in kernel_modules():
        importlib.import_module(module)
    return KERNELS
