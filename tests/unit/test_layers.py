"""The library's layers: no import cycle among its modules, and only the CLI and the service
package import the KnowledgeBase facade (every read goes down through the query engine)."""

from __future__ import annotations

import ast
from pathlib import Path

import psirag_kb

PACKAGE = Path(psirag_kb.__file__).parent


def _modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name)."""
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    """Whether an `if` is `if TYPE_CHECKING:` (imports only a type checker follows)."""
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    """Modules of the package a module imports, at module level or inside functions, leaving
    out what only `if TYPE_CHECKING:` imports."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    """Each module of the package and the modules of the package it imports."""
    modules = _modules()
    names = set(modules)
    return {name: _imports(ast.parse(path.read_text()), name, path.name == "__init__.py", names)
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := walk(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (cycle := walk(start)):
            return cycle
    return None


def test_the_graph_sees_function_level_imports():
    graph = import_graph()
    assert "psirag_kb.kb" in graph["psirag_kb.service.client"]  # inside a function only
    assert "psirag_kb.search.engine" in graph["psirag_kb.kb"]


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_among_the_package_modules():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_only_the_cli_and_the_service_import_the_facade():
    importers = {name for name, imported in import_graph().items() if "psirag_kb.kb" in imported}
    assert importers, "the CLI imports the facade"
    assert {n for n in importers
            if n.split(".")[:2] != ["psirag_kb", "cli"]
            and not n.startswith("psirag_kb.service")} == set()


CORE = {"errors", "paths", "config", "access", "people", "locations", "text", "backoff",
        "status_text", "__main__"}


def package_of(module: str) -> str:
    """The layer a module belongs to: its subpackage, or "core" for the top-level modules."""
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in CORE:
        return "core"
    return parts[1].removesuffix(".py")


def package_graph() -> dict[str, set[str]]:
    """Each subpackage (and the core modules as one) and the others it imports."""
    graph: dict[str, set[str]] = {}
    for name, imported in import_graph().items():
        here = package_of(name)
        graph.setdefault(here, set()).update(
            there for there in map(package_of, imported) if there != here)
    return graph


def test_package_of_names_the_layer():
    assert package_of("psirag_kb.storage.store") == "storage"
    assert package_of("psirag_kb.config") == "core"
    assert package_of("psirag_kb.kb") == "kb"


def test_no_import_cycle_among_the_packages():
    graph = package_graph()
    graph["core"].discard("cli")  # `python -m psirag_kb` starts the command line
    cycle = find_cycle(graph)
    assert cycle is None, "package import cycle: " + " -> ".join(cycle or [])


MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 80


def test_modules_and_functions_stay_readable():
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        name = path.relative_to(PACKAGE.parent)
        if source.count("\n") > MAX_MODULE_LINES:
            too_long.append(f"{name}: {source.count(chr(10))} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines")
    assert too_long == [], "split these by job: " + "; ".join(too_long)
