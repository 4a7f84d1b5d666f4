"""The suite generated from the API table (tests/api_table.py): every public callable of gpudl
(every name in every ``__all__``, and the public methods of its classes) has an entry, and every
numeric, array and choice parameter an entry lists refuses each bad value of its kind with the
right error (``TypeError`` for the wrong type, ``ValueError`` for a wrong value) naming the
parameter, before any launch or process start; hypothesis draws more bad values. Raw kernels
refuse a launch beyond CUDA's limits, naming themselves."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest
from api_table import TABLE, resolve
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gpudl

#: Modules with no ``__all__``: entry points and packages that only hold modules, and the
#: exercise solutions (tested by tests/test_solutions*.py).
WITHOUT_ALL = ("gpudl.__main__", "gpudl.kernels", "gpudl.parallel", "gpudl.solutions")


def _modules() -> list[str]:
    return sorted(m.name for m in pkgutil.walk_packages(gpudl.__path__, "gpudl."))


def _key(obj: object, module: str, name: str) -> str:
    """Where ``obj`` is defined, or, for a private function bound to a public name on one
    backend (``gpudl.kernels.wide.load4``), the public name."""
    owner = getattr(obj, "py_func", None) or getattr(obj, "fn", None) or obj
    qualname = getattr(owner, "__qualname__", name)
    if qualname.split(".")[-1].startswith("_"):
        return f"{module}.{name}"
    return f"{getattr(owner, '__module__', module)}.{qualname}"


def public_callables() -> set[str]:
    """The key (defining module and qualified name) of every callable in every ``__all__`` of
    gpudl, and of every public method a gpudl class defines itself."""
    keys = set()
    for module_name in _modules():
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not callable(obj):
                continue
            key = _key(obj, module_name, name)
            keys.add(key)
            if inspect.isclass(obj) and obj.__module__.startswith("gpudl"):
                # a function the class defines itself: not the wrapper of a parent's method that
                # torch.optim puts on a subclass when one is built (AdamW.step, Adam.step's)
                keys |= {f"{key}.{m}" for m, v in vars(obj).items() if not m.startswith("_")
                         and ((inspect.isfunction(v)
                               and v.__qualname__.rsplit(".", 1)[0] == obj.__qualname__)
                              or isinstance(v, staticmethod | classmethod))}
    return keys


def test_every_module_has_an_all():
    missing = [m for m in _modules() if not hasattr(importlib.import_module(m), "__all__")
               and not m.endswith(".__main__") and not m.startswith(WITHOUT_ALL)]
    assert not missing, f"modules without __all__ (the table is built from them): {missing}"


def test_every_public_callable_has_an_entry():
    missing = sorted(public_callables() - set(TABLE))
    assert not missing, (f"public callables without an entry in tests/api_table.py: {missing}"
                         " (list their numeric, array and choice parameters there)")


def test_every_entry_names_a_public_callable():
    stale = sorted(set(TABLE) - public_callables())
    assert not stale, f"entries of tests/api_table.py for no public callable: {stale}"
    for key, entry in TABLE.items():
        assert entry.params or entry.reason, f"{key}: no parameter and no reason"


CASES = [pytest.param(key, name, id=f"{key}:{name}",
                      marks=[pytest.mark.distributed] if entry.distributed else [])
         for key, entry in sorted(TABLE.items()) for name in entry.params]


def _call(key: str, name: str, bad: object) -> None:
    entry = TABLE[key]
    kwargs = entry.valid()
    kwargs[name] = bad
    (entry.call or (lambda kw: resolve(key)(**kw)))(kwargs)


def _refusal(key: str, name: str, bad: object, expected: type[Exception]) -> str | None:
    """None if ``bad`` for ``name`` raises ``expected`` naming it, else what went wrong."""
    label = name.split(".")[-1]
    words = (label, label.replace("_", " "), *TABLE[key].aliases.get(name, ()))
    try:
        _call(key, name, bad)
    except expected as err:
        if not any(word in str(err) for word in words):
            return f"{bad!r}: the {expected.__name__} does not name {label!r}: {err}"
        return None
    except Exception as err:  # noqa: BLE001  (any other error is a finding)
        return f"{bad!r}: {type(err).__name__} instead of {expected.__name__}: {err}"
    return f"{bad!r}: accepted"


@pytest.mark.parametrize(("key", "name"), CASES)
def test_bad_values_are_refused(key, name):
    kind = TABLE[key].params[name]
    failures = [f for bad, expected in [(v, TypeError) for v in kind.wrong_type]
                + [(v, ValueError) for v in kind.wrong_value]
                if (f := _refusal(key, name, bad, expected))]
    assert not failures, "\n".join(failures)


def _drawn(which: str) -> list:
    return [(key, name) for key, entry in sorted(TABLE.items()) if not entry.distributed
            for name, kind in entry.params.items() if getattr(kind, which) is not None]


@pytest.mark.parametrize(("which", "expected"), [("drawn_type", TypeError),
                                                 ("drawn_value", ValueError)],
                         ids=["wrong type", "wrong value"])
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_drawn_bad_values_are_refused(which, expected, data):
    key, name = data.draw(st.sampled_from(_drawn(which)), label="parameter")
    bad = data.draw(getattr(TABLE[key].params[name], which)(), label="value")
    failure = _refusal(key, name, bad, expected)
    assert failure is None, f"{key}({name}=...): {failure}"


KERNELS = sorted(key for key, entry in TABLE.items() if entry.reason.startswith("raw kernel"))


@pytest.mark.parametrize("key", KERNELS)
@pytest.mark.parametrize(("griddim", "blockdim", "limit"), [
    ((1, 65_536), 32, "griddim .* along y"), ((1, 1, 65_536), 32, "griddim .* along z"),
    (2**31, 32, "griddim .* along x"), (0, 32, "griddim .* along x"),
    (1, 1025, "blockdim .* along x"), (1, (32, 32, 2), "limit of 1,024 threads per block"),
    (1, (1, 1, 65), "blockdim .* along z")])
def test_raw_kernels_refuse_launches_beyond_cuda_limits(key, griddim, blockdim, limit):
    with pytest.raises(ValueError, match=limit) as err:
        resolve(key)[griddim, blockdim]
    assert key in str(err.value)
