"""Fail the run when tests were skipped for a missing extra or server, if asked to.

Locally a missing optional dependency (``faiss``, ``sentence_transformers``, ...)
or server skips the tests that need it, so the suite runs on a small install.
CI installs everything, so there such a skip means a broken install that would
otherwise pass in silence: with ``CONVMEM_REQUIRE_EXTRAS=1`` every skip whose
reason is a missing module or an unavailable server fails the session.
``CONVMEM_ALLOW_MISSING`` lists module names that may still be missing (the
Python 3.10 run has no CPU build of torch, so no sentence-transformers).
"""

from __future__ import annotations

import os

import pytest

REQUIRE_VARIABLE = "CONVMEM_REQUIRE_EXTRAS"
ALLOW_VARIABLE = "CONVMEM_ALLOW_MISSING"
# Reasons pytest.importorskip and our server fixtures give.
_MISSING_MARKERS = ("could not import", "No module named", "cannot be started", "server binaries")

_missing: list[str] = []


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


def _allowed(reason: str) -> bool:
    allowed = [name.strip() for name in os.environ.get(ALLOW_VARIABLE, "").split(",") if name.strip()]
    return any(f"'{name}'" in reason or f'"{name}"' in reason for name in allowed)


def _note(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped:
        return
    reason = _reason(report)
    if any(marker in reason for marker in _MISSING_MARKERS) and not _allowed(reason):
        _missing.append(f"{report.nodeid}: {reason}")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    _note(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _note(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if os.environ.get(REQUIRE_VARIABLE) != "1" or not _missing:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"{REQUIRE_VARIABLE}=1 and {len(_missing)} skips were for a missing extra or server:"]
    lines += [f"  {line}" for line in _missing]
    if reporter is not None:
        reporter.write_line("\n".join(lines), red=True)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
