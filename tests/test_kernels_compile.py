"""Every kernel of the package is registered (gpudl.registry), a Triton kernel too, and every
registered kernel compiles for sm_80 and sm_90 in every signature it declares, without a GPU:
ptxas accepts it, with no local-memory spill, and a float32 kernel's PTX holds no float64
instruction. A Triton kernel is compiled by Triton's compiler at each configuration it
declares (where Triton is installed). The registers and shared memory ptxas reports (and,
for a Triton kernel, the shared memory, warps and stages Triton chose) are those stored in
gpudl/kernel_resources.json (which Chapter 1's occupancy section shows), where this machine's
CUDA (and Triton) is the one that wrote them. One process compiles everything once; skipped,
with the reason, where the CUDA compiler pieces are missing."""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest

from gpudl import ptx, registry, resources

PACKAGE = Path(__file__).resolve().parent.parent / "gpudl"
TARGETS = resources.TARGETS


def _is_kernel_decorator(node: ast.expr) -> bool:
    """``@cuda.jit`` or ``@cuda.jit(...)`` without ``device=True``."""
    call = node if isinstance(node, ast.Call) else None
    target = call.func if call else node
    if ast.unparse(target) != "cuda.jit":
        return False
    return not (call and any(k.arg == "device" and ast.unparse(k.value) == "True"
                             for k in call.keywords))


def _is_triton_jit(node: ast.expr) -> bool:
    """``@triton.jit`` or ``@triton.jit(...)``: a kernel, or a function kernels call."""
    return ast.unparse(node.func if isinstance(node, ast.Call) else node) == "triton.jit"


def _registers(node: ast.FunctionDef, how: str) -> bool:
    return any(isinstance(d, ast.Call) and ast.unparse(d.func) == f"registry.{how}"
               for d in node.decorator_list)


def _called(node: ast.AST) -> set[str]:
    return {ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}


def unregistered_kernels() -> list[str]:
    """``module:function`` of every ``@cuda.jit`` kernel under gpudl/ that is neither
    registered (``@registry.kernel`` above it) nor built by a registered factory, and of every
    ``@triton.jit`` function that is neither registered (``@registry.triton_kernel``) nor
    called by a registered Triton kernel of its module (a device function)."""
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))

        where = path.relative_to(PACKAGE.parent)
        tiled = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 and any(_is_triton_jit(d) for d in f.decorator_list)]
        called = set().union(*(_called(f) for f in tiled if _registers(f, "triton_kernel")))
        missing.extend(f"{where}:{f.name}" for f in tiled
                       if not _registers(f, "triton_kernel") and f.name not in called)

        def visit(node, in_factory, where=where):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef):
                    if any(_is_kernel_decorator(d) for d in child.decorator_list) and not (
                            in_factory or _registers(child, "kernel")):
                        missing.append(f"{where}:{child.name}")
                    visit(child, in_factory or _registers(child, "factory"))
                else:
                    visit(child, in_factory)

        visit(tree, False)
    return missing


def test_every_kernel_under_gpudl_is_registered():
    assert unregistered_kernels() == []


def test_an_unregistered_kernel_would_be_found(tmp_path, monkeypatch):
    (tmp_path / "gpudl").mkdir()
    (tmp_path / "gpudl" / "k.py").write_text(
        "@registry.kernel('k_v1', 'void(float32[::1])', section='s')\n@cuda.jit\ndef v1(x): pass\n"
        "@cuda.jit(device=True)\ndef helper(x): pass\n"
        "@cuda.jit\ndef v2(x): pass\n"
        "@registry.factory('k_v3', [((1,), 'void()')], section='s')\ndef make(n):\n"
        "    @cuda.jit\n    def v3(x): pass\n    return v3\n"
        "@triton.jit\ndef _tile(x): pass\n"
        "@registry.triton_kernel('k_v4', '(*fp32)', configs=[{'num_warps': 4}])\n"
        "@triton.jit\ndef v4(x): _tile(x)\n"
        "@triton.jit\ndef v5(x): pass\n")
    monkeypatch.setattr(f"{__name__}.PACKAGE", tmp_path / "gpudl")
    assert unregistered_kernels() == ["gpudl/k.py:v5", "gpudl/k.py:v2"]


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: registry.triton_kernel("k", "(*fp32)", configs={"num_warps": 4}), TypeError,
     "configs"),
    (lambda: registry.triton_kernel("k", "(*fp32)", configs=[{"BLOCK": 64}]), TypeError,
     "num_warps"),
    (lambda: registry.triton_kernel("k", "(*fp32)", configs=[{"num_warps": 3}]), ValueError,
     "num_warps"),
    (lambda: registry.triton_kernel("k", "(*fp32)", configs=[{"num_warps": 4,
                                                               "num_stages": 0}]),
     ValueError, "num_stages"),
    (lambda: registry.triton_kernel("k", "(*fp32)", configs=[{"num_warps": 4, "B": 1.5}]),
     TypeError, "constexpr B"),
    (lambda: registry.triton_kernel("k", "void(float32[::1])", configs=[{"num_warps": 4}]),
     ValueError, "Triton signature"),
])
def test_bad_triton_registrations_are_refused(call, error, match):
    def kernel(x):
        return x

    with pytest.raises(error, match=match):
        call()(kernel)
    assert "k" not in registry.KERNELS


def test_a_triton_kernel_is_an_entry_of_its_own_kind_with_its_configurations_as_builds():
    kernels = registry.load_all()
    entry = kernels["vector_add_v5_triton_block"]
    assert entry.kind == "triton" and kernels["vector_add_v1_naive"].kind == "numba"
    (config, signature), = entry.builds
    assert dict(config) == {"BLOCK": 1024, "num_warps": 4, "num_stages": 3}
    assert signature == "(*fp32:16, *fp32:16, *fp32:16, i32:16)"
    assert entry.threads_per_block == 4 * 32
    assert {registry.Variant.kind.fget(v) for r in registry.VARIANTS.values()
            for v in r.values()} <= set(registry.KINDS)


def test_the_registry_and_the_ptx_command_list_the_same_kernels():
    kernels = registry.load_all()
    assert ptx.kernels() is kernels and len(kernels) >= 90
    modules = {entry.module for entry in kernels.values()}
    assert modules == set(registry.kernel_modules())
    for name, entry in kernels.items():
        assert entry.builds and entry.section, name


def test_every_reference_a_kernel_names_is_a_function_of_the_package():
    kernels = registry.load_all()
    named = {name: entry.reference for name, entry in kernels.items() if entry.reference}
    assert len(named) >= 40
    for name, reference in named.items():
        module, _, function = reference.rpartition(".")
        assert module.startswith("gpudl.") and callable(
            getattr(importlib.import_module(module), function)), (name, reference)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: registry.kernel("two words", "void()", section="s"), ValueError, "identifier"),
    (lambda: registry.kernel(7, "void()", section="s"), TypeError, "name must be a str"),
    (lambda: registry.kernel("k", "void()", section="s", threads_per_block=0), ValueError,
     "threads_per_block"),
    (lambda: registry.kernel("k", "void()", section="s", threads_per_block=float("nan")),
     TypeError, "threads_per_block"),
    (lambda: registry.factory("k", [((), "void()")], section="s", item=-1), ValueError, "item"),
    (lambda: registry.kernel("k", "void()", section="s", reference=len), TypeError,
     "reference"),
    (lambda: registry.kernel("k", section="s"), ValueError, "at least one"),
    (lambda: registry.kernel("k", "float32", section="s"), ValueError, "void"),
    (lambda: registry.kernel("k", "void()", section=""), ValueError, "section"),
    (lambda: registry.kernel("k", "void()", section="s", precision="f16"), ValueError,
     "precision"),
])
def test_bad_registrations_are_refused(call, error, match):
    class FakeKernel:  # what @cuda.jit returns (py_func), or a factory (a function's name)
        py_func = staticmethod(lambda: None)
        __name__ = "fake_factory"

    with pytest.raises(error, match=match):
        decorate = call()
        decorate(FakeKernel())


def test_a_name_is_one_kernel():
    entry = next(iter(registry.load_all().values()))
    with pytest.raises(ValueError, match="taken by"):
        registry.factory(entry.name, [((), "void()")], section="s")(lambda: None)


# --- the compile, once for the module ------------------------------------------------------


@pytest.fixture(scope="module")
def compiled() -> dict:
    """gpudl.resources.compile_all(): every build, its PTX and ptxas's report, per target."""
    if ptx.find_tool("ptxas") is None:
        pytest.skip("ptxas is not installed (the nvidia-cuda-nvcc wheel, or a CUDA toolkit)")
    try:
        return resources.compile_all()
    except ptx.ToolkitMissing as error:
        pytest.skip(f"the CUDA compiler pieces are not installed: {error}")


def test_every_build_compiles_for_both_targets_without_spills_or_float64(compiled):
    kernels = registry.load_all()
    for i, cc in enumerate(TARGETS):
        for j, (name, _, signature) in enumerate(compiled["jobs"]):
            text = compiled["texts"][cc][j]
            report = compiled["reports"][i * len(compiled["jobs"]) + j]
            assert f".target sm_{cc[0]}{cc[1]}" in text, name
            assert report.spill_stores == report.spill_loads == report.local_bytes == 0, (
                name, cc, signature)
            if kernels[name].precision in registry.NO_FLOAT64:
                assert not re.search(r"\.f64\b", text), (name, signature)


def _numba_only(table: dict) -> dict:
    return {**table, "triton": None,
            "kernels": [r for r in table["kernels"] if "num_warps" not in r]}


def test_the_stored_registers_and_shared_memory_are_those_ptxas_reports(compiled):
    stored = resources.load()
    version = resources.version()
    if stored["ptxas"] != version:
        pytest.skip(f"kernel_resources.json was written by ptxas {stored['ptxas']}, this "
                    f"machine has {version}: register counts differ between CUDA versions")
    fresh = json.loads(json.dumps(resources.table(compiled)))
    stored = json.loads(json.dumps(stored))
    if fresh["triton"] != stored["triton"]:  # no Triton here, or another one: Numba's rows
        fresh, stored = _numba_only(fresh), _numba_only(stored)
    assert fresh == stored, (
        "regenerate with: python -m gpudl.resources > gpudl/kernel_resources.json")


@pytest.mark.triton
def test_every_triton_build_is_stored_with_its_warps_stages_and_shared_memory():
    kernels = registry.load_all()
    rows = [r for r in resources.load()["kernels"] if "num_warps" in r]
    stored = {(r["kernel"], r["signature"], tuple(r["arguments"]), r["num_warps"],
               r["num_stages"]) for r in rows}
    builds = {(name, signature, tuple(f"{k}={v}" for k, v in config
                                      if k not in ("num_warps", "num_stages")),
               dict(config)["num_warps"], dict(config)["num_stages"])
              for name, entry in kernels.items() if entry.kind == "triton"
              for config, signature in entry.builds}
    assert stored == builds and len(builds) >= 13
    assert resources.load()["triton"]["triton"] == "3.9.0"
    assert any(r["sm_90"]["shared_bytes"] > 64 * 1024 for r in rows)  # the pipelined matmul
