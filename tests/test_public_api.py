"""The public API comes in tiers (`convmem`, `convmem.integration`), documented and importable on
its own; the wrappers are built from those tiers only."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import convmem
import convmem.integration

ROOT = Path(__file__).resolve().parent.parent
DOCS = "\n".join(
    page.read_text(encoding="utf-8") for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
)
WRAPPERS = ("langchain_convmem", "llamaindex_convmem")


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


def test_private_modules_are_not_exported() -> None:
    assert [name for name in convmem.__all__ if name.startswith("_")] == []
