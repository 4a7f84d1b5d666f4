"""Every kernel of the book, declared beside its definition: its one name, the signatures it
is compiled for, its book section and what its results are checked against.

Book section: Chapter 2, "Reading the compiler's output: PTX and SASS" (every kernel listed by
``python -m gpudl ptx --list``, and compiled for sm_80 and sm_90 by the tests); Chapter 1,
"Occupancy" (the registers each kernel needs).

A module-level kernel is registered by a decorator written above ``@cuda.jit``::

    @registry.kernel("vector_add_v1", f"void({F1}, {F1}, {F1})",
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
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpudl.checks import check_choice, check_int

__all__ = ["F1", "F2", "F3", "F4", "I1", "KERNELS", "NO_FLOAT64", "PRECISIONS", "Kernel",
           "factory", "kernel", "kernel_modules", "load_all", "module_section"]

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


@dataclass(frozen=True)
class Kernel:
    """One registered kernel. ``builds`` are the compile jobs: ``(factory arguments or None,
    signature)``, one per signature (and, for a factory, per build)."""

    name: str
    module: str
    function: str
    builds: tuple[tuple[tuple | None, str], ...]
    section: str
    reference: str | None
    precision: str
    threads_per_block: int | None
    item: int | None = None  # which kernel of those its factory returns, where several

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
              item: int | None = None) -> None:
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
                           precision, threads_per_block, item)


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


_PACKAGE = Path(__file__).resolve().parent


def kernel_modules() -> list[str]:
    """The modules of the package whose source defines a kernel (``@cuda.jit`` that is not a
    device function) or registers one."""
    found = []
    for path in sorted(_PACKAGE.rglob("*.py")):
        if path == Path(__file__).resolve():  # its docstring shows the decorator
            continue
        text = path.read_text()
        if "registry.kernel(" in text or "registry.factory(" in text or "@cuda.jit\n" in text:
            parts = path.relative_to(_PACKAGE.parent).with_suffix("").parts
            found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def load_all() -> dict[str, Kernel]:
    """Import every module of :func:`kernel_modules` and return :data:`KERNELS`."""
    for module in kernel_modules():
        importlib.import_module(module)
    return KERNELS
