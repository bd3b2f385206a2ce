"""`SQLiteStore`: the embedded, durable default. One file, WAL journal.

Connections come from a small pool (`convmem._stores.sqlite.connection`).
Every append runs in a ``BEGIN IMMEDIATE`` transaction, so threads and
processes writing to one file serialize on SQLite's own lock and each message
gets exactly one seq. The file is a normal SQLite database: ``sqlite3
memory.db "select role, content from messages"`` shows a log. Its tables are
built by named, numbered migrations (`convmem._stores.sqlite.migrations`).

Recall's keyword index of each user's history lives in the same file (see
`convmem._stores.sqlite.lexical`): recall writes its rows, and the deleting
calls remove the rows of what they delete in the same transaction. With
``lexical_index="process"`` the tables stay empty and recall keeps BM25 in
each process instead.

Deleted conversations leave no copy behind: every connection sets
``secure_delete`` (freed pages are zeroed, on every build of SQLite), and each
deleting call ends with a checkpoint that empties the ``-wal`` file, which
would otherwise keep the pages as they were before the delete.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ..._models import Message, TurnStatus
from ..base import (
    MAX_SEQ,
    SessionStats,
    StateRecord,
    Store,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    readable_seqs,
    seq_bound,
    validate_messages,
    validate_seqs,
)
from ..capabilities import (
    HasFileLocation,
    HostsHistoryIndex,
    ListsUserSessions,
    LogRead,
    PagesSessions,
    ReadsLogs,
    ReadsStates,
    UserTotals,
)
from ..codec import message_from_record, message_to_record
from .connection import (
    DEFAULT_POOL_SIZE,
    MAX_POOL_SIZE,
    MAX_TIMEOUT_SECONDS,
    SYNCHRONOUS,
    ConnectionPool,
    in_lists,
)
from .lexical import SQLiteHistoryTables, forget_indexed, reset_indexed
from .migrations import NEW_GENERATION, migrate

__all__ = ["SQLiteStore"]

_COLUMNS = (
    "seq, role, content, name, tool_calls, tool_call_id, metadata, status, ts, token_count, reply_to_seq"
)
# A session's `SessionStats`, in their order (what ``SessionStats(*row)`` takes).
_SESSION_STATS = (
    "SELECT session_id, message_count, last_seq, total_tokens, user_id, created_at, updated_at, "
    "generation FROM sessions"
)
_PLACEHOLDERS = ", ".join("?" * (1 + len(_COLUMNS.split(", "))))
# Values bound in one ``IN (...)`` list (SQLite before 3.32 binds at most 999 per query).
_IDS_PER_QUERY = 500

_T = TypeVar("_T")


class SQLiteStore(
    Store, ReadsStates, ReadsLogs, ListsUserSessions, PagesSessions, HostsHistoryIndex, HasFileLocation
):
    """A store in one SQLite file, safe for many threads and processes.

    Args:
        path: the database file; parent folders are created. ``":memory:"`` is
            refused (each connection would see a different database): use
            `InMemoryStore` instead.
        timeout: seconds (0 to 86400) a writer waits for another writer's lock.
        synchronous: SQLite's ``PRAGMA synchronous``. ``"NORMAL"`` (default) keeps
            every committed append across a process crash; ``"FULL"`` also
            across power loss, at the price of an fsync per append.
        pool_size: connections kept open between calls (default 4, at most 256).
            More threads than that may use the store at once: each extra one
            opens a connection for its call and closes it afterwards.
        lexical_index: where recall keeps its keyword index of this store's
            sessions. ``"store"`` (default; ``"fts5"`` is its older name): tables in
            this file keyed by user, shared by every process, so a new process answers
            a returning user's first query without reading their logs; the index takes
            about as much room as the log. ``"process"``: BM25 in each process, read
            from the logs on first use and bounded by `Recall`'s ``max_sessions``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        synchronous: str = "NORMAL",
        pool_size: int = DEFAULT_POOL_SIZE,
        lexical_index: str = "store",
    ) -> None:
        if str(path) == ":memory:":
            raise ConfigError("SQLiteStore needs a file path; for a memory-only store use InMemoryStore()")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
            raise ConfigError(
                f"SQLiteStore timeout must be a finite number of seconds (0 to {MAX_TIMEOUT_SECONDS:.0f}), "
                f"got {timeout!r}"
            )
        if not 0 <= timeout <= MAX_TIMEOUT_SECONDS:
            raise ConfigError(
                f"SQLiteStore timeout must be between 0 and {MAX_TIMEOUT_SECONDS:.0f} seconds, got {timeout!r}"
            )
        if not isinstance(synchronous, str) or synchronous.upper() not in SYNCHRONOUS:
            raise ConfigError(
                f"SQLiteStore synchronous must be one of {SYNCHRONOUS} (a str), got {synchronous!r}"
            )
        if (
            isinstance(pool_size, bool)
            or not isinstance(pool_size, int)
            or not 1 <= pool_size <= MAX_POOL_SIZE
        ):
            raise ConfigError(
                f"SQLiteStore pool_size must be an int from 1 to {MAX_POOL_SIZE}, got {pool_size!r}"
            )
        if lexical_index not in ("store", "fts5", "process"):
            raise ConfigError(
                f"SQLiteStore lexical_index must be 'store' (tables in the file, the default) or "
                f"'process' (BM25 in each process), got {lexical_index!r:.60}"
            )
        self.lexical_index = "process" if lexical_index == "process" else "store"
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._pool = ConnectionPool(
            self.path, timeout=float(timeout), synchronous=synchronous.upper(), pool_size=pool_size
        )
        try:
            with self._pool.connection() as conn:
                migrate(conn, self.path)
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{self.path} is not a usable SQLite database: {exc}") from exc
        except StoreError:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the file, as every process opening it names it."""
        return f"sqlite:{self.path.resolve()}"

    @property
    def closed(self) -> bool:
        """True once `close` was called; every call then raises `StoreError`."""
        return self._pool.closed

    def history_tables(self) -> SQLiteHistoryTables | None:
        """Recall's keyword index of each user's history in this file, unless the store was
        opened with ``lexical_index="process"`` (see `HostsHistoryIndex`)."""
        return None if self.lexical_index == "process" else SQLiteHistoryTables(self)

    def vector_index_dir(self) -> Path:
        """``<file>.vectors``: where recall keeps the FAISS files of this file's sessions."""
        return Path(f"{self.path}.vectors")

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction for this call alone (what recall's keyword index writes in)."""
        with self._pool.transaction() as conn:
            yield conn

    @staticmethod
    def _touch(conn: sqlite3.Connection, session_id: str, now: float) -> None:
        conn.execute(
            "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET updated_at = excluded.updated_at",
            (session_id, now, now),
        )

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._pool.read(sql, params)

    def _unchanged(self, key: Hashable, read: Callable[[], _T]) -> _T:
        """`read()`, kept while the file is unchanged (`ConnectionPool.unchanged`)."""
        return self._pool.unchanged(key, read)

    @staticmethod
    def _decode(rows: list[tuple[Any, ...]], session_id: str) -> list[Message]:
        names = _COLUMNS.split(", ")
        return [message_from_record(dict(zip(names, row, strict=True)), session_id) for row in rows]

    # The columns of a message row, as `decode_message` reads them (recall's keyword index
    # reads the messages it recalls with them).
    MESSAGE_COLUMNS = tuple(_COLUMNS.split(", "))

    def decode_message(self, row: Sequence[Any], session_id: str) -> Message:
        """A message from its `MESSAGE_COLUMNS`."""
        return message_from_record(dict(zip(self.MESSAGE_COLUMNS, row, strict=True)), session_id)

    # -- the Store protocol ----------------------------------------------------

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        messages = validate_messages(messages)
        now = time.time()
        tokens = sum(m.token_count or 0 for m in messages)
        try:
            with self._pool.transaction() as conn:
                # One statement claims the seqs, moves the totals and reads the owner: the
                # owner check after it rolls the whole write back, so nothing is half done.
                owner, last_seq = conn.execute(
                    "INSERT INTO sessions(session_id, user_id, created_at, updated_at, last_seq, "
                    "message_count, total_tokens) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT(session_id) DO UPDATE SET "
                    "user_id = COALESCE(sessions.user_id, excluded.user_id), "
                    "last_seq = sessions.last_seq + excluded.last_seq, "
                    "message_count = sessions.message_count + excluded.message_count, "
                    "total_tokens = sessions.total_tokens + excluded.total_tokens, "
                    "updated_at = excluded.updated_at "
                    "RETURNING user_id, last_seq",
                    (session_id, user_id, now, now, len(messages), len(messages), tokens),
                ).fetchone()
                check_owner(session_id, owner, user_id)
                first = last_seq - len(messages)
                # Rows from the messages given, not from their copies with a seq: a message the
                # memory checked keeps the JSON its check encoded (see `checked_messages`).
                rows = [
                    (session_id, *message_to_record(m, seq=first + i + 1).values())
                    for i, m in enumerate(messages)
                ]
                conn.executemany(
                    f"INSERT INTO messages(session_id, {_COLUMNS}) VALUES ({_PLACEHOLDERS})", rows
                )
                stored = [dataclasses.replace(m, seq=first + i + 1) for i, m in enumerate(messages)]
        except sqlite3.Error as exc:
            raise StoreError(f"append to session {session_id!r} in {self.path} failed: {exc}") from exc
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(
                f"a message for session {session_id!r} is not valid UTF-8 text ({exc.reason}); "
                "nothing was stored. Build messages with Message.create, which rejects lone surrogates"
            ) from None
        return stored

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        upper = seq_bound(through_seq) if through_seq is not None else MAX_SEQ
        rows = self._read(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
            (session_id, seq_bound(after_seq), upper),
        )
        return self._decode(rows, session_id)

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        if limit <= 0:
            return []
        upper = seq_bound(before_seq) if before_seq is not None else MAX_SEQ + 1
        rows = self._read(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (session_id, upper, limit),
        )
        rows.reverse()
        return self._decode(rows, session_id)

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        wanted = readable_seqs(seqs)
        found: list[Message] = []
        for chunk, placeholders in in_lists(wanted, _IDS_PER_QUERY):
            rows = self._read(
                f"SELECT {_COLUMNS} FROM messages "
                f"WHERE session_id = ? AND seq IN ({placeholders}) ORDER BY seq",
                (session_id, *chunk),
            )
            found.extend(self._decode(rows, session_id))
        return found

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        check_seq(seq)
        with self._pool.transaction() as conn:
            updated = conn.execute(
                "UPDATE messages SET status = ? WHERE session_id = ? AND seq = ?",
                (status.value, session_id, seq),
            ).rowcount
            if updated:
                conn.execute(
                    "UPDATE sessions SET updated_at = ? WHERE session_id = ?", (time.time(), session_id)
                )
        if not updated:
            raise InvalidMessageError(f"session {session_id!r} has no message with seq={seq}")
        return self.get(session_id, [seq])[0]

    def stats(self, session_id: str) -> SessionStats:
        rows = self._read(f"{_SESSION_STATS} WHERE session_id = ?", (session_id,))
        return SessionStats(*rows[0]) if rows else SessionStats(session_id, 0, 0, 0)

    def read_logs(self, session_ids: Sequence[str]) -> dict[str, LogRead]:
        """Each session's stats, whole log and stats again, three queries per 500 sessions
        (see `ReadsLogs`): what recall reads of a returning user when it indexes in the
        process (with an embedder, or ``lexical_index="process"``)."""
        ids = list(dict.fromkeys(session_ids))
        found: dict[str, LogRead] = {}
        for chunk, marks in in_lists(ids, _IDS_PER_QUERY):
            before = self._stats_of_many(chunk, marks)
            logs: dict[str, list[tuple[Any, ...]]] = {session_id: [] for session_id in chunk}
            for row in self._read(
                f"SELECT session_id, {_COLUMNS} FROM messages WHERE session_id IN ({marks}) "
                "ORDER BY session_id, seq",
                chunk,
            ):
                logs[row[0]].append(row[1:])
            after = self._stats_of_many(chunk, marks)
            for session_id in chunk:
                found[session_id] = LogRead(
                    before[session_id], self._decode(logs[session_id], session_id), after[session_id]
                )
        return found

    def _stats_of_many(self, session_ids: Sequence[str], marks: str) -> dict[str, SessionStats]:
        rows = self._read(f"{_SESSION_STATS} WHERE session_id IN ({marks})", session_ids)
        found = {session_id: SessionStats(session_id, 0, 0, 0) for session_id in session_ids}
        found.update((row[0], SessionStats(*row)) for row in rows)
        return found

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        wanted = validate_seqs(seqs)
        if not wanted:
            return []
        with self._pool.transaction() as conn:
            doomed = self._locked_messages(conn, session_id, wanted)
            reset_indexed(conn, [session_id])
            conn.executemany(
                "DELETE FROM messages WHERE session_id = ? AND seq = ?", [(session_id, s) for s in wanted]
            )
            self._log_changed(conn, session_id, -len(doomed), -sum(m.token_count or 0 for m in doomed))
        self._pool.checkpoint()  # the deleted text must not stay in the -wal file
        return doomed

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        check_seq(seq)
        (message,) = validate_messages([message])
        stored = dataclasses.replace(message, seq=seq)
        record = message_to_record(stored)
        try:
            with self._pool.transaction() as conn:
                (old,) = self._locked_messages(conn, session_id, [seq])
                reset_indexed(conn, [session_id])
                conn.execute(
                    f"UPDATE messages SET ({_COLUMNS}) = ({', '.join('?' * len(record))}) "
                    "WHERE session_id = ? AND seq = ?",
                    (*record.values(), session_id, seq),
                )
                self._log_changed(conn, session_id, 0, (stored.token_count or 0) - (old.token_count or 0))
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(
                f"the replacement for seq={seq} of session {session_id!r} is not valid UTF-8 text "
                f"({exc.reason}); nothing was replaced"
            ) from None
        self._pool.checkpoint()
        return stored

    def _locked_messages(self, conn: sqlite3.Connection, session_id: str, seqs: list[int]) -> list[Message]:
        """The messages `seqs` inside a write transaction; every one must exist."""
        found: list[Message] = []
        for chunk, marks in in_lists(seqs, _IDS_PER_QUERY):
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq IN ({marks}) ORDER BY seq",
                (session_id, *chunk),
            ).fetchall()
            found.extend(self._decode(rows, session_id))
        if len(found) != len(seqs):
            present = {m.seq for m in found}
            raise missing_seqs_error(session_id, [s for s in seqs if s not in present])
        return found

    @staticmethod
    def _log_changed(conn: sqlite3.Connection, session_id: str, count_delta: int, token_delta: int) -> None:
        conn.execute(
            "UPDATE sessions SET message_count = message_count + ?, total_tokens = total_tokens + ?, "
            f"generation = {NEW_GENERATION}, updated_at = ? WHERE session_id = ?",
            (count_delta, token_delta, time.time(), session_id),
        )

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        rows = self._read(
            "SELECT value, version FROM state WHERE session_id = ? AND key = ?", (session_id, key)
        )
        return StateRecord(rows[0][0], rows[0][1]) if rows else None

    def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one, in a query per 500 ids
        (a user's facts are read from all their sessions for each build)."""
        ids = tuple(dict.fromkeys(session_ids))

        def read() -> dict[str, StateRecord]:
            found: dict[str, StateRecord] = {}
            for chunk, marks in in_lists(ids, _IDS_PER_QUERY):
                rows = self._read(
                    f"SELECT session_id, value, version FROM state WHERE key = ? AND session_id IN ({marks})",
                    (key, *chunk),
                )
                found.update((row[0], StateRecord(row[1], row[2])) for row in rows)
            return found

        return dict(self._unchanged(("states", key, ids), read))

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        with self._pool.transaction() as conn:
            if requires_seq is not None:
                session = conn.execute(
                    "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()
                if session is None or session[0] < requires_seq:
                    return None
            row = conn.execute(
                "SELECT version FROM state WHERE session_id = ? AND key = ?", (session_id, key)
            ).fetchone()
            current = row[0] if row else 0
            if expected_version is not None and expected_version != current:
                return None
            now = time.time()
            # A state-only session is still a session: listed, forgotten and expired like any other.
            self._touch(conn, session_id, now)
            conn.execute(
                "INSERT INTO state(session_id, key, value, version, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT(session_id, key) DO UPDATE SET value = excluded.value, "
                "version = excluded.version, updated_at = excluded.updated_at",
                (session_id, key, value, current + 1, now),
            )
        return StateRecord(value, current + 1)

    def delete_state(self, session_id: str, key: str) -> None:
        with self._pool.transaction() as conn:
            deleted = conn.execute(
                "DELETE FROM state WHERE session_id = ? AND key = ?", (session_id, key)
            ).rowcount
            if deleted:
                conn.execute(
                    "UPDATE sessions SET updated_at = ? WHERE session_id = ?", (time.time(), session_id)
                )

    def clear(self, session_id: str) -> None:
        with self._pool.transaction() as conn:
            self._delete_sessions(conn, [session_id])
        # Also when nothing was deleted: a repeated clear retries a checkpoint that was held back.
        self._pool.checkpoint()

    def users_page(self, offset: int, limit: int) -> tuple[list[UserTotals], int]:
        """Users and their totals a page at a time, from the sessions table alone."""
        rows = self._read(
            "SELECT user_id, count(*), sum(message_count), sum(total_tokens), min(created_at), "
            "max(updated_at) FROM sessions GROUP BY user_id ORDER BY user_id IS NULL, user_id "
            "LIMIT ? OFFSET ?",
            (limit, offset),
        )
        ((total,),) = self._read(
            "SELECT count(DISTINCT user_id) + coalesce(max(user_id IS NULL), 0) FROM sessions", ()
        )
        users = [
            UserTotals(None if u is None else str(u), int(n), int(m or 0), int(t or 0), first, last)
            for u, n, m, t, first, last in rows
        ]
        return users, int(total or 0)

    def sessions_page(self, user_id: str | None, offset: int, limit: int) -> tuple[list[SessionStats], int]:
        """The stats of one user's sessions (or of those without a user) a page at a time."""
        where = "user_id IS NULL" if user_id is None else "user_id = ?"
        params: tuple[object, ...] = () if user_id is None else (user_id,)
        rows = self._read(
            f"{_SESSION_STATS} WHERE {where} ORDER BY session_id LIMIT ? OFFSET ?", (*params, limit, offset)
        )
        ((total,),) = self._read(f"SELECT count(*) FROM sessions WHERE {where}", params)
        return [SessionStats(*row) for row in rows], int(total)

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id, in one query (what a memory
        that shares across the user's sessions reads for each build)."""

        def read() -> list[SessionStats]:
            rows = self._read(f"{_SESSION_STATS} WHERE user_id = ? ORDER BY session_id", (user_id,))
            return [SessionStats(*row) for row in rows]

        return list(self._unchanged(("user sessions", user_id), read))

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        if user_id is None:
            rows = self._read("SELECT session_id FROM sessions ORDER BY session_id", ())
        else:
            rows = self._read(
                "SELECT session_id FROM sessions WHERE user_id = ? ORDER BY session_id", (user_id,)
            )
        return [row[0] for row in rows]

    def forget_user(self, user_id: str) -> list[str]:
        with self._pool.transaction() as conn:
            doomed = [
                row[0]
                for row in conn.execute(
                    "SELECT session_id FROM sessions WHERE user_id = ? ORDER BY session_id", (user_id,)
                )
            ]
            self._delete_sessions(conn, doomed)
        if doomed:
            self._pool.checkpoint()
        return doomed

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete sessions idle longer than `older_than_seconds` (a sweep by last write time)."""
        cutoff = idle_cutoff(older_than_seconds, time.time())
        with self._pool.transaction() as conn:
            doomed = [
                row[0]
                for row in conn.execute(
                    "SELECT session_id FROM sessions WHERE updated_at < ? ORDER BY session_id", (cutoff,)
                )
            ]
            self._delete_sessions(conn, doomed)
        if doomed:
            self._pool.checkpoint()
        return doomed

    def _delete_sessions(self, conn: sqlite3.Connection, session_ids: list[str]) -> None:
        if not session_ids:
            return
        forget_indexed(conn, session_ids)
        for table in ("messages", "state", "sessions"):
            conn.executemany(f"DELETE FROM {table} WHERE session_id = ?", [(sid,) for sid in session_ids])

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close every connection this store opened, from any thread.

        A call in progress on another thread finishes first; every call after
        `close` raises `StoreError`. Closing twice does nothing.
        """
        self._pool.close()
