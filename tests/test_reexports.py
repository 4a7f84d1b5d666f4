"""A package's re-exports are written once: its ``__all__`` is built from its modules'
``__all__`` (``_MODULES``, less any ``_KEPT_IN_MODULE``), each name bound by a star import to
the module's own object, so that a name added to a module reaches its package by itself."""

import ast
import importlib
from pathlib import Path

import pytest

import gpudl  # noqa: F401  (first: chooses GPU or simulator)

PACKAGE = Path(__file__).resolve().parent.parent / "gpudl"
REEXPORTING = sorted(
    ".".join(p.relative_to(PACKAGE.parent).parent.parts) for p in PACKAGE.rglob("__init__.py")
    if "_MODULES = (" in p.read_text())


def test_the_packages_that_re_export_are_found():
    assert {"gpudl.optim", "gpudl.kernels.optim", "gpudl.parallel.data", "gpudl.models",
            "gpudl.plots"} <= set(REEXPORTING)


@pytest.mark.parametrize("name", REEXPORTING)
def test_a_package_s_all_is_its_modules_all(name):
    package = importlib.import_module(name)
    kept = getattr(package, "_KEPT_IN_MODULE", set())
    derived = [n for m in package._MODULES
               for n in importlib.import_module(f"{name}.{m}").__all__ if n not in kept]
    extra = [n for n in package.__all__ if n not in derived]
    assert package.__all__[len(extra):] == derived
    assert len(set(package.__all__)) == len(package.__all__), "a name re-exported twice"
    for module in package._MODULES:
        sub = importlib.import_module(f"{name}.{module}")
        for n in sub.__all__:
            assert getattr(package, n) is getattr(sub, n), f"{name}.{n} is not {sub.__name__}'s"


@pytest.mark.parametrize("name", REEXPORTING)
def test_a_package_names_each_re_export_of_its_modules_nowhere_by_hand(name):
    """Names imported by hand are only the few from outside the re-exported modules (listed
    first in ``__all__``)."""
    tree = ast.parse((PACKAGE.parent / name.replace(".", "/") / "__init__.py").read_text())
    package = importlib.import_module(name)
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module.startswith(
        "gpudl.")]
    stars = [n.module for n in imports if [a.name for a in n.names] == ["*"]]
    assert sorted(stars) == sorted(f"{name}.{m}" for m in package._MODULES)
    by_hand = [a.name for n in imports if n.module not in stars for a in n.names]
    assert package.__all__[:len(by_hand)] == by_hand


def test_the_module_kept_names_stay_out_and_a_submodule_name_does_not_shadow_a_function():
    from gpudl import models
    from gpudl.estimate import roofline
    from gpudl.kernels import optim as optim_kernels
    from gpudl.models import encoder
    from gpudl.parallel.pipeline import schedule

    assert "DTYPES" in encoder.__all__ and "DTYPES" not in models.__all__  # kept in its module
    assert "EPS32" in optim_kernels.__all__
    assert callable(roofline) and callable(schedule)
