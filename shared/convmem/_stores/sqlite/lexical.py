"""Recall's keyword index of each user's history, in the store's own SQLite file.

`SQLiteHistoryTables` is the `HistoryTables` a `SQLiteStore` offers recall
(unless opened with ``lexical_index="process"``): a new process answers a
returning user's first query with two indexed reads (the postings of the
query's terms over the user's whole history, then the rows of the best
candidates), without reading the user's logs. Scores are computed in the
process from those postings with recall's own BM25 (`convmem._recall.scoring`),
on the statistics of the user's whole history, so they equal the in-process
index's.

Tables (schema 6)::

    recall_histories       number -> owner ("user:<id>" or "session:<id>"), next_slot
    recall_index_sessions  session_id -> history, slot, generation, cursor (JSON: where
                           indexing stands, the session's totals and speakers)
    recall_units           (history, key) -> timestamp, episode, exchange, place, from_user,
                           name, candidate, long, last: what ranking reads of a message
    recall_segments        (history, segment) -> level, entries, slots: the postings of
                           a history come in segments, one per write, merged a few at a time
    recall_segment_terms   (history, segment, term) -> postings: the term's documents in
                           the segment, packed (passages of messages, then exchanges;
                           see `convmem._stores.sqlite.segments`)

Keys are ``slot << 40 | ...`` (see `convmem._recall.index_rows`): a session's rows
are one range of keys, and a slot is never given twice in a history, so nothing
read under an old slot can be taken for a newer session's.

Who writes what: recall derives the rows (its rules: roles, small talk,
exchanges, passages) and `write` stores them in one ``BEGIN IMMEDIATE``
transaction that first checks the session's log still has the generation they
were read from, and that the session's index row is still the one they
continue (compare-and-set: two processes indexing one session write once). A
crash between the log's write and the index's leaves the index behind the
log: the next search or catch-up indexes what it lacks. The store deletes: the
calls that delete or replace messages reset the session's rows in their own
transaction (recall indexes the new log again), and those that delete sessions
delete them; with ``secure_delete`` nothing deleted stays in the file.

A missing table is made again (empty, with a warning) on the next read, write
or delete, and the rows of every session are reset: recall then indexes each
session again from its log.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Collection, Hashable, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from ..._errors import StoreError
from ..._models import Message
from ..._recall.index_rows import (
    KEY_SHIFT,
    IndexBatch,
    IndexedHistory,
    IndexedSession,
    PostingColumns,
    first_number_of_a_remade_history_table,
)
from .connection import in_lists
from .segments import DamagedPostings, drop_slots, read_postings, write_segment

__all__ = ["SQLiteHistoryTables", "create_history_schema", "forget_indexed", "reset_indexed"]

logger = logging.getLogger("convmem")

_TABLES = (
    "recall_histories",
    "recall_index_sessions",
    "recall_units",
    "recall_segments",
    "recall_segment_terms",
)
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS recall_histories (
        number    INTEGER PRIMARY KEY AUTOINCREMENT,
        owner     TEXT NOT NULL UNIQUE,
        next_slot INTEGER NOT NULL DEFAULT 0
    )""",
    """CREATE TABLE IF NOT EXISTS recall_index_sessions (
        session_id TEXT PRIMARY KEY,
        history    INTEGER NOT NULL,
        slot       INTEGER NOT NULL,
        generation TEXT,
        cursor     TEXT NOT NULL
    ) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS recall_index_sessions_by_slot ON recall_index_sessions(history, slot)",
    """CREATE TABLE IF NOT EXISTS recall_units (
        history   INTEGER NOT NULL,
        key       INTEGER NOT NULL,
        ts        REAL NOT NULL,
        episode   INTEGER NOT NULL,
        exchange  INTEGER NOT NULL,
        place     INTEGER NOT NULL,
        from_user INTEGER NOT NULL,
        name      TEXT,
        candidate INTEGER NOT NULL,
        long      INTEGER NOT NULL,
        last      INTEGER NOT NULL,
        PRIMARY KEY (history, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS recall_segments (
        history INTEGER NOT NULL,
        segment INTEGER NOT NULL,
        level   INTEGER NOT NULL,
        entries INTEGER NOT NULL,
        slots   TEXT NOT NULL,
        PRIMARY KEY (history, segment)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS recall_segment_terms (
        history  INTEGER NOT NULL,
        segment  INTEGER NOT NULL,
        term     TEXT NOT NULL,
        postings BLOB NOT NULL,
        PRIMARY KEY (history, segment, term)
    ) WITHOUT ROWID""",
)
_IN_CHUNK = 400
_SEQ_MASK = (1 << KEY_SHIFT) - 1
_UNIT_SELECT = "{u}.key, {u}.ts, {u}.episode, {u}.exchange, {u}.place, {u}.from_user, {u}.name, {u}.candidate, {u}.long, {u}.last"


def create_history_schema(conn: sqlite3.Connection) -> list[str]:
    """Create the tables and indexes that are missing (inside a write transaction); returns
    the tables it made.

    When some tables are left, their rows no longer agree with the ones made empty (a cursor
    would claim postings that are gone): every session's rows are reset, so that recall
    indexes each session again from its log. Histories keep their numbers, and sessions
    get new slots, so nothing rendered from the old rows is taken for the new ones; a
    history table made again numbers its histories above the old ones."""
    present = {
        row[0]
        for row in conn.execute(
            f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN ({','.join('?' * len(_TABLES))})",
            _TABLES,
        )
    }
    for statement in _SCHEMA:
        conn.execute(statement)
    made = [table for table in _TABLES if table not in present]
    if made and present:
        conn.execute("DELETE FROM recall_units")
        conn.execute("DELETE FROM recall_segment_terms")
        conn.execute("DELETE FROM recall_segments")
        if "recall_histories" in made:
            # Its numbers start again: index rows carrying the old ones would be read as
            # another history's.
            conn.execute("DELETE FROM recall_index_sessions")
        else:
            conn.execute("UPDATE recall_index_sessions SET generation = NULL, cursor = ''")
    if "recall_histories" in made and (present or conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone()):
        conn.execute("DELETE FROM sqlite_sequence WHERE name = 'recall_histories'")
        conn.execute(
            "INSERT INTO sqlite_sequence (name, seq) VALUES ('recall_histories', ?)",
            (first_number_of_a_remade_history_table(),),
        )
    return made


def _slot_range(slot: int) -> tuple[int, int]:
    return slot << KEY_SHIFT, ((slot + 1) << KEY_SHIFT) - 1


def _drop_rows(conn: sqlite3.Connection, history: int, slots: Collection[int]) -> None:
    for slot in slots:
        low, high = _slot_range(slot)
        conn.execute(
            "DELETE FROM recall_units WHERE history = ? AND key BETWEEN ? AND ?", (history, low, high)
        )
    try:
        drop_slots(conn, history, slots)
    except DamagedPostings as exc:
        _reset_damaged(conn, history, exc)


def _reset_damaged(conn: sqlite3.Connection, history: int, error: DamagedPostings) -> None:
    """Drop every row of a history one of whose packed rows is damaged, and mark its
    sessions for indexing again from their logs (in new slots)."""
    for table in ("recall_segment_terms", "recall_segments", "recall_units"):
        conn.execute(f"DELETE FROM {table} WHERE history = ?", (history,))
    conn.execute(
        "UPDATE recall_index_sessions SET generation = NULL, cursor = '' WHERE history = ?", (history,)
    )
    logger.warning(
        "recall's keyword index in %s had a damaged row (%s); the history's rows were reset: "
        "each of its sessions is indexed again from its log when next searched",
        _file_of(conn),
        error,
    )


def _indexed_rows(conn: sqlite3.Connection, session_ids: Sequence[str]) -> list[tuple[str, int, int]]:
    found: list[tuple[str, int, int]] = []
    for chunk, marks in in_lists(session_ids, _IN_CHUNK):
        found.extend(
            conn.execute(
                f"SELECT session_id, history, slot FROM recall_index_sessions WHERE session_id IN ({marks})",
                chunk,
            ).fetchall()
        )
    return found


def _drop_sessions(conn: sqlite3.Connection, session_ids: Sequence[str], statement: str) -> list[int]:
    """Run `statement` on each of the sessions' index rows (its one parameter: the session
    id), then drop their rows, the sessions of one history together (each segment is
    rewritten once); return the histories they were in."""
    _warn_made(create_history_schema(conn), conn)
    slots: dict[int, list[int]] = {}
    for session_id, history, slot in _indexed_rows(conn, session_ids):
        conn.execute(statement, (session_id,))
        slots.setdefault(history, []).append(slot)
    for history, dropped in slots.items():
        _drop_rows(conn, history, dropped)
    return list(slots)


def reset_indexed(conn: sqlite3.Connection, session_ids: Sequence[str]) -> None:
    """In the transaction that deletes or replaces messages of a session: its rows go, and
    its index row says it needs indexing again (recall does so from the new log, silently)."""
    _drop_sessions(
        conn,
        session_ids,
        "UPDATE recall_index_sessions SET generation = NULL, cursor = '' WHERE session_id = ?",
    )


def forget_indexed(conn: sqlite3.Connection, session_ids: Sequence[str]) -> None:
    """In the transaction that deletes sessions: their rows go, and a history left without
    sessions goes too (its owner names a user)."""
    for history in _drop_sessions(
        conn, session_ids, "DELETE FROM recall_index_sessions WHERE session_id = ?"
    ):
        conn.execute(
            "DELETE FROM recall_histories WHERE number = ? AND NOT EXISTS "
            "(SELECT 1 FROM recall_index_sessions WHERE history = ?)",
            (history, history),
        )


def _file_of(conn: sqlite3.Connection) -> str:
    """The path of the connection's main database, for a warning."""
    (file,) = [row[2] for row in conn.execute("PRAGMA database_list") if row[1] == "main"]
    return str(file)


def _warn_made(made: Sequence[str], conn: sqlite3.Connection, error: Exception | None = None) -> None:
    if made:
        logger.warning(
            "recall's keyword index in %s was missing %s%s; made again: each session is indexed "
            "again from its log when next searched",
            _file_of(conn),
            ", ".join(made),
            f" ({error})" if error is not None else "",
        )


_T = TypeVar("_T")


class SQLiteFile(Protocol):
    """What the tables need of a `SQLiteStore` (named here: the store imports this module)."""

    path: Path
    MESSAGE_COLUMNS: tuple[str, ...]

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]: ...

    def _unchanged(self, key: Hashable, read: Callable[[], _T]) -> _T: ...

    def _transaction(self) -> Any: ...

    def decode_message(self, row: Sequence[Any], session_id: str) -> Message: ...


class SQLiteHistoryTables:
    """Recall's index of each user's history in a `SQLiteStore`'s file (see the module
    docstring). Thread-safe: every call uses a pooled connection of its own."""

    def __init__(self, store: SQLiteFile) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"SQLiteHistoryTables({str(self.store.path)!r})"

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            return self.store._read(sql, params)
        except StoreError as exc:
            if "no such table" not in str(exc):
                raise
            self._repair(exc)
            # The tables are whole again, but empty where the caller's earlier reads found
            # rows: this read fails, and the next search indexes every session afresh.
            raise StoreError(
                f"recall's keyword index in {self.store.path} was missing a table and was made again"
            ) from exc

    def _repair(self, error: Exception) -> None:
        with self.store._transaction() as conn:
            _warn_made(create_history_schema(conn), conn, error)

    # -- reading ----------------------------------------------------------------------

    def indexed(self, owner: str) -> IndexedHistory:
        def read() -> IndexedHistory:
            rows = self._read(
                "SELECT h.number, s.session_id, s.slot, s.generation, s.cursor FROM recall_histories AS h "
                "LEFT JOIN recall_index_sessions AS s ON s.history = h.number WHERE h.owner = ?",
                (owner,),
            )
            return IndexedHistory.from_rows(owner, rows)

        return self.store._unchanged(("indexed", owner), read)

    def indexed_session(self, session_id: str) -> IndexedSession | None:
        rows = self._read(
            "SELECT h.owner, s.slot, s.generation, s.cursor FROM recall_index_sessions AS s "
            "JOIN recall_histories AS h ON h.number = s.history WHERE s.session_id = ?",
            (session_id,),
        )
        if not rows:
            return None
        owner, slot, generation, cursor = rows[0]
        return IndexedSession(session_id, owner, int(slot), generation, cursor)

    def postings(self, history: int, terms: Sequence[str]) -> PostingColumns:
        try:
            return read_postings(self._read, history, terms)
        except DamagedPostings as exc:
            with self.store._transaction() as conn:
                _reset_damaged(conn, history, exc)
            # This search reads the logs instead; the next one, the rows made again.
            raise StoreError(f"recall's keyword index in {self.store.path} had a damaged row") from exc

    def units(self, history: int, keys: Sequence[int], exchanges: Sequence[int]) -> list[tuple[Any, ...]]:
        found: list[tuple[Any, ...]] = []
        for chunk, marks in in_lists(keys, _IN_CHUNK):
            found.extend(
                self._read(
                    f"SELECT {_UNIT_SELECT.format(u='u')} FROM recall_units AS u WHERE u.history = ? "
                    f"AND u.key IN ({marks})",
                    (history, *chunk),
                )
            )
        for chunk, marks in in_lists(exchanges, _IN_CHUNK):
            # An exchange's members are the rows from its first message's key to its last's.
            found.extend(
                self._read(
                    f"SELECT {_UNIT_SELECT.format(u='u')} FROM recall_units AS head "
                    "JOIN recall_units AS u ON u.history = head.history "
                    "AND u.key BETWEEN head.key AND head.key + head.last - head.exchange "
                    f"WHERE head.history = ? AND head.key IN ({marks})",
                    (history, *chunk),
                )
            )
        return found

    def messages(self, history: int, keys: Sequence[int]) -> dict[int, Message]:
        found: dict[int, Message] = {}
        for chunk, _ in in_lists(keys, _IN_CHUNK):
            values = ",".join("(?, ?)" for _ in chunk)
            rows = self._read(
                f"WITH wanted(slot, seq) AS (VALUES {values}) "
                f"SELECT wanted.slot, s.session_id, {', '.join('m.' + c for c in self.store.MESSAGE_COLUMNS)} "
                "FROM wanted "
                "JOIN recall_index_sessions AS s ON s.history = ? AND s.slot = wanted.slot "
                "JOIN messages AS m ON m.session_id = s.session_id AND m.seq = wanted.seq",
                (*(part for key in chunk for part in (key >> KEY_SHIFT, key & _SEQ_MASK)), history),
            )
            for row in rows:
                message = self.store.decode_message(row[2:], row[1])
                found[int(row[0]) << KEY_SHIFT | (message.seq or 0)] = message
        return found

    # -- writing ----------------------------------------------------------------------

    def reset(self, session_id: str) -> None:
        self.reset_sessions([session_id])

    def reset_sessions(self, session_ids: Sequence[str]) -> None:
        with self.store._transaction() as conn:
            reset_indexed(conn, session_ids)

    def write(self, owner: str, batch: IndexBatch, expected: IndexedSession | None) -> bool:
        (written,) = self.write_many(owner, [(batch, expected)])
        return written

    def write_many(
        self, owner: str, batches: Sequence[tuple[IndexBatch, IndexedSession | None]]
    ) -> list[bool]:
        try:
            with self.store._transaction() as conn:
                return self._write(conn, owner, batches)
        except StoreError as exc:
            if "no such table" not in str(exc):
                raise
            self._repair(exc)
            return [False] * len(batches)

    def _write(
        self,
        conn: sqlite3.Connection,
        owner: str,
        batches: Sequence[tuple[IndexBatch, IndexedSession | None]],
    ) -> list[bool]:
        """The batches in one transaction and one segment (see `HistoryTables.write`): each
        is written only while its log and its row are what it was made from."""
        number: int | None = None
        placed: list[int | None] = []
        for batch, expected in batches:
            current = self._current(conn, batch, expected)
            if current is False:
                placed.append(None)
                continue
            if number is None:  # made only for a write that goes ahead
                number = self._history(conn, owner)
            placed.append(self._place(conn, number, batch, current))
        slots = [slot for slot in placed if slot is not None]
        if number is None or not slots:
            return [False] * len(batches)
        passages: list[tuple[int, dict[str, int], int]] = []
        exchanges: list[tuple[int, dict[str, int], int, bool]] = []
        for (batch, _), slot in zip(batches, placed, strict=True):
            if slot is not None:
                base = slot << KEY_SHIFT
                passages.extend((base | doc, counts, length) for doc, counts, length in batch.passages)
                exchanges.extend(
                    (base | first, counts, length, new) for first, counts, length, new in batch.exchanges
                )
        try:
            write_segment(conn, number, slots, passages, exchanges)
        except DamagedPostings as exc:  # met merging: these sessions too are indexed again
            _reset_damaged(conn, number, exc)
            return [False] * len(batches)
        conn.executemany(
            "INSERT OR REPLACE INTO recall_index_sessions (session_id, history, slot, generation, cursor) "
            "VALUES (?, ?, ?, ?, ?)",
            [
                (batch.session_id, number, slot, batch.generation, batch.cursor.to_json())
                for (batch, _), slot in zip(batches, placed, strict=True)
                if slot is not None
            ],
        )
        return [slot is not None for slot in placed]

    @staticmethod
    def _current(
        conn: sqlite3.Connection, batch: IndexBatch, expected: IndexedSession | None
    ) -> tuple[int, int] | Literal[False] | None:
        """The (history, slot) of the batch's session (None: it has none), or False when its
        log or its row changed since the batch was made from them."""
        log = conn.execute(
            "SELECT generation FROM sessions WHERE session_id = ?", (batch.session_id,)
        ).fetchone()
        if log is None or log[0] != batch.generation:
            return False  # the log changed since it was read: nothing read from it is written
        row = conn.execute(
            "SELECT s.history, s.slot, s.generation, s.cursor, h.owner FROM recall_index_sessions AS s "
            "JOIN recall_histories AS h ON h.number = s.history WHERE s.session_id = ?",
            (batch.session_id,),
        ).fetchone()
        seen = (
            None
            if expected is None
            else (expected.owner, expected.slot, expected.generation, expected.cursor)
        )
        if (None if row is None else (row[4], row[1], row[2], row[3])) != seen:
            return False  # another process indexed the session meanwhile
        return None if row is None else (int(row[0]), int(row[1]))

    @staticmethod
    def _place(
        conn: sqlite3.Connection, number: int, batch: IndexBatch, current: tuple[int, int] | None
    ) -> int:
        """Write the batch's unit rows in history `number` and return its slot: a new one
        when it is indexed afresh or moves from another history (`current`: where its rows
        were), its own otherwise."""
        if batch.reset or current is None or current[0] != number:
            if current is not None:
                _drop_rows(conn, current[0], [current[1]])
            (slot,) = conn.execute(
                "SELECT next_slot FROM recall_histories WHERE number = ?", (number,)
            ).fetchone()
            conn.execute("UPDATE recall_histories SET next_slot = next_slot + 1 WHERE number = ?", (number,))
        else:
            slot = current[1]
        base = slot << KEY_SHIFT
        conn.executemany(
            "INSERT OR REPLACE INTO recall_units VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    number,
                    base | u.seq,
                    u.timestamp,
                    u.episode,
                    u.exchange,
                    u.place,
                    int(u.from_user),
                    u.name,
                    int(u.candidate),
                    int(u.long),
                    u.last,
                )
                for u in batch.units
            ],
        )
        conn.executemany(
            "UPDATE recall_units SET last = ? WHERE history = ? AND key = ?",
            [(last, number, base | first) for first, last in batch.grown.items()],
        )
        return int(slot)

    @staticmethod
    def _history(conn: sqlite3.Connection, owner: str) -> int:
        row = conn.execute("SELECT number FROM recall_histories WHERE owner = ?", (owner,)).fetchone()
        if row is not None:
            return int(row[0])
        cursor = conn.execute("INSERT INTO recall_histories (owner) VALUES (?)", (owner,))
        return int(cursor.lastrowid or 0)
