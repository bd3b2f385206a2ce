"""The notebooks in notebooks/ run top to bottom, offline, on this interpreter."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

from notebook_kernel import NOTEBOOKS  # noqa: E402


def printed_by_cell(notebook: Any) -> list[str]:
    """The text each code cell of `notebook` printed, in order."""
    return [
        "".join(output.get("text", "") for output in cell.get("outputs", []))
        for cell in notebook.cells
        if cell.cell_type == "code"
    ]


def execute_notebook(name: str, workdir: Path, kernel: str) -> list[str]:
    """Execute a notebook with `workdir` as its directory; return the text each code cell printed."""
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(
        notebook, kernel_name=kernel, timeout=300, resources={"metadata": {"path": str(workdir)}}
    )
    client.execute()
    return printed_by_cell(notebook)


def run_notebook(name: str, workdir: Path, kernel: str) -> str:
    """Execute a notebook with `workdir` as its directory; return the text it printed."""
    return "\n".join(execute_notebook(name, workdir, kernel))


@pytest.mark.slow
def test_langchain_quickstart_notebook_runs(tmp_path: Path, kernel_on_this_interpreter: str) -> None:
    outputs = run_notebook("langchain_quickstart.ipynb", tmp_path, kernel_on_this_interpreter)
    assert "section    tokens" in outputs, "the notebook prints an explain() table"
    assert "failed" in outputs and "completed" in outputs
    assert "You asked about the weather in Lisbon." in outputs


@pytest.mark.slow
def test_llamaindex_quickstart_notebook_runs(tmp_path: Path, kernel_on_this_interpreter: str) -> None:
    outputs = run_notebook("llamaindex_quickstart.ipynb", tmp_path, kernel_on_this_interpreter)
    assert "section    tokens" in outputs, "the notebook prints an explain() table"
    assert "12 messages stored" in outputs
    assert "Summary of the earlier conversation" in outputs
    assert "Here you go: sunny, 21 °C in Lille." in outputs
    assert "12 messages after reopening" in outputs
    assert "Bob" in outputs
    assert (tmp_path / "quickstart.db").exists(), "the notebook writes next to itself, not into the repo"


@pytest.mark.slow
@pytest.mark.parametrize("name", ["langchain_quickstart.ipynb", "llamaindex_quickstart.ipynb"])
def test_notebook_runs_again_where_it_left_its_files(
    name: str, tmp_path: Path, kernel_on_this_interpreter: str
) -> None:
    """A user runs a notebook twice in one folder: the second run, which finds whatever
    files the first one left, prints what the first printed, cell by cell."""
    first = execute_notebook(name, tmp_path, kernel_on_this_interpreter)
    second = execute_notebook(name, tmp_path, kernel_on_this_interpreter)
    for cell, (before, again) in enumerate(zip(first, second, strict=True)):
        # the day a message was stored is the clock's: two runs may straddle midnight
        assert undated(again) == undated(before), (
            f"{name} code cell {cell} prints something else when run again"
        )


# The date line recall puts above what it recalls: "[4 December 2026]", "[2026年12月4日]".
_DATE_LINE = re.compile(r"\[\d{1,2} [A-Z][a-z]+ \d{4}\]|\[\d{4}年\d{1,2}月\d{1,2}日\]")


def undated(printed: str) -> str:
    return _DATE_LINE.sub("[date]", printed)


def test_date_lines_are_what_a_rerun_may_print_differently() -> None:
    assert undated("[4 December 2026]\nUser: hi\n[2026年12月5日]") == "[date]\nUser: hi\n[date]"
    assert undated("[note] 4 December 2026") == "[note] 4 December 2026"


@pytest.mark.slow
def test_langchain_quickstart_notebook_shows_what_it_prints(
    tmp_path: Path, kernel_on_this_interpreter: str
) -> None:
    """The outputs saved in the notebook, which readers see without running it, are current."""
    name = "langchain_quickstart.ipynb"
    saved = printed_by_cell(nbformat.read(NOTEBOOKS / name, as_version=4))
    printed = execute_notebook(name, tmp_path, kernel_on_this_interpreter)
    for cell, (shown, now) in enumerate(zip(saved, printed, strict=True)):
        assert shown == now, f"{name} code cell {cell} shows an output it no longer prints: re-run it"
