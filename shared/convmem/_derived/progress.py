"""Progress of a bulk import (`ConversationMemory.add_messages` with ``progress=``).

A history of thousands of messages takes seconds to import: each message is
counted, the batch is stored, then the summary, facts and recall's index are
brought up to date once for the whole batch. ``progress=True`` keeps one line
on stderr up to date; a callable is called with an `ImportProgress` at the same
points. Nothing is written or called without it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import TextIO

from .._errors import ConfigError

__all__ = ["STAGES", "ImportProgress", "ProgressCallback", "ProgressReporter", "progress_reporter"]

STAGES = ("counting", "storing", "facts", "summary", "index", "done")
"""The stages of an import, in order (``facts``, ``summary`` and ``index`` only for what is on,
and only when derived state is updated inline, not with ``background=True``)."""

# Updates of one stage, at most: a callback or a terminal line sees ~50 steps, not one per message.
_STEPS = 50


@dataclasses.dataclass(frozen=True)
class ImportProgress:
    """Where an import stands, as a ``progress`` callback of `add_messages` receives it.

    Attributes:
        session_id: the session the messages go to.
        stage: one of ``"counting"`` (checking and counting tokens, message by message),
            ``"storing"`` (the atomic append), ``"facts"``, ``"summary"`` and ``"index"``
            (derived state, once for the batch), ``"done"``.
        done: messages of the import this stage has handled.
        total: messages in the import.
    """

    session_id: str
    stage: str
    done: int
    total: int

    def __str__(self) -> str:
        if self.stage == "done":
            return f"convmem: session {self.session_id!r:.60}: {self.total} messages imported"
        return f"convmem: session {self.session_id!r:.60}: {self.stage} {self.done}/{self.total} messages"


ProgressCallback = Callable[[ImportProgress], None]


class ProgressReporter:
    """Reports the stages of one import to a callback, a few steps per stage."""

    def __init__(self, session_id: str, total: int, callback: ProgressCallback) -> None:
        self.session_id = session_id
        self.total = total
        self._callback = callback
        self._every = max(1, total // _STEPS)

    def step(self, stage: str, done: int) -> None:
        """`done` messages of `stage` handled; reported every few messages and at the end."""
        if done == self.total or done % self._every == 0:
            self._callback(ImportProgress(self.session_id, stage, done, self.total))

    def stage(self, stage: str) -> None:
        """`stage` finished for the whole import."""
        self._callback(ImportProgress(self.session_id, stage, self.total, self.total))


class _StderrLine:
    """One line on a terminal, rewritten in place, ended when the import is done."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def __call__(self, progress: ImportProgress) -> None:
        stream = self._stream or sys.stderr
        end = "\n" if progress.stage == "done" else ""
        if stream.isatty():
            stream.write(f"\r\x1b[K{progress}{end}")
        elif progress.done == progress.total:  # a log file gets the end of each stage
            stream.write(f"{progress}\n")
        stream.flush()


def progress_reporter(
    progress: bool | ProgressCallback | None, session_id: str, total: int
) -> ProgressReporter | None:
    """The reporter for `progress` (None: report nothing), or `ConfigError` for a value that
    is neither a bool, None nor a callable."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return ProgressReporter(session_id, total, _StderrLine())
    if not callable(progress):
        raise ConfigError(
            f"progress must be True (a line on stderr), False/None (nothing) or a callable taking an "
            f"ImportProgress, got {progress!r:.80}"
        )
    return ProgressReporter(session_id, total, progress)
