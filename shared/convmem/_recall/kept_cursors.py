"""Where the indexing of a session's log stands, for `KeptHistories`: its cursor as the
store keeps it (`IndexCursor`, read once per process), whether its rows are up to date,
behind their log, or must be made afresh (see `plan_indexing`), and the rows of a whole
history made afresh at once after an upgrade of the tokenizer (`remake_outdated`)."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from .._stores.base import SessionStats
from .index_rows import HistoryTables, IndexCursor, IndexedHistory, IndexedSession, ResetsSessions
from .terms import TOKENIZER_VERSION

__all__ = ["plan_indexing", "read_cursor", "remake_outdated"]

logger = logging.getLogger("convmem")

# Cursors as read from their JSON, shared by the searches of a process: never modified
# (`derive` continues a copy), and parsed once instead of once per session per search.
read_cursor = functools.lru_cache(maxsize=8192)(IndexCursor.from_json)


def plan_indexing(
    stats: SessionStats, owner: str, row: IndexedSession | None
) -> tuple[IndexCursor, bool, str | None] | None:
    """Where indexing must start for the log `stats` describe: (cursor, afresh, warning),
    or None when the rows are up to date. `warning` says why rows that are stale or
    unreadable are made afresh, for whoever makes them to log (once, however often the
    plan is asked for); a session without rows, or with rows of another user or tokenizer,
    is indexed quietly (a search says once which sessions its history lacks)."""
    if row is None:
        return (IndexCursor(), True, None) if stats.last_seq else None
    if row.owner != owner or not row.cursor:
        return IndexCursor(), True, None  # given to a user since, or reset by an edit of its log
    try:
        cursor = read_cursor(row.cursor)
    except ValueError as exc:
        return (
            IndexCursor(),
            True,
            f"recall's keyword index of session {stats.session_id!r} is unreadable ({exc}); "
            "indexing it afresh from its log",
        )
    if row.generation != stats.generation:
        return (
            IndexCursor(),
            True,
            f"recall's keyword index of session {stats.session_id!r} is stale (it indexed another log: "
            f"generation {row.generation} through seq {cursor.seq}, the log is at {stats.generation} "
            f"through seq {stats.last_seq}); indexing it afresh from its log",
        )
    if cursor.tokenizer != TOKENIZER_VERSION:
        return IndexCursor(), True, None  # made with other stems (an upgrade): see `remake_outdated`
    if cursor.seq >= stats.last_seq:
        # Past the stats when they were read before another writer appended and indexed: the
        # log of one generation only grows, so the rows are as new as the stats or newer.
        return None
    return cursor, False, None


def remake_outdated(tables: HistoryTables, indexed: IndexedHistory, behind: Sequence[SessionStats]) -> bool:
    """Say once that the rows of sessions of `behind` were made by another version of the
    tokenizer (after an upgrade, usually every session of the history), and drop them in
    one pass where the tables can (`ResetsSessions`); True when they were dropped. Each
    is then indexed afresh from its log; dropped one by one, a SQLite history's segments
    would be rewritten once per session."""
    outdated: dict[str, int] = {}
    for stats in behind:
        row = indexed.sessions.get(stats.session_id)
        if row is None or not row.cursor:
            continue
        try:
            version = read_cursor(row.cursor).tokenizer
        except ValueError:
            continue  # unreadable: `plan_indexing` warns of it
        if version != TOKENIZER_VERSION:
            outdated[stats.session_id] = version
    if not outdated:
        return False
    logger.info(
        "recall's keyword index of %d sessions was made by version %s of its tokenizer (this is "
        "version %d): indexing them afresh from their logs",
        len(outdated),
        "/".join(str(v) for v in sorted(set(outdated.values()))),
        TOKENIZER_VERSION,
    )
    if len(outdated) < 2 or not isinstance(tables, ResetsSessions):
        return False
    tables.reset_sessions(list(outdated))
    return True
