from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from convmem._cli import main


def test_demo_runs_offline_and_explains_the_late_question(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "我的狗叫什么名字" in out
    assert "== explain() ==" in out
    assert "window" in out and "left out" in out


def test_help_documents_every_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "convmem", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("demo", "sessions", "show", "context"):
        assert command in result.stdout


def test_show_and_context_read_a_sqlite_session(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "chat.db")
    assert main(["demo", "--db", db]) == 0
    capsys.readouterr()
    assert main(["sessions", "--db", db]) == 0
    assert capsys.readouterr().out.startswith("demo\t")
    assert main(["show", "demo", "--db", db]) == 0
    assert "多多" in capsys.readouterr().out
    assert main(["context", "demo", "--db", db, "--query", "hi", "--budget", "300"]) == 0
    assert "of 300 tokens used" in capsys.readouterr().out


def test_cli_reports_bad_input_as_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--budget", "5"]) == 2
    assert "error" in capsys.readouterr().err


def test_demo_with_recall_brings_back_the_pet_from_early_turns(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--recall"]) == 0
    out = capsys.readouterr().out
    recalled = out.split("Relevant earlier conversation")[1].split("== explain() ==")[0]
    assert "名字叫多多" in recalled
    assert "query points to the past" in out
