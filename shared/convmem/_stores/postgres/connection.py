"""The I/O edge of `PostgresStore`: options for its own connections, telling a connection
the server has closed, the watchdog that bounds every call by its deadline, and what a
failure tells the caller.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import re
import select
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from typing import Any

from ..._errors import ConfigError, StoreError
from ..credentials import redact, redact_url
from .migrations import RECALL_TABLES

logger = logging.getLogger("convmem")


def _psycopg() -> Any:
    try:
        import psycopg
        import psycopg_pool
    except ImportError:
        raise ConfigError(
            "PostgresStore needs psycopg 3 and psycopg-pool: pip install 'convmem[postgres]'"
        ) from None
    return psycopg, psycopg_pool


def _describe(conninfo: str) -> str:
    """``PostgreSQL at host:port/dbname``, without user or password."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(conninfo)
    except Exception:  # an unparsable conninfo fails later with its own message
        return "PostgreSQL"
    host = params.get("host") or params.get("hostaddr") or "localhost"
    return f"PostgreSQL at {host}:{params.get('port') or 5432}/{params.get('dbname') or '?'}"


def _connection_kwargs(url: str, timeout: float) -> dict[str, Any]:
    """Options for the store's own connections: autocommit, and every wait bounded by `timeout`."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        params = conninfo_to_dict(url)
    except Exception as exc:
        raise ConfigError(
            f"cannot use PostgreSQL URL {redact_url(url)!r:.200}: {redact(str(exc), url)}"
        ) from None
    milliseconds = max(1, round(timeout * 1000))
    # The server gives up on a statement, or a transaction left open by a vanished client, by itself.
    server = f"-c statement_timeout={milliseconds} -c idle_in_transaction_session_timeout={2 * milliseconds}"
    kwargs: dict[str, Any] = {
        "autocommit": True,
        "connect_timeout": max(2, math.ceil(timeout)),  # libpq's floor is 2 s
        "options": f"{params['options']} {server}" if params.get("options") else server,
    }
    if not str(params.get("host", "")).startswith("/"):
        # Notice a vanished peer on idle connections and on unacknowledged writes.
        kwargs |= {
            "keepalives": 1,
            "keepalives_idle": max(1, math.ceil(timeout)),
            "keepalives_interval": max(1, math.ceil(timeout / 3)),
            "keepalives_count": 3,
            "tcp_user_timeout": milliseconds,
        }
    return kwargs


def _has_pending_input(conn: Any) -> bool:
    """An idle connection with something to read was closed by the server (a restart, a kill)."""
    if conn.closed:
        return True
    poller = select.poll()
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
    return bool(poller.poll(0))


class _StaleConnection(Exception):
    """A pooled connection that the server has closed: the call takes another one."""


def _refuse_stale(conn: Any) -> None:
    # Checked before use rather than by the pool's own check, which backs off between
    # connections it rejects: after a restart every pooled connection is dead at once.
    if _has_pending_input(conn):
        conn.close()  # the pool discards a closed connection when it gets it back
        raise _StaleConnection


def _sever(conn: Any) -> None:
    """Shut the socket of a call past its deadline: the blocked read fails at once."""
    try:
        duplicate = os.dup(conn.pgconn.socket)
    except Exception:  # already closed
        return
    with socket.socket(fileno=duplicate) as sock, suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


@dataclasses.dataclass(eq=False)
class _Watch:
    deadline: float
    connection: Any
    severed: bool = False


class _Watchdog:
    """One thread per store that severs the connection of any call still running past its deadline.

    A server that stops answering (frozen, or a silent network) would otherwise
    leave a call blocked in a read for as long as TCP allows. A call unregisters
    before its connection goes back to the pool, under the same lock the thread
    severs under, so only a connection still in use by its late call is ever cut.
    """

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._watches: set[_Watch] = set()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._next_wake = math.inf

    @contextmanager
    def watch(self, connection: Any, deadline: float) -> Iterator[_Watch]:
        watch = _Watch(deadline, connection)
        with self._lock:
            self._watches.add(watch)
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(
                    target=self._run, name="convmem-postgres-watchdog", daemon=True
                )
                self._thread.start()
            if deadline < self._next_wake:
                self._lock.notify()
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                pending = [w.deadline for w in self._watches if not w.severed]
                for watch in self._watches:
                    if not watch.severed and watch.deadline <= now:
                        watch.severed = True
                        _sever(watch.connection)
                self._next_wake = min((d for d in pending if d > now), default=math.inf)
                self._lock.wait(None if math.isinf(self._next_wake) else self._next_wake - now)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._lock.notify()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def _failure(where: str, action: str, exc: BaseException, timeout: float, severed: bool) -> StoreError:
    import psycopg
    import psycopg_pool

    if severed:
        reason = f"no answer within {timeout:g} s"
    elif isinstance(exc, psycopg_pool.PoolTimeout):
        reason = f"no connection within {timeout:g} s"
    elif isinstance(exc, psycopg_pool.PoolClosed):
        reason = f"the connection pool is closed ({exc})"
    else:
        reason = f"{type(exc).__name__}: {redact(str(exc).strip(), None)}"
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.errors.QueryCanceled)):
        hint = "check that PostgreSQL is running and reachable; the next call reconnects"
    elif isinstance(exc, psycopg_pool.PoolClosed):
        hint = "open the pool (or use an open one) before using the store"
    else:
        hint = "check that the store's schema was not changed by hand"
    return StoreError(
        f"{where}: {action} failed ({reason}). Each write is applied whole or not at all; {hint}"
    )


_MISSING_RECALL_TABLE = re.compile(rf'relation "(?:[^"]*\.)?({"|".join(RECALL_TABLES)})" does not exist')


def _missing_recall_table(exc: BaseException) -> str | None:
    """The recall table whose absence failed a statement (one dropped by hand), or None."""
    import psycopg

    if not isinstance(exc, psycopg.errors.UndefinedTable):
        return None
    found = _MISSING_RECALL_TABLE.search(str(exc))
    return found[1] if found else None


def _warn_remade(where: str, made: Sequence[str], exc: BaseException) -> None:
    logger.warning(
        "recall's keyword index in %s was missing %s (%s); made again: each session is indexed "
        "again from its log when next searched",
        where,
        ", ".join(made) or "a table (another server made it again)",
        exc,
    )


def _retryable(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected))
