"""`convmem inspect` and `convmem serve` on the command line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("rich")

from inspector_data import HOSTILE_TEXT

from convmem._cli import main


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main([*argv, "--width", "160"] if argv[0] == "inspect" else argv)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_inspect_lists_users_with_counts_and_dates(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(["inspect", f"sqlite:///{sqlite_path}"], capsys)
    assert status == 0
    ana = next(line for line in out.splitlines() if " ana " in line)
    assert "│        2 │       16 │" in ana  # two sessions, 16 messages
    assert "(no user)" in out
    assert "users 1-3 of 3 (page 1 of 1)" in out


def test_inspect_pages_through_users(sqlite_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["inspect", str(sqlite_path), "--page", "2", "--page-size", "2"], capsys)
    assert "users 3-3 of 3 (page 2 of 2)" in out and "(no user)" in out and " ana " not in out


def test_inspect_a_user_lists_sessions_and_shared_facts(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(["inspect", str(sqlite_path), "--user", "ana"], capsys)
    assert "ana-lisbon" in out and "ana-porto" in out
    assert "facts across the user's sessions" in out and "Pico" in out and "ceramics designer" in out


def test_inspect_a_session_shows_summary_facts_and_messages(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = run(["inspect", str(sqlite_path), "--session", "ana-porto", "--page-size", "4"], capsys)
    assert "rolling summary (covers seq <= 8)" in out
    assert "facts this session stated" in out and "Porto" in out
    assert "seqs 1-4 of 12 (page 1 of 3)" in out
    assert "corgi called Pico" in out


def test_inspect_prints_stored_markup_as_text(sqlite_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run(["inspect", str(sqlite_path), "--session", "mallory-1"], capsys)
    assert "[bold]not markup[/bold]" in out
    assert "<script>document.title='pwned'</script>" in out
    assert HOSTILE_TEXT.split(" [")[0] in out


def test_inspect_a_query_draws_the_built_context(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, out, _ = run(
        [
            "inspect",
            str(sqlite_path),
            "--session",
            "ana-lisbon",
            "--query",
            "What is my dog called?",
            "--budget",
            "300",
        ],
        capsys,
    )
    assert status == 0
    assert "tokens used" in out and "█" in out
    assert "messages sent to the model" in out
    recalled = out.split("recalled (")[1].split("left out")[0]
    assert "ana-porto" in recalled and "corgi called Pico" in recalled


def test_inspect_saves_an_svg_picture(
    sqlite_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = tmp_path / "users.svg"
    assert run(["inspect", str(sqlite_path), "--svg", str(picture)], capsys)[0] == 0
    svg = picture.read_text(encoding="utf-8")
    assert svg.startswith("<svg") and "ana" in svg


def test_inspect_refuses_a_query_without_a_session(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status, _, err = run(["inspect", str(sqlite_path), "--query", "hi"], capsys)
    assert status == 2 and "--query builds the context of a session" in err


def test_inspect_refuses_a_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run(["inspect", f"sqlite:///{tmp_path / 'typo.db'}"], capsys)
    assert status == 2 and "no SQLite file at" in err
    assert not (tmp_path / "typo.db").exists()


def test_serve_refuses_a_non_loopback_address_without_the_flag(
    sqlite_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("starlette")
    for host in ("0.0.0.0", "192.168.1.20", "example.com", "::"):
        status, _, err = run(["serve", str(sqlite_path), "--host", host], capsys)
        assert status == 2, host
        assert f"refusing to serve on {host!r}" in err and "--allow-remote" in err


def test_help_documents_inspect_and_serve() -> None:
    for command in ("inspect", "serve"):
        result = subprocess.run(
            [sys.executable, "-m", "convmem", command, "--help"], capture_output=True, text=True, check=True
        )
        assert "Example" in result.stdout and "sqlite:///chat.db" in result.stdout
