"""The documentation stays true: every Python example in README.md and docs/ runs as
written, every command line it shows is one the CLI accepts, and every relative
link in the README reaches a file (the README is read on GitHub, not in the site)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
from pathlib import Path

import pytest

from convmem._cli import build_parser

# The LlamaIndex examples make a Memory, whose aiosqlite engine is closed after each run.
pytestmark = pytest.mark.usefixtures("llamaindex_engines")

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]


def fenced_blocks(language: str) -> list[tuple[str, str]]:
    """(where, code) of every block fenced as ```language, in every page."""
    blocks = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for index, code in enumerate(re.findall(rf"^```{language}\n(.*?)^```", text, re.S | re.M)):
            blocks.append((f"{page.relative_to(ROOT)}[{language} block {index}]", code))
    return blocks


EXAMPLES = fenced_blocks("python")
# A shell line's `convmem ...` commands, without the environment variables set for them.
ENVIRONMENT = re.compile(r"^(?:\w+=(?:\$\([^)]*\)|\S+)\s+)*")
COMMANDS = [
    (where, command)
    for where, code in fenced_blocks("bash")
    for line in code.splitlines()
    for command in (ENVIRONMENT.sub("", part.strip()) for part in line.split("&&"))
    if command.startswith("convmem ")
]


def run_example(code: str, where: str) -> str:
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(code, where, "exec"), {"__name__": "__docs__"})
    return stdout.getvalue()


def test_readme_and_every_page_have_python_examples() -> None:
    pages = {where.split("[")[0] for where, _ in EXAMPLES}
    assert "README.md" in pages
    assert len(EXAMPLES) >= 20


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_runs(where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMEM_DB", os.fspath(tmp_path / "convmem.db"))
    run_example(code, where)


@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[where for where, _ in EXAMPLES])
def test_example_runs_again_where_it_left_its_files(
    where: str, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A user runs an example twice in one folder: the second run, which finds
    whatever files the first one left, prints what the first printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CONVMEM_DB", os.fspath(tmp_path / "convmem.db"))
    first = run_example(code, where)
    second = run_example(code, where)
    assert second == first, f"{where} prints something else when run again"


def test_the_pages_show_command_lines() -> None:
    assert {where.split("[")[0] for where, _ in COMMANDS} >= {"README.md", "docs/cli.md", "docs/inspector.md"}


@pytest.mark.parametrize(
    ("where", "command"),
    COMMANDS,
    ids=[f"{where}: {' '.join(command.split(' #')[0].split())}" for where, command in COMMANDS],
)
def test_command_line_is_one_the_cli_accepts(where: str, command: str) -> None:
    try:
        build_parser().parse_args(shlex.split(command, comments=True)[1:])
    except SystemExit:
        pytest.fail(f"{where}: convmem does not accept {command!r}")


def test_every_relative_link_in_the_readme_reaches_a_file() -> None:
    targets = re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    relative = [target.split("#")[0] for target in targets if not re.match(r"\w+:|#", target)]
    assert relative
    assert [target for target in relative if not (ROOT / target).is_file()] == []
