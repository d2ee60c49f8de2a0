"""No import circles in spark_state: every module is parsed (``ast``), its imports resolved --
relative ones against its package, imports inside functions included, ``if TYPE_CHECKING:``
blocks left out -- and the graph of module -> imported module must have no cycle.

An edge goes to the module that is imported: ``from .state import keys`` is an edge to
``spark_state.state.keys`` when that is a module, and ``from .state import KeyedStateBackend``
an edge to the package ``spark_state.state``. Importing a submodule also runs its package's
``__init__``; that implicit edge is not counted (every submodule would otherwise be in a cycle
with a package that re-exports it)."""

from __future__ import annotations

import ast
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[2] / "spark_state"


def _modules(package: Path) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        modules[".".join(parts)] = (path, is_package)
    return modules


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (anywhere in it, but for TYPE_CHECKING)."""
    modules = _modules(package)

    def owner(name: str) -> str:
        """The innermost module of the package ``name`` names (a module, or an attribute of one)."""
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for name, (path, is_package) in modules.items():
        package = name if is_package else name.rpartition(".")[0]
        deps: set[str] = set()

        def visit(node: ast.AST) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for other in child.orelse:
                        visit_one(other)
                    continue
                visit_one(child)

        def visit_one(node: ast.AST) -> None:
            if isinstance(node, ast.Import):
                deps.update(owner(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    deps.add(owner(sub if sub in modules else target))
            visit(node)

        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        deps.discard("")
        deps.discard(name)
        graph[name] = deps
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def connect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def test_the_graph_sees_relative_and_function_level_imports_and_skips_type_checking(tmp_path) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import f\n__version__ = '1'\n")
    (pkg / "a.py").write_text("def f():\n    from . import __version__\n    from .sub import b\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import f\nimport pkg.sub.c\n")
    (pkg / "sub" / "c.py").write_text("from .. import a\n")
    graph = import_graph(pkg)
    assert graph["pkg.a"] == {"pkg", "pkg.sub.b"}
    assert graph["pkg.sub.b"] == {"pkg.sub.c"}  # not pkg.a: only under TYPE_CHECKING
    assert graph["pkg.sub.c"] == {"pkg.a"}  # ``from .. import a``: the module a, not the package
    assert cycles(graph) == [["pkg", "pkg.a", "pkg.sub.b", "pkg.sub.c"]]
    # and in spark_state itself
    real = import_graph()
    assert "spark_state.keys.keyed" in real["spark_state.state.key_context"]
    assert "spark_state.state.key_context" in real["spark_state.process.timer_service"]
    assert "spark_state.state.key_context" not in real["spark_state.state.keyed_states"]  # annotations only


def test_no_import_cycle_in_the_package() -> None:
    found = cycles(import_graph())
    assert not found, f"import cycles: {found}"


#: The rooms of spark_state from the foundations up, as docs/internals.md ("Map of the code")
#: lists them: a room imports only rooms before it. A top-level module is a room of its own.
ROOM_ORDER = [
    "errors", "deprecation", "constants", "options", "memory", "arrow_chunks", "version", "testing", "partitioning", "keys", "storage", "config",
    "backends", "checkpoint", "engine", "ttl", "state", "provider", "spark", "process", "ops", "state_data", "upgrade", "processor", "demos",
    "cli", "__main__", "",
]


def _room(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def test_rooms_import_only_the_rooms_below_them() -> None:
    graph = import_graph()
    rank = {room: i for i, room in enumerate(ROOM_ORDER)}
    rooms = {_room(m) for m in graph}
    assert rooms <= set(rank), f"rooms missing from ROOM_ORDER (and from docs/internals.md): {rooms - set(rank)}"
    upward = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                    if _room(d) != _room(m) and rank[_room(d)] > rank[_room(m)])
    assert not upward, "imports of a room listed later (see docs/internals.md, 'Map of the code'): " + ", ".join(upward)
