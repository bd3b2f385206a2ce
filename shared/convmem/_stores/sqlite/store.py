"""`SQLiteStore`: the embedded, durable default. One file, WAL journal.

Connections come from a small pool: each call borrows one, runs its SQL and
gives it back, so a server that starts and ends threads for months keeps at
most ``pool_size`` idle connections open, not one per thread it ever had. A
connection is used by one thread at a time. Every append runs in a ``BEGIN
IMMEDIATE`` transaction, so threads and processes writing to one file
serialize on SQLite's own lock and each message gets exactly one seq. The file
is a normal SQLite database: ``sqlite3 memory.db "select role, content from
messages"`` shows a log.

With ``lexical_index="fts5"`` recall's lexical index lives in the same file
(SQLite FTS5, see `_sqlite_lexical`): recall writes its documents, and the
deleting calls remove the documents of what they delete in the same
transaction. The tables exist in every file of schema 4; by default they stay
empty and recall keeps BM25 in each process.

Deleted conversations leave no copy behind: every connection sets
``secure_delete`` (freed pages are zeroed, on every build of SQLite), the FTS
index is merged after a delete so no segment keeps deleted terms, and each
deleting call ends with a checkpoint that empties the ``-wal`` file, which
would otherwise keep the pages as they were before the delete.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ..._models import Message, TurnStatus
from ..base import (
    SessionStats,
    StateRecord,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    validate_messages,
    validate_seqs,
)
from ..codec import message_from_record, message_to_record
from .lexical import (
    create_lexical_schema,
    ensure_lexical_schema,
    purge_deleted_terms,
    sessions_have_documents,
)

__all__ = ["SQLiteStore"]

logger = logging.getLogger("convmem")

# 2: messages.reply_to_seq; 3: sessions.generation (both added to an older file when it is opened);
# 4: recall's lexical index (FTS5 tables and triggers, `_sqlite_lexical`), created in an older file.
_SCHEMA_VERSION = 4
_SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    session_id   TEXT PRIMARY KEY,
    user_id      TEXT,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    last_seq     INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    generation   TEXT
);
CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id);
CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions(updated_at);
CREATE TABLE IF NOT EXISTS messages (
    session_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    name         TEXT,
    tool_calls   TEXT,
    tool_call_id TEXT,
    metadata     TEXT,
    status       TEXT NOT NULL,
    ts           REAL NOT NULL,
    token_count  INTEGER,
    reply_to_seq INTEGER,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS state (
    session_id   TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    version      INTEGER NOT NULL,
    updated_at   REAL NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
"""
_COLUMNS = (
    "seq, role, content, name, tool_calls, tool_call_id, metadata, status, ts, token_count, reply_to_seq"
)
_PLACEHOLDERS = ", ".join("?" * (1 + len(_COLUMNS.split(", "))))
# Columns later versions added to a table, for files created before them: (table, column, type).
_ADDED_COLUMNS = (("messages", "reply_to_seq", "INTEGER"), ("sessions", "generation", "TEXT"))
# Schema 3: the log's generation (see `Store`). A trigger gives every new session row
# one, so no insert has to name the column; deleting or replacing messages sets a new one.
_NEW_GENERATION = "lower(hex(randomblob(8)))"
_GENERATION_TRIGGER = f"""
CREATE TRIGGER IF NOT EXISTS sessions_generation AFTER INSERT ON sessions
WHEN NEW.generation IS NULL
BEGIN
    UPDATE sessions SET generation = {_NEW_GENERATION} WHERE session_id = NEW.session_id;
END;
"""
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
# A checkpoint waits for other processes' writes and reads to finish; a delete has
# already committed by then, so it should not wait for them as long as a write would.
_CHECKPOINT_WAIT_SECONDS = 5.0


DEFAULT_POOL_SIZE = 4
_MAX_POOL_SIZE = 256
# SQLite's busy timeout is a 32-bit count of milliseconds; a day is far more than any writer should wait.
_MAX_TIMEOUT_SECONDS = 86_400.0
# Connections a forked child inherited: used by the parent, so the child neither uses
# nor closes them (closing could checkpoint or unlink the parent's WAL under it).
_inherited_from_parent: list[object] = []


@dataclasses.dataclass(eq=False)
class _Connection:
    """One pooled connection, and the lock held while a call runs SQL on it.

    `SQLiteStore.close` takes the lock before closing: closing a connection while
    another thread is inside a statement on it can crash the process.
    """

    sqlite: sqlite3.Connection
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    closed: bool = False


class SQLiteStore:
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
            sessions. ``"process"`` (default): BM25 in each process, read from
            the log on first use and bounded by `Recall`'s ``max_sessions``.
            ``"fts5"``: SQLite FTS5 tables in this file, shared by every
            process, so a new process does not index a session again and a
            long session costs a quarter of the memory. It costs a file about
            four times larger, a slower search (one FTS5 query per session
            searched) and, after a deletion, a merge of the whole index so no
            deleted term stays on disk (see `convmem._sqlite_lexical`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout: float = 30.0,
        synchronous: str = "NORMAL",
        pool_size: int = DEFAULT_POOL_SIZE,
        lexical_index: str = "process",
    ) -> None:
        if str(path) == ":memory:":
            raise ConfigError("SQLiteStore needs a file path; for a memory-only store use InMemoryStore()")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout):
            raise ConfigError(
                f"SQLiteStore timeout must be a finite number of seconds (0 to {_MAX_TIMEOUT_SECONDS:.0f}), "
                f"got {timeout!r}"
            )
        if not 0 <= timeout <= _MAX_TIMEOUT_SECONDS:
            raise ConfigError(
                f"SQLiteStore timeout must be between 0 and {_MAX_TIMEOUT_SECONDS:.0f} seconds, got {timeout!r}"
            )
        if not isinstance(synchronous, str) or synchronous.upper() not in _SYNCHRONOUS:
            raise ConfigError(
                f"SQLiteStore synchronous must be one of {_SYNCHRONOUS} (a str), got {synchronous!r}"
            )
        if (
            isinstance(pool_size, bool)
            or not isinstance(pool_size, int)
            or not 1 <= pool_size <= _MAX_POOL_SIZE
        ):
            raise ConfigError(
                f"SQLiteStore pool_size must be an int from 1 to {_MAX_POOL_SIZE}, got {pool_size!r}"
            )
        if lexical_index not in ("process", "fts5"):
            raise ConfigError(
                f"SQLiteStore lexical_index must be 'process' (BM25 in each process) or 'fts5' (FTS5 "
                f"tables in the file), got {lexical_index!r:.60}"
            )
        self.lexical_index = lexical_index
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._timeout = float(timeout)
        self._synchronous = synchronous.upper()
        self._pool_size = pool_size
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._pool_lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        # Whether recall's lexical index passed its integrity check through this object (`_sqlite_lexical`).
        self._lexical_checked = False
        try:
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{self.path} is not a usable SQLite database: {exc}") from exc
        except StoreError:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    def _migrate(self) -> None:
        """Create the tables, or bring a file written by an older convmem up to date.

        One ``BEGIN IMMEDIATE`` transaction: processes opening an old file at once
        migrate it exactly once.
        """
        with self._connection() as conn:
            if conn.execute("PRAGMA user_version").fetchone()[0] == _SCHEMA_VERSION:
                return
            conn.execute("BEGIN IMMEDIATE")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > _SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} was written by a newer convmem (schema {version} > "
                    f"{_SCHEMA_VERSION}); upgrade convmem to open it"
                )
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    conn.execute(statement)
            self._add_columns(conn)
            conn.execute(f"UPDATE sessions SET generation = {_NEW_GENERATION} WHERE generation IS NULL")
            conn.execute(_GENERATION_TRIGGER)
            create_lexical_schema(conn)
            conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
            conn.execute("COMMIT")

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the file, as every process opening it names it."""
        return f"sqlite:{self.path.resolve()}"

    @property
    def closed(self) -> bool:
        """True once `close` was called; every call then raises `StoreError`."""
        return self._closed

    # -- connections -------------------------------------------------------------

    def _closed_error(self) -> StoreError:
        return StoreError(f"{self!r} is closed; open a new SQLiteStore to use the file again")

    def _borrow(self) -> _Connection:
        with self._pool_lock:
            if self._closed:
                raise self._closed_error()
            if self._pid != os.getpid():
                _inherited_from_parent.extend(handle.sqlite for handle in self._open)
                self._idle, self._open, self._pid = [], set(), os.getpid()
            if self._idle:
                return self._idle.pop()
        handle = _Connection(self._connect())
        with self._pool_lock:
            # Checked again under the lock: a close() that ran meanwhile would never see this one.
            if not self._closed:
                self._open.add(handle)
                return handle
        handle.sqlite.close()
        raise self._closed_error()

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(
                self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
            # Distributions differ in the compiled-in default; deleted text must be gone on all of them.
            conn.execute("PRAGMA secure_delete=ON")
        except sqlite3.Error as exc:
            conn.close()
            raise StoreError(f"cannot open SQLite store {self.path}: {exc}") from exc
        return conn

    def _give_back(self, handle: _Connection, reusable: bool) -> None:
        """Return a borrowed connection to the pool, or close it when the pool is full."""
        with self._pool_lock:
            if handle not in self._open:  # closed by close(), or inherited across a fork
                return
            if reusable and not self._closed and len(self._idle) < self._pool_size:
                self._idle.append(handle)
                return
            self._open.discard(handle)
        with handle.lock:
            handle.closed = True
            with suppress(sqlite3.Error):
                handle.sqlite.close()

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """A connection for this call alone, which `close` cannot close while it is in use."""
        handle = self._borrow()
        reusable = False
        try:
            with handle.lock:
                if handle.closed:
                    raise self._closed_error()
                try:
                    yield handle.sqlite
                finally:
                    # The next borrower must never inherit an open transaction.
                    self._rollback(handle.sqlite)
                    reusable = not handle.sqlite.in_transaction
        finally:
            self._give_back(handle, reusable)

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a write on {self.path}: {exc}") from exc
            try:
                yield conn
            except BaseException as exc:
                self._rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"write to {self.path} failed and was rolled back: {exc}") from exc
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    self._rollback(conn)
                    raise StoreError(f"commit to {self.path} failed: {exc}") from exc

    def _checkpoint(self) -> None:
        """Empty the write-ahead log after a delete; best effort, logged when held back.

        Until a checkpoint the ``-wal`` file keeps the pages as they were before
        the delete, so deleted text stays readable on disk. A TRUNCATE checkpoint
        copies the current pages (deleted rows zeroed by ``secure_delete``) into
        the database and empties the log. A long read or write in another
        process can hold it back; the next delete (or the same `clear` again)
        tries once more.
        """
        wait_ms = int(min(self._timeout, _CHECKPOINT_WAIT_SECONDS) * 1000)
        try:
            with self._connection() as conn:
                conn.execute(f"PRAGMA busy_timeout={wait_ms}")
                try:
                    busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
                finally:
                    conn.execute(f"PRAGMA busy_timeout={int(self._timeout * 1000)}")
        except (sqlite3.Error, StoreError) as exc:
            busy, reason = 1, str(exc)
        else:
            reason = "another connection is reading or writing"
        if busy:
            logger.warning(
                "deleted conversations may stay in %s-wal until SQLite's next checkpoint (%s)",
                self.path,
                reason,
            )

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        # After some errors SQLite has already rolled back; a second ROLLBACK would
        # raise and hide the error that matters.
        if conn.in_transaction:
            with suppress(sqlite3.Error):
                conn.execute("ROLLBACK")

    @staticmethod
    def _touch(conn: sqlite3.Connection, session_id: str, now: float) -> None:
        conn.execute(
            "INSERT INTO sessions(session_id, created_at, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT(session_id) DO UPDATE SET updated_at = excluded.updated_at",
            (session_id, now, now),
        )

    @staticmethod
    def _add_columns(conn: sqlite3.Connection) -> None:
        """Bring a file written by an older convmem up to date; adding a nullable column
        leaves every stored row as it was, and older rows read it as NULL."""
        for table, column, kind in _ADDED_COLUMNS:
            present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
            if column not in present:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    @staticmethod
    def _check_owner(conn: sqlite3.Connection, session_id: str, user_id: str | None) -> None:
        if user_id is None:
            return
        row = conn.execute("SELECT user_id FROM sessions WHERE session_id = ?", (session_id,)).fetchone()
        check_owner(session_id, row[0] if row else None, user_id)

    def _read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            with self._connection() as conn:
                return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"read from {self.path} failed: {exc}") from exc

    @staticmethod
    def _decode(rows: list[tuple[Any, ...]], session_id: str) -> list[Message]:
        names = _COLUMNS.split(", ")
        return [message_from_record(dict(zip(names, row, strict=True)), session_id) for row in rows]

    # -- the Store protocol ----------------------------------------------------

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        messages = validate_messages(messages)
        now = time.time()
        try:
            with self._transaction() as conn:
                self._check_owner(conn, session_id, user_id)
                conn.execute(
                    "INSERT INTO sessions(session_id, user_id, created_at, updated_at) VALUES (?, ?, ?, ?) "
                    "ON CONFLICT(session_id) DO UPDATE SET "
                    "user_id = COALESCE(sessions.user_id, excluded.user_id)",
                    (session_id, user_id, now, now),
                )
                last_seq = conn.execute(
                    "SELECT last_seq FROM sessions WHERE session_id = ?", (session_id,)
                ).fetchone()[0]
                stored = [dataclasses.replace(m, seq=last_seq + i + 1) for i, m in enumerate(messages)]
                conn.executemany(
                    f"INSERT INTO messages(session_id, {_COLUMNS}) VALUES ({_PLACEHOLDERS})",
                    [(session_id, *message_to_record(m).values()) for m in stored],
                )
                conn.execute(
                    "UPDATE sessions SET last_seq = ?, message_count = message_count + ?, "
                    "total_tokens = total_tokens + ?, updated_at = ? WHERE session_id = ?",
                    (
                        last_seq + len(stored),
                        len(stored),
                        sum(m.token_count or 0 for m in stored),
                        now,
                        session_id,
                    ),
                )
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
        upper = through_seq if through_seq is not None else 2**62
        rows = self._read(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq > ? AND seq <= ? ORDER BY seq",
            (session_id, after_seq, upper),
        )
        return self._decode(rows, session_id)

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        if limit <= 0:
            return []
        upper = before_seq if before_seq is not None else 2**62
        rows = self._read(
            f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?",
            (session_id, upper, limit),
        )
        rows.reverse()
        return self._decode(rows, session_id)

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        wanted = sorted({int(s) for s in seqs})
        found: list[Message] = []
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            placeholders = ",".join("?" * len(chunk))
            rows = self._read(
                f"SELECT {_COLUMNS} FROM messages "
                f"WHERE session_id = ? AND seq IN ({placeholders}) ORDER BY seq",
                (session_id, *chunk),
            )
            found.extend(self._decode(rows, session_id))
        return found

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        with self._transaction() as conn:
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
        rows = self._read(
            "SELECT message_count, last_seq, total_tokens, user_id, created_at, updated_at, generation "
            "FROM sessions WHERE session_id = ?",
            (session_id,),
        )
        if not rows:
            return SessionStats(session_id, 0, 0, 0)
        count, last_seq, tokens, user_id, created, updated, generation = rows[0]
        return SessionStats(session_id, count, last_seq, tokens, user_id, created, updated, generation)

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        wanted = validate_seqs(seqs)
        if not wanted:
            return []
        with self._transaction() as conn:
            doomed = self._locked_messages(conn, session_id, wanted)
            indexed = self._before_delete(conn, [session_id])
            conn.executemany(
                "DELETE FROM messages WHERE session_id = ? AND seq = ?", [(session_id, s) for s in wanted]
            )
            self._log_changed(conn, session_id, -len(doomed), -sum(m.token_count or 0 for m in doomed))
            if indexed:
                purge_deleted_terms(conn)
        self._checkpoint()  # the deleted text must not stay in the -wal file
        return doomed

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        check_seq(seq)
        (message,) = validate_messages([message])
        stored = dataclasses.replace(message, seq=seq)
        record = message_to_record(stored)
        try:
            with self._transaction() as conn:
                (old,) = self._locked_messages(conn, session_id, [seq])
                indexed = self._before_delete(conn, [session_id])
                conn.execute(
                    f"UPDATE messages SET ({_COLUMNS}) = ({', '.join('?' * len(record))}) "
                    "WHERE session_id = ? AND seq = ?",
                    (*record.values(), session_id, seq),
                )
                self._log_changed(conn, session_id, 0, (stored.token_count or 0) - (old.token_count or 0))
                if indexed:
                    purge_deleted_terms(conn)
        except UnicodeEncodeError as exc:
            raise InvalidMessageError(
                f"the replacement for seq={seq} of session {session_id!r} is not valid UTF-8 text "
                f"({exc.reason}); nothing was replaced"
            ) from None
        self._checkpoint()
        return stored

    def _locked_messages(self, conn: sqlite3.Connection, session_id: str, seqs: list[int]) -> list[Message]:
        """The messages `seqs` inside a write transaction; every one must exist."""
        found: list[Message] = []
        for start in range(0, len(seqs), 500):
            chunk = seqs[start : start + 500]
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? "
                f"AND seq IN ({','.join('?' * len(chunk))}) ORDER BY seq",
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
            f"generation = {_NEW_GENERATION}, updated_at = ? WHERE session_id = ?",
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
        found: dict[str, StateRecord] = {}
        ids = list(dict.fromkeys(session_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            rows = self._read(
                f"SELECT session_id, value, version FROM state WHERE key = ? AND session_id IN "
                f"({','.join('?' * len(chunk))})",
                (key, *chunk),
            )
            found.update((row[0], StateRecord(row[1], row[2])) for row in rows)
        return found

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        with self._transaction() as conn:
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
        with self._transaction() as conn:
            deleted = conn.execute(
                "DELETE FROM state WHERE session_id = ? AND key = ?", (session_id, key)
            ).rowcount
            if deleted:
                conn.execute(
                    "UPDATE sessions SET updated_at = ? WHERE session_id = ?", (time.time(), session_id)
                )

    def clear(self, session_id: str) -> None:
        with self._transaction() as conn:
            self._delete_sessions(conn, [session_id])
        # Also when nothing was deleted: a repeated clear retries a checkpoint that was held back.
        self._checkpoint()

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id, in one query (what a memory
        that shares across the user's sessions reads for each build)."""
        rows = self._read(
            "SELECT session_id, message_count, last_seq, total_tokens, user_id, created_at, updated_at, "
            "generation FROM sessions WHERE user_id = ? ORDER BY session_id",
            (user_id,),
        )
        return [SessionStats(*row) for row in rows]

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        if user_id is None:
            rows = self._read("SELECT session_id FROM sessions ORDER BY session_id", ())
        else:
            rows = self._read(
                "SELECT session_id FROM sessions WHERE user_id = ? ORDER BY session_id", (user_id,)
            )
        return [row[0] for row in rows]

    def forget_user(self, user_id: str) -> list[str]:
        with self._transaction() as conn:
            doomed = [
                row[0]
                for row in conn.execute(
                    "SELECT session_id FROM sessions WHERE user_id = ? ORDER BY session_id", (user_id,)
                )
            ]
            self._delete_sessions(conn, doomed)
        if doomed:
            self._checkpoint()
        return doomed

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete sessions idle longer than `older_than_seconds` (a sweep by last write time)."""
        cutoff = idle_cutoff(older_than_seconds, time.time())
        with self._transaction() as conn:
            doomed = [
                row[0]
                for row in conn.execute(
                    "SELECT session_id FROM sessions WHERE updated_at < ? ORDER BY session_id", (cutoff,)
                )
            ]
            self._delete_sessions(conn, doomed)
        if doomed:
            self._checkpoint()
        return doomed

    def _before_delete(self, conn: sqlite3.Connection, session_ids: list[str]) -> bool:
        """Inside a deleting transaction: make sure the lexical tables the triggers on
        ``messages`` write to exist; True when these sessions have lexical documents
        (the FTS index is then merged after the delete: `purge_deleted_terms`)."""
        ensure_lexical_schema(conn, self.path)
        return sessions_have_documents(conn, session_ids)

    def _delete_sessions(self, conn: sqlite3.Connection, session_ids: list[str]) -> None:
        if not session_ids:
            return
        indexed = self._before_delete(conn, session_ids)
        # Documents first, in one statement per session: the per-message triggers then find none.
        for table in ("recall_docs", "recall_sessions", "messages", "state", "sessions"):
            conn.executemany(f"DELETE FROM {table} WHERE session_id = ?", [(sid,) for sid in session_ids])
        if indexed:
            purge_deleted_terms(conn)

    def close(self) -> None:
        """Close every connection this store opened, from any thread.

        A call in progress on another thread finishes first; every call after
        `close` raises `StoreError`. Closing twice does nothing.
        """
        with self._pool_lock:
            self._closed = True
            handles, self._open, self._idle = self._open, set(), []
        for handle in handles:
            with handle.lock:
                handle.closed = True
                with suppress(sqlite3.Error):
                    handle.sqlite.close()
