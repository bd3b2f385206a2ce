"""The public API is small, documented and importable on its own."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import convmem

README = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_exported_name_exists() -> None:
    assert [name for name in convmem.__all__ if not hasattr(convmem, name)] == []


def test_the_public_api_stays_small() -> None:
    assert len(convmem.__all__) <= 45


def test_every_exported_function_is_shown_in_the_readme() -> None:
    # Classes are types users construct or annotate with; functions must be shown in use.
    functions = [name for name in convmem.__all__ if inspect.isfunction(getattr(convmem, name))]
    assert functions
    assert [name for name in functions if not re.search(rf"\b{name}\b", README)] == []


def test_every_exported_class_has_a_docstring() -> None:
    classes = [name for name in convmem.__all__ if inspect.isclass(getattr(convmem, name))]
    assert [name for name in classes if not (getattr(convmem, name).__doc__ or "").strip()] == []


def test_private_modules_are_not_exported() -> None:
    assert [name for name in convmem.__all__ if name.startswith("_")] == []
