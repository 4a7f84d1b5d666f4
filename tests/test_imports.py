"""The package's import graph, read from the source (imports inside functions included): no
module of gpudl imports itself back through others, no module imports from a floor above its
own (the kernels never import parallel, bench or optim; nothing but the top imports bench),
and the parallel strategies are siblings: each imports the shared floor of gpudl.parallel,
never another strategy."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "gpudl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def resolve(name: str) -> str:
    """The module of gpudl that ``name`` (a module, or a name inside one) is."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def imports_of(path: Path) -> set[str]:
    """The gpudl modules ``path`` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names if a.name.split(".")[0] == "gpudl"}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            if node.module and node.module.split(".")[0] == "gpudl":
                found |= {resolve(f"{node.module}.{a.name}") for a in node.names}
    return found


GRAPH = {name: imports_of(path) - {name} for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A list ``[a, b, ..., a]`` of modules each importing the next, or ``None``."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_graph_is_read():
    assert "gpudl.kernels.optim" in GRAPH["gpudl.optim.adam"]
    assert "gpudl.bench.timing" in GRAPH["gpudl.bench.elementwise"]
    assert "gpudl.parallel.spawn" in GRAPH["gpudl.parallel.data.comms"]


@pytest.mark.parametrize("name", [n for n in MODULES
                                  if n.startswith(("gpudl.kernels", "gpudl.parallel"))])
def test_kernels_and_workers_import_nothing_that_measures(name):
    measuring = {m for m in GRAPH[name] if m == "gpudl.bench" or m.startswith("gpudl.bench.")}
    assert not measuring, f"{name} imports {sorted(measuring)}: measurement lives in gpudl.bench"


#: The floors of the package, lowest first: a module imports from its own floor and those below.
FLOORS = [
    ("gpudl.backend", "gpudl.checks", "gpudl.registry"),
    ("gpudl", "gpudl.aliasing", "gpudl.launches", "gpudl.simulator",
     "gpudl.simulated_blocks", "gpudl.interop",
     "gpudl.trace", "gpudl.ptx", "gpudl.triton_ptx", "gpudl.resources", "gpudl.hardware"),
    ("gpudl.estimate", "gpudl.kernels", "gpudl.toolchain"),
    ("gpudl.models", "gpudl.optim"),
    ("gpudl.parallel", "gpudl.profiles"),
    ("gpudl.bench",),
    # the predictions of the boxes read the sizes the benchmarks time: above gpudl.bench
    ("gpudl.plots", "gpudl.solutions", "gpudl.__main__", "gpudl.estimate.predictions"),
]


def floor(name: str) -> int:
    """The floor of module ``name``: that of the longest package prefix listed (the root
    package ``gpudl`` only by its own name)."""
    matches = [(len(prefix), level) for level, prefixes in enumerate(FLOORS)
               for prefix in prefixes
               if name == prefix or (prefix != "gpudl" and name.startswith(prefix + "."))]
    assert matches, f"{name} is on no floor: add it to FLOORS"
    return max(matches)[1]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_no_import_from_a_higher_floor(name):
    higher = sorted(m for m in GRAPH[name] if floor(m) > floor(name))
    assert not higher, f"{name} (floor {floor(name)}) imports {higher} from a floor above it"


def test_floors_are_read_by_the_longest_prefix():
    assert floor("gpudl.backend") == 0 and floor("gpudl") == 1
    assert floor("gpudl.kernels.optim.adam") < floor("gpudl.optim.adam")
    assert floor("gpudl.optim.adam") < floor("gpudl.parallel.zero.training")
    assert floor("gpudl.parallel.data") < floor("gpudl.bench.dataparallel") < floor(
        "gpudl.plots.ch05")
    with pytest.raises(AssertionError, match="on no floor"):
        floor("gpudl_other.module")


def test_the_kernels_import_no_parallel_bench_or_optim():
    for name in (n for n in MODULES if n.startswith("gpudl.kernels")):
        above = {m for m in GRAPH[name]
                 if m.startswith(("gpudl.parallel", "gpudl.bench", "gpudl.optim"))}
        assert not above, f"{name} imports {sorted(above)}"


#: The shared floor of gpudl.parallel, and its sibling strategies.
PARALLEL_FLOOR = {"gpudl.parallel", "gpudl.parallel.spawn", "gpudl.parallel.messages",
                  "gpudl.parallel.degrees", "gpudl.parallel.one_process",
                  "gpudl.parallel.encoder_plan"}
STRATEGIES = ("data", "zero", "pipeline", "tensor", "mesh", "context", "experts")


def strategy(name: str) -> str | None:
    """The strategy module ``name`` belongs to (``gpudl.parallel.<strategy>[.<module>]``)."""
    parts = name.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gpudl", "parallel"] and parts[
        2] in STRATEGIES else None


def test_every_parallel_module_is_on_the_floor_or_in_a_strategy():
    parallel = {n for n in MODULES if n.startswith("gpudl.parallel")}
    assert {n for n in parallel if strategy(n) is None} == PARALLEL_FLOOR
    assert {strategy(n) for n in parallel} - {None} == set(STRATEGIES)


@pytest.mark.parametrize("name", sorted(n for n in MODULES if strategy(n)))
def test_a_strategy_imports_the_floor_and_itself_never_another_strategy(name):
    others = sorted(m for m in GRAPH[name] if m.startswith("gpudl.parallel")
                    and m not in PARALLEL_FLOOR and strategy(m) != strategy(name))
    assert not others, f"{name} imports another strategy: {others}"


@pytest.mark.parametrize("which", STRATEGIES)
def test_every_strategy_starts_its_workers_through_launch(which):
    imported = set().union(*(GRAPH[n] for n in MODULES if strategy(n) == which))
    assert "gpudl.parallel.spawn" in imported


def test_the_floor_imports_no_strategy():
    for name in PARALLEL_FLOOR:
        assert not [m for m in GRAPH[name] if strategy(m)], name


def test_no_import_cycle():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_a_cycle_would_be_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
