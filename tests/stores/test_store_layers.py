"""The store backends stay behind the store layer: code outside a backend's folder asks a
declared capability (`convmem._stores.capabilities`), never imports the backend."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "shared" / "convmem"
PACKAGES = {
    "convmem": CORE,
    "langchain_convmem": ROOT / "langchain_convmem",
    "llamaindex_convmem": ROOT / "llamaindex_convmem",
}
BACKENDS = ("convmem._stores.sqlite", "convmem._stores.redis", "convmem._stores.postgres")
# The public package exports the store classes; `files` maps a path to the default (SQLite) store.
MAY_IMPORT_ANY_BACKEND = {"convmem", "convmem._stores.files", "convmem._stores.urls"}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = path.relative_to(folder).with_suffix("").parts
            found[".".join((package, *parts[: -1 if parts[-1] == "__init__" else None]))] = path
    return found


def imported(name: str, path: Path) -> set[str]:
    """Every module `name` imports, at the top, lazily or for type checking only."""
    package = name if path.stem == "__init__" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def backend_of(module: str) -> str | None:
    return next((b for b in BACKENDS if module == b or module.startswith(b + ".")), None)


def test_no_backend_is_imported_outside_its_own_folder() -> None:
    offenders = []
    for name, path in modules().items():
        if name in MAY_IMPORT_ANY_BACKEND:
            continue
        for target in sorted(imported(name, path)):
            backend = backend_of(target)
            if backend is not None and backend_of(name) != backend:
                offenders.append(f"{name} imports {target}")
    assert offenders == []


def test_the_scan_sees_relative_lazy_and_type_checking_imports() -> None:
    route = CORE / "_recall" / "kept_route.py"
    assert "convmem._stores.capabilities.HostsHistoryIndex" in imported("convmem._recall.kept_route", route)
    store = CORE / "_stores" / "postgres" / "store.py"
    seen = imported("convmem._stores.postgres.store", store)
    assert {"convmem._stores.postgres.lexical", "convmem._stores.postgres.vectors", "convmem._sansio"} <= seen
