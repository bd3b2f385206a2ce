"""The project's modules import one another without cycles (data flows one way)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {
    "convmem": ROOT / "shared" / "convmem",
    "langchain_convmem": ROOT / "langchain_convmem",
    "llamaindex_convmem": ROOT / "llamaindex_convmem",
}


def module_files() -> dict[str, Path]:
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join((package, *parts))] = path
    return modules


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Project modules `name` imports anywhere in its file (lazy and TYPE_CHECKING imports too)."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = f"{package}.{base}".rstrip(".") if base else package
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {module for module in found if module in known and module != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    visiting: list[str] = []
    done: set[str] = set()

    def visit(module: str) -> list[str] | None:
        if module in visiting:
            return [*visiting[visiting.index(module) :], module]
        if module in done:
            return None
        visiting.append(module)
        for imported in sorted(graph[module]):
            cycle = visit(imported)
            if cycle:
                return cycle
        visiting.pop()
        done.add(module)
        return None

    for module in sorted(graph):
        cycle = visit(module)
        if cycle:
            return cycle
    return None


def test_no_module_imports_itself_through_other_modules() -> None:
    files = module_files()
    graph = {name: imports_of(name, path, set(files)) for name, path in files.items()}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])
