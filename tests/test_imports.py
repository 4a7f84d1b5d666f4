"""The package's import graph, read from the source (imports inside functions included): the
kernel and parallel modules import nothing that measures (gpudl.bench, its timing), and no
module of gpudl imports itself back through others."""

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
    assert "gpudl.parallel.launch" in GRAPH["gpudl.parallel.comms"]


@pytest.mark.parametrize("name", [n for n in MODULES
                                  if n.startswith(("gpudl.kernels", "gpudl.parallel"))])
def test_kernels_and_workers_import_nothing_that_measures(name):
    measuring = {m for m in GRAPH[name] if m == "gpudl.bench" or m.startswith("gpudl.bench.")}
    assert not measuring, f"{name} imports {sorted(measuring)}: measurement lives in gpudl.bench"


def test_no_import_cycle():
    assert find_cycle(GRAPH) is None, " -> ".join(find_cycle(GRAPH))


def test_a_cycle_would_be_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
