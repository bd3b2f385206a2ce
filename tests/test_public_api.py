"""The public API comes in tiers (`convmem`, `convmem.integration`), documented and importable on
its own; the wrappers are built from those tiers only."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import typing
from pathlib import Path

import pytest

import convmem
import convmem.integration

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(
    page.read_text(encoding="utf-8") for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
)
WRAPPERS = ("langchain_convmem", "llamaindex_convmem")
# The modules the API reference is built from, with the framework each needs (None: none).
DOCUMENTED_MODULES = {
    "convmem": None,
    "convmem.integration": None,
    "convmem.testing": None,
    "langchain_convmem": "langchain_core",
    "llamaindex_convmem": "llama_index.core",
}


def test_every_exported_name_exists() -> None:
    assert [name for name in convmem.__all__ if not hasattr(convmem, name)] == []


def test_every_integration_name_exists_and_is_not_private() -> None:
    names = convmem.integration.__all__
    assert [name for name in names if not hasattr(convmem.integration, name)] == []
    assert [name for name in names if name.startswith("_")] == []


def test_types_users_hold_are_public() -> None:
    # Raised to users, returned to them, or passed by them: each must be importable from convmem.
    held = [
        "SessionOwnerError",
        "SessionStats",
        "RecalledItem",
        "TranscriptTemplate",
        "Role",
        "OverflowStatus",
    ]
    assert [name for name in held if name not in convmem.__all__] == []


@pytest.mark.parametrize("package", WRAPPERS)
def test_no_wrapper_imports_a_private_convmem_module(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            offenders += [f"{path.name}: {name}" for name in names if name.startswith("convmem._")]
    assert offenders == []


def test_every_exported_function_is_shown_in_the_docs() -> None:
    # Classes are types users construct or annotate with; functions must be shown in use.
    functions = [name for name in convmem.__all__ if inspect.isfunction(getattr(convmem, name))]
    assert functions
    assert [name for name in functions if not re.search(rf"\b{name}\b", DOCS)] == []


def test_every_exported_class_has_a_docstring() -> None:
    classes = [name for name in convmem.__all__ if inspect.isclass(getattr(convmem, name))]
    assert [name for name in classes if not (getattr(convmem, name).__doc__ or "").strip()] == []


def undocumented_members(module_name: str) -> list[str]:
    """Every class and function in the module's `__all__`, and every public method and
    property of those classes, that has no docstring as `inspect.getdoc` sees it (a method
    inherits the docstring of the method it overrides; a property needs its own)."""
    module = importlib.import_module(module_name)
    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if typing.get_origin(obj) is not None:
            # A type alias (``OpenStore = Callable[[], Store]``) is documented where it is
            # assigned; Python 3.10 calls such an alias a class.
            continue
        if (inspect.isclass(obj) or inspect.isfunction(obj)) and not (inspect.getdoc(obj) or "").strip():
            missing.append(f"{module_name}.{name}")
        if not inspect.isclass(obj):
            continue
        for attribute, value in vars(obj).items():
            if attribute.startswith("_"):
                continue
            if isinstance(value, property):
                doc = value.__doc__
            else:
                member = getattr(obj, attribute, None)
                if not (inspect.isfunction(member) or inspect.ismethod(member)):
                    continue
                doc = inspect.getdoc(member)
            if not (doc or "").strip():
                missing.append(f"{module_name}.{name}.{attribute}")
    return missing


@pytest.mark.parametrize("module_name", sorted(DOCUMENTED_MODULES))
def test_every_public_member_has_a_docstring(module_name: str) -> None:
    # The API reference shows these docstrings: a member without one is a blank entry.
    framework = DOCUMENTED_MODULES[module_name]
    if framework is not None:
        pytest.importorskip(framework)
    assert undocumented_members(module_name) == []


def test_private_modules_are_not_exported() -> None:
    assert [name for name in convmem.__all__ if name.startswith("_")] == []
