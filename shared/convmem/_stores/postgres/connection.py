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


# How long an idle watchdog thread waits for the next call before it ends: a store in use
# makes one soon, and starting a thread per call would cost more than the wait.
_WATCHDOG_IDLE_SECONDS = 2.0


class _Watchdog:
    """A thread per store, while calls run, that severs the connection of any call still running
    past its deadline.

    A server that stops answering (frozen, or a silent network) would otherwise
    leave a call blocked in a read for as long as TCP allows. A call unregisters
    before its connection goes back to the pool, under the same lock the thread
    severs under, so only a connection still in use by its late call is ever cut.

    The thread ends after a short idle spell and starts again with the next call,
    so a store that is dropped without `close` leaves no thread behind; it holds
    this watchdog, never the store, which a garbage collection can therefore free.
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
                self._start()
            if deadline < self._next_wake:
                self._lock.notify()
        try:
            yield watch
        finally:
            with self._lock:
                self._watches.discard(watch)

    def _start(self) -> None:
        thread = threading.Thread(target=self._run, name="convmem-postgres-watchdog", daemon=True)
        try:
            thread.start()
        except RuntimeError as exc:  # out of threads: the call goes on, and the next one tries again
            logger.warning(
                "cannot start the PostgreSQL watchdog thread (%s): this call is bounded only by "
                "the server's statement_timeout",
                exc,
            )
        else:
            self._thread = thread

    def _run(self) -> None:
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                self._next_wake = self._sever_late(now)
                if not math.isinf(self._next_wake):
                    self._lock.wait(self._next_wake - now)
                elif not self._lock.wait(_WATCHDOG_IDLE_SECONDS) and math.isinf(
                    self._sever_late(time.monotonic())
                ):
                    break
            self._thread = None

    def _sever_late(self, now: float) -> float:
        """Sever the calls past their deadline; the nearest deadline of the others (inf: none).

        A method of its own so that no connection stays referenced from the thread's frame
        while it waits (that kept a dropped store's connections open).
        """
        next_wake = math.inf
        for watch in self._watches:
            if watch.severed:
                continue
            if watch.deadline <= now:
                watch.severed = True
                _sever(watch.connection)
            else:
                next_wake = min(next_wake, watch.deadline)
        return next_wake

    def close(self) -> None:
        with self._lock:
            self._closed = True
            thread = self._thread
            self._lock.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=5)


def _release(watchdog: _Watchdog, own_pool: Any | None) -> None:
    """Close what a store started: its watchdog and, if the store made it, its pool. Called by
    `close`, or by the finalizer of a store dropped without it, so it never refers to the store."""
    watchdog.close()
    if own_pool is None:
        return
    # A collection can drop the store in one of the pool's own threads, and the pool's close
    # waits for each of its threads to end ("cannot join current thread" from that one):
    # another thread closes it then.
    here = threading.current_thread().name
    if here == f"{own_pool.name}-scheduler" or here.startswith(f"{own_pool.name}-worker-"):
        closer = threading.Thread(target=own_pool.close, name="convmem-postgres-close", daemon=True)
        with suppress(RuntimeError):  # out of threads: closed here below, as far as it can be
            closer.start()
            return
    # A thread of the pool's not known by its name: the pool is closed by then, and it ends by itself.
    with suppress(RuntimeError):
        own_pool.close()


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
