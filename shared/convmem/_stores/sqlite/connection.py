"""The connections of a `SQLiteStore`: a small pool, transactions, and checkpoints.

Each call borrows a connection, runs its SQL and gives it back, so a server
that starts and ends threads for months keeps at most ``pool_size`` idle
connections open, not one per thread it ever had. A connection is used by one
thread at a time. Writes run in ``BEGIN IMMEDIATE`` transactions, so threads
and processes writing to one file serialize on SQLite's own lock.

Every connection sets ``secure_delete`` (freed pages are zeroed, on every build
of SQLite), and `ConnectionPool.checkpoint` empties the ``-wal`` file after a
delete, which would otherwise keep the pages as they were before it.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TypeVar

from ..._errors import StoreError

__all__ = [
    "DEFAULT_POOL_SIZE",
    "MAX_POOL_SIZE",
    "MAX_TIMEOUT_SECONDS",
    "SYNCHRONOUS",
    "ConnectionPool",
    "in_lists",
]

logger = logging.getLogger("convmem")

SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
DEFAULT_POOL_SIZE = 4
MAX_POOL_SIZE = 256
# SQLite's busy timeout is a 32-bit count of milliseconds; a day is far more than any writer should wait.
MAX_TIMEOUT_SECONDS = 86_400.0
# A checkpoint waits for other processes' writes and reads to finish; a delete has
# already committed by then, so it should not wait for them as long as a write would.
_CHECKPOINT_WAIT_SECONDS = 5.0
# Connections a forked child inherited: used by the parent, so the child neither uses
# nor closes them (closing could checkpoint or unlink the parent's WAL under it).
_inherited_from_parent: list[object] = []
# Results `ConnectionPool.unchanged` keeps (a few per user a process builds for).
_KEPT_READS = 128


_T = TypeVar("_T")


def in_lists(values: Sequence[_T], size: int) -> Iterator[tuple[list[_T], str]]:
    """`values` in lists of at most `size`, what one ``IN (...)`` list binds (SQLite before
    3.32 binds at most 999 values per statement), each with its placeholders ``?,?,...``."""
    for start in range(0, len(values), size):
        chunk = list(values[start : start + size])
        yield chunk, ",".join("?" * len(chunk))


@dataclasses.dataclass(eq=False)
class _Connection:
    """One pooled connection, and the lock held while a call runs SQL on it.

    `ConnectionPool.close` takes the lock before closing: closing a connection while
    another thread is inside a statement on it can crash the process.
    """

    sqlite: sqlite3.Connection
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)
    closed: bool = False


class ConnectionPool:
    """Connections to one SQLite file, shared by the threads of a process (see the module docstring)."""

    def __init__(self, path: Path, *, timeout: float, synchronous: str, pool_size: int) -> None:
        self.path = path
        self._timeout = timeout
        self._synchronous = synchronous
        self._pool_size = pool_size
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._closed = False
        # The connection `data_version` asks, which never writes (opened on first use).
        self._watch: _Connection | None = None
        # What `unchanged` keeps: results by key, all of one data version.
        self._kept: OrderedDict[Hashable, Any] = OrderedDict()
        self._kept_version: int | None = None
        self._kept_lock = threading.Lock()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def idle_count(self) -> int:
        """Connections kept open between calls (at most ``pool_size``)."""
        return len(self._idle)

    def _closed_error(self) -> StoreError:
        return StoreError(
            f"SQLiteStore({str(self.path)!r}) is closed; open a new SQLiteStore to use the file again"
        )

    def _borrow(self) -> _Connection:
        with self._lock:
            if self._closed:
                raise self._closed_error()
            self._leave_the_parents_connections()
            if self._idle:
                return self._idle.pop()
        handle = _Connection(self._connect())
        with self._lock:
            # Checked again under the lock: a close() that ran meanwhile would never see this one.
            if not self._closed:
                self._open.add(handle)
                return handle
        handle.sqlite.close()
        raise self._closed_error()

    def _leave_the_parents_connections(self) -> None:
        """In a forked child (the lock held): every connection open, the one `data_version`
        asks included, is the parent's, and what `unchanged` kept was counted by the
        parent's connection, not one the child will ask."""
        if self._pid == os.getpid():
            return
        _inherited_from_parent.extend(handle.sqlite for handle in self._open)
        if self._watch is not None:
            _inherited_from_parent.append(self._watch.sqlite)
        self._idle, self._open, self._watch, self._pid = [], set(), None, os.getpid()
        self._forget_kept()

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
        with self._lock:
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
    def connection(self) -> Iterator[sqlite3.Connection]:
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
                    rollback(handle.sqlite)
                    reusable = not handle.sqlite.in_transaction
        finally:
            self._give_back(handle, reusable)

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A ``BEGIN IMMEDIATE`` write, committed when the block ends and rolled back when it raises."""
        with self.connection() as conn:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"cannot start a write on {self.path}: {exc}") from exc
            try:
                yield conn
            except BaseException as exc:
                rollback(conn)
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"write to {self.path} failed and was rolled back: {exc}") from exc
                raise
            else:
                try:
                    conn.execute("COMMIT")
                except sqlite3.Error as exc:
                    rollback(conn)
                    raise StoreError(f"commit to {self.path} failed: {exc}") from exc
                finally:
                    self._forget_kept()

    def read(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        try:
            with self.connection() as conn:
                return conn.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"read from {self.path} failed: {exc}") from exc

    def checkpoint(self) -> None:
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
            with self.connection() as conn:
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

    def data_version(self) -> int | None:
        """A number that changes whenever a connection of any process commits to the file:
        reads made while it stays the same return the same rows. SQLite's ``PRAGMA
        data_version``, asked of a connection kept for it that never writes (the number
        counts the commits of every other connection, those of this pool included). None
        when it cannot be asked: the caller then reads the file."""
        with self._lock:
            if self._closed:
                return None
            self._leave_the_parents_connections()
            if self._watch is None:
                try:
                    # Opened once per pool, under the lock (opening touches no file lock), and
                    # with none of the settings of a connection that writes: it only asks.
                    self._watch = _Connection(
                        sqlite3.connect(
                            self.path, timeout=self._timeout, isolation_level=None, check_same_thread=False
                        )
                    )
                except sqlite3.Error:
                    return None
            watch = self._watch
        with watch.lock:
            if watch.closed:
                return None
            try:
                return int(watch.sqlite.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error:
                return None

    def unchanged(self, key: Hashable, read: Callable[[], _T]) -> _T:
        """What `read` returns, kept under `key` while the file is unchanged
        (`data_version`), for reads every build repeats (the stats of a user's sessions,
        their facts records, recall's index of their history: rows of tens of sessions
        made into objects each time). The result must not be changed by the caller.

        Bounded (the `_KEPT_READS` latest), and dropped whole by any commit of this pool,
        by the first call after a commit of another connection (another store on the
        file, another process) and by `close`: nothing read from an earlier state of the
        file (the facts of a session forgotten since) is served or kept past it."""
        version = self.data_version()
        if version is None:
            return read()
        with self._kept_lock:
            if version != self._kept_version:
                self._kept.clear()
                self._kept_version = version
            elif key in self._kept:
                self._kept.move_to_end(key)
                found: _T = self._kept[key]
                return found
        # Read after the version: what it returns is of that version or a later one, and
        # a later one changes the version the next call sees.
        value = read()
        with self._kept_lock:
            if self._kept_version == version:
                self._kept[key] = value
                while len(self._kept) > _KEPT_READS:
                    self._kept.popitem(last=False)
        return value

    def _forget_kept(self) -> None:
        with self._kept_lock:
            self._kept.clear()
            self._kept_version = None

    def close(self) -> None:
        """Close every connection of the pool, from any thread (see `SQLiteStore.close`)."""
        with self._lock:
            self._closed = True
            handles, self._open, self._idle = self._open, set(), []
            if self._watch is not None and self._pid == os.getpid():
                handles.add(self._watch)
            self._watch = None
        self._forget_kept()  # after closing: `unchanged` keeps nothing more
        for handle in handles:
            with handle.lock:
                handle.closed = True
                with suppress(sqlite3.Error):
                    handle.sqlite.close()


def rollback(conn: sqlite3.Connection) -> None:
    # After some errors SQLite has already rolled back; a second ROLLBACK would
    # raise and hide the error that matters.
    if conn.in_transaction:
        with suppress(sqlite3.Error):
            conn.execute("ROLLBACK")
