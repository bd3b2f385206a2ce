"""Every Python example in README.md runs as written."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

# The LlamaIndex examples make a Memory, whose aiosqlite engine is closed after each run.
pytestmark = pytest.mark.usefixtures("llamaindex_engines")

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_python_examples() -> None:
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMEM_DB", os.fspath(tmp_path / "convmem.db"))
    code = compile(BLOCKS[index], f"README.md[python block {index}]", "exec")
    exec(code, {"__name__": "__readme__"})


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs_again_where_it_left_its_files(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user runs an example twice in one folder: the second run, which finds
    whatever files the first one left, prints what the first printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMEM_DB", os.fspath(tmp_path / "convmem.db"))
    code = compile(BLOCKS[index], f"README.md[python block {index}]", "exec")
    printed = []
    for _ in range(2):
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            exec(code, {"__name__": "__readme__"})
        printed.append(stdout.getvalue())
    first, second = printed
    assert second == first, f"README.md python block {index} prints something else when run again"
