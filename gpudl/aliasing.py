"""One memory passed twice to a kernel that writes it: refused on the simulator.

Book section: appendix D, "One memory, passed twice" (why the simulator and a GPU could
disagree, and the check that keeps them in step).

On a GPU a kernel's array arguments are pointers: two arguments that name the same memory are
one memory, and a write through one is seen through the other. The simulator has no device
memory. It copies every NumPy array argument in before the kernel runs and back out after it,
one argument after the other, so two arguments that share memory become two copies, and the
copy written back last wins: a kernel that writes ``p`` while ``p`` is also passed as an unused
``buf`` leaves ``p`` unchanged on the simulator and updated on a GPU. The same code would give
two answers.

:func:`check_launch` finds such launches before they run. Which arguments a kernel may write is
read from its source (:func:`written_parameters`): an element assigned (``x[i] = ...``,
``x[i] += ...``), an atomic on it (``cuda.atomic.add(x, ...)``), or the array handed to a
device function that writes it, or to anything else (counted as a write, to be safe).
:mod:`gpudl.backend` calls it before every simulated launch, so every kernel of the book is
guarded without a change to its launcher.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import textwrap
from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import numpy as np

from gpudl.checks import check_callable, is_device_array

__all__ = ["AliasedArgumentsError", "written_parameters", "check_launch"]


class AliasedArgumentsError(ValueError):
    """A launch passes one memory as two arguments and the kernel writes one of them."""


def _base_name(node: ast.AST) -> str | None:
    """The name an element access starts from: ``x`` for ``x[i]``, ``x[i][j]``, ``x[i, j]``."""
    while isinstance(node, ast.Subscript):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _store_targets(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, ast.AugAssign | ast.AnnAssign):
        targets = [node.target]
    else:
        return []
    flat: list[ast.AST] = []
    while targets:
        t = targets.pop()
        if isinstance(t, ast.Tuple | ast.List):
            targets.extend(t.elts)
        else:
            flat.append(t)
    return flat


def _callee(func: Callable, call: ast.Call) -> Callable | None:
    """The device function a call names, if it is one found in ``func``'s globals."""
    if not isinstance(call.func, ast.Name):
        return None
    target = func.__globals__.get(call.func.id)
    return getattr(target, "py_func", None) or getattr(target, "fn", None)


def _reads_only(func: Callable, call: ast.Call) -> bool:
    """True for calls that cannot write an array they are given: ``cuda.*`` other than the
    atomics, Python's builtins (``len``, ``range``, ``min``) and numba's types and
    functions (``float32(x)``)."""
    if isinstance(call.func, ast.Attribute):
        return _is_cuda_attribute(call.func) and "atomic" not in ast.unparse(call.func)
    if not isinstance(call.func, ast.Name):
        return False
    name = call.func.id
    if name not in func.__globals__:
        return hasattr(builtins, name)
    return type(func.__globals__[name]).__module__.startswith("numba.core")


@cache
def written_parameters(func: Callable) -> frozenset[str]:
    """The parameters of the kernel (or device function) ``func`` that it may write.

    Read from the source: an element store, an augmented store, a ``cuda.atomic`` call on the
    array, or a call that receives the array (a device function's own writes are followed; any
    other callee counts as writing). Local names bound to a parameter or to a slice of one
    (``row = x[i]``) count as that parameter. Without source, every parameter counts."""
    check_callable("func", func)
    params = list(inspect.signature(func).parameters)
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(func)))
    except (OSError, TypeError, SyntaxError):
        return frozenset(params)
    alias = {p: p for p in params}
    nodes = list(ast.walk(tree))
    for node in nodes:  # local views of a parameter: row = x[i], y = x
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(
                node.targets[0], ast.Name):
            base = _base_name(node.value)
            if base in alias:
                alias[node.targets[0].id] = alias[base]
    written: set[str] = set()
    for node in nodes:
        for target in _store_targets(node):
            if isinstance(target, ast.Subscript) and _base_name(target) in alias:
                written.add(alias[_base_name(target)])
        if not isinstance(node, ast.Call):
            continue
        if _reads_only(func, node):
            continue
        callee = _callee(func, node)
        callee_params = list(inspect.signature(callee).parameters) if callee else []
        callee_writes = written_parameters(callee) if callee else frozenset()
        for position, arg in enumerate(node.args):
            if not isinstance(arg, ast.Name) or arg.id not in alias:
                continue  # an element (x[i]) or an expression is a value, not the array
            # cuda.atomic.add(x, i, v), an unknown callee, or a device function that writes
            # the parameter it receives the array as
            if callee is None or (position < len(callee_params)
                                  and callee_params[position] in callee_writes):
                written.add(alias[arg.id])
    return frozenset(written & set(params))


def _is_cuda_attribute(node: ast.Attribute) -> bool:
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name) and node.id == "cuda"


def _memories(arg: Any) -> list[tuple[np.ndarray, bool]]:
    """``(host view of the memory, copied by the simulator?)`` for each array in a launch
    argument: a NumPy array is copied in and out, a simulated device array and the arrays of
    a tuple are passed as they are."""
    if isinstance(arg, np.ndarray) and arg.ndim > 0:
        return [(arg, True)]
    inner = getattr(arg, "_ary", None)
    if is_device_array(arg) and isinstance(inner, np.ndarray):
        return [(inner, False)]
    if isinstance(arg, tuple | list):
        return [(m, False) for item in arg for m, _ in _memories(item)]
    return []


def check_launch(func: Callable, args: Sequence[Any]) -> None:
    """Raise :class:`AliasedArgumentsError` if two array arguments of a simulated launch of
    ``func`` share memory, at least one of them is a NumPy array (which the simulator copies
    in and out) and ``func`` writes either. The message names the kernel and both
    parameters."""
    names = list(inspect.signature(check_callable("func", func)).parameters)
    arrays = [(names[i] if i < len(names) else f"argument {i}", i, memory, copied)
              for i, arg in enumerate(args) for memory, copied in _memories(arg)]
    if len(arrays) < 2:
        return
    written = written_parameters(func)
    for k, (name_a, i, a, a_copied) in enumerate(arrays):
        for name_b, j, b, b_copied in arrays[k + 1:]:
            if not (a_copied or b_copied) or not ({name_a, name_b} & written):
                continue
            if np.shares_memory(a, b):
                raise AliasedArgumentsError(
                    f"kernel {func.__name__!r} is given the same memory as {name_a!r} "
                    f"(argument {i}) and {name_b!r} (argument {j}), and it writes "
                    f"{sorted({name_a, name_b} & written)}. The simulator copies each "
                    "NumPy argument in and out, so one copy's writes would be lost, while a "
                    "GPU would see one memory: pass distinct arrays.")
