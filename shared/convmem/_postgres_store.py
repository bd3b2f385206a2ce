"""`PostgresStore` and `AsyncPostgresStore`: the system of record for many servers, in PostgreSQL.

Tables (in their own schema, ``convmem`` by default)::

    schema_version  one row per applied migration (version, description, applied_at)
    sessions        session_id, user_id, created_at, updated_at, last_seq, message_count, total_tokens
    messages        (session_id, seq) -> role, content, name, tool_calls, tool_call_id, metadata,
                    status, ts, token_count; a foreign key to sessions, ON DELETE CASCADE
    state           (session_id, key) -> value, version, updated_at; likewise

The store creates and migrates its schema itself when it opens: each
migration runs in one transaction under an advisory lock, so many servers
starting at once apply it exactly once, and a database written by a newer
convmem is refused rather than misread. New columns (a full-text ``tsvector``
on messages, an embeddings table keyed by ``(session_id, seq)``) come as new
migrations; nothing here assumes the tables have only today's columns.

Appends are one statement: an upsert of the session row, which takes that
row's lock and advances ``last_seq``, feeding the insert of the messages. Any
number of writers on any number of servers therefore get gapless,
never-repeated seqs per session, and a failed append stores nothing. Every
write that touches several rows locks the session row first, so writers never
wait on each other in opposite orders; a deadlock or serialization failure
reported by the server (which rolls the whole write back) is retried.

Ids and text are always bound parameters; the only name put into SQL text is
the schema, which must be a plain lower-case identifier. Times are the
server's clock, so every process agrees on what is idle.

Every call is bounded by ``timeout``: waiting for a pooled connection, the
statements, and a server that stops answering (a watchdog shuts the socket
of a call past its deadline) all end in `StoreError` by then.

Both classes share every piece of logic below (`_Queries`); they differ only
in how a statement reaches the server, as `RedisStore` and `AsyncRedisStore` do.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import math
import os
import re
import select
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import TYPE_CHECKING, Any, TypeVar

from ._codec import message_from_record, message_to_record
from ._errors import ConfigError, InvalidMessageError, StoreError
from ._models import Message, TurnStatus
from ._store import MAX_ID_LENGTH, SessionStats, StateRecord, idle_cutoff, validate_id, validate_messages

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

__all__ = ["AsyncPostgresStore", "PostgresStore"]

_T = TypeVar("_T")

DEFAULT_SCHEMA = "convmem"
# A write that the server rolled back as a deadlock victim or serialization failure is tried again.
_ATTEMPTS = 5
# Sessions deleted per statement by expire_idle: one sweep never holds many row locks at once.
_SWEEP_BATCH = 500
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_COLUMNS = (
    "seq",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "metadata",
    "status",
    "ts",
    "token_count",
)
_NOW = "extract(epoch FROM clock_timestamp())::float8"

# Each migration: (version, description, statements); ``{s}`` is the quoted schema.
# Never edit a released migration: add the next one.
_MIGRATIONS: tuple[tuple[int, str, tuple[str, ...]], ...] = (
    (
        1,
        "sessions, messages and state",
        (
            # COLLATE "C": ids compare by code point, as Python sorts them, whatever the database locale.
            """CREATE TABLE {s}.sessions (
                session_id    text COLLATE "C" PRIMARY KEY,
                user_id       text COLLATE "C",
                created_at    double precision NOT NULL,
                updated_at    double precision NOT NULL,
                last_seq      bigint NOT NULL DEFAULT 0,
                message_count bigint NOT NULL DEFAULT 0,
                total_tokens  bigint NOT NULL DEFAULT 0
            )""",
            "CREATE INDEX sessions_by_user ON {s}.sessions (user_id) WHERE user_id IS NOT NULL",
            "CREATE INDEX sessions_by_activity ON {s}.sessions (updated_at)",
            """CREATE TABLE {s}.messages (
                session_id   text COLLATE "C" NOT NULL
                             REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                seq          bigint NOT NULL,
                role         text NOT NULL,
                content      text NOT NULL,
                name         text,
                tool_calls   text,
                tool_call_id text,
                metadata     text,
                status       text NOT NULL,
                ts           double precision NOT NULL,
                token_count  integer,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE {s}.state (
                session_id text COLLATE "C" NOT NULL
                           REFERENCES {s}.sessions (session_id) ON DELETE CASCADE,
                key        text COLLATE "C" NOT NULL,
                value      text NOT NULL,
                version    bigint NOT NULL,
                updated_at double precision NOT NULL,
                PRIMARY KEY (session_id, key)
            )""",
        ),
    ),
)
SCHEMA_VERSION = _MIGRATIONS[-1][0]


# -- requests: what an operation asks of the server ---------------------------------------


@dataclasses.dataclass(frozen=True)
class _Sql:
    """One parameterised statement; its reply is the list of rows it returned (maybe empty)."""

    text: str
    params: tuple[Any, ...] = ()


# An operation is a generator: it yields statements, is sent their rows, and returns its
# result. The sync and async stores only differ in how they drive it.
_Operation = Generator[_Sql, list[tuple[Any, ...]], _T]


class _RollBack(Exception):
    """Raised by an operation to end its transaction without writing; carries its result."""

    def __init__(self, result: object) -> None:
        super().__init__("rolled back on purpose")
        self.result = result


def _check_id(value: str, what: str) -> str:
    # PostgreSQL text cannot hold NUL, and a key must fit a btree entry: refuse what
    # validate_id refuses rather than fail deep in the server. The common case costs O(1).
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        validate_id(value, what)
    return value


def _check_text(value: str | None, what: str) -> None:
    if value is not None and "\x00" in value:
        raise InvalidMessageError(
            f"{what} contains a NUL character at position {value.index(chr(0))}; PostgreSQL text "
            "cannot hold NUL, so nothing was stored. Remove it or encode it (e.g. as \\u0000)"
        )


def _row_values(message: Message, session_id: str) -> dict[str, Any]:
    record = message_to_record(message)
    # content, tool_calls and metadata are JSON, which escapes NUL; the plain fields are not.
    _check_text(record["name"], f"the name of a message for session {session_id!r:.80}")
    _check_text(record["tool_call_id"], f"the tool_call_id of a message for session {session_id!r:.80}")
    return record


def _not_utf8(action: str, exc: UnicodeEncodeError) -> InvalidMessageError:
    return InvalidMessageError(
        f"{action}: the text is not valid UTF-8 ({exc.reason}); nothing was stored. "
        "Build messages with Message.create, which rejects lone surrogates"
    )


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"schema must be a lower-case SQL identifier (letters, digits, '_', at most 63 "
            f"characters, not starting with a digit), got {schema!r}"
        )
    return schema


def _check_timeout(timeout: object) -> float:
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return float(timeout)


def _check_pool_size(max_connections: object) -> int:
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigError(f"max_connections must be a positive int, got {max_connections!r}")
    return max_connections


# -- the logic shared by both stores ---------------------------------------------------


class _Queries:
    """The SQL of every operation for one schema, and the decoding of its rows: everything but the I/O."""

    def __init__(self, schema: str) -> None:
        self.schema = _check_schema(schema)
        s = f'"{self.schema}"'
        self.s = s
        # Same 64-bit key in every process: migrations of one schema never run side by side.
        self.lock_key = int.from_bytes(
            hashlib.sha256(f"convmem:{schema}".encode()).digest()[:8], "big", signed=True
        )
        columns = ", ".join(_COLUMNS)
        self.select_messages = f"SELECT {columns} FROM {s}.messages WHERE session_id = %s"
        self.append_sql = f"""
            WITH clock AS (SELECT {_NOW} AS now),
            session AS (
                INSERT INTO {s}.sessions AS known
                    (session_id, user_id, created_at, updated_at, last_seq, message_count, total_tokens)
                SELECT %s, %s, clock.now, clock.now, %s, %s, %s FROM clock
                ON CONFLICT (session_id) DO UPDATE SET
                    user_id = COALESCE(known.user_id, EXCLUDED.user_id),
                    updated_at = GREATEST(known.updated_at, EXCLUDED.updated_at),
                    last_seq = known.last_seq + EXCLUDED.last_seq,
                    message_count = known.message_count + EXCLUDED.message_count,
                    total_tokens = known.total_tokens + EXCLUDED.total_tokens
                RETURNING last_seq
            ),
            stored AS (
                INSERT INTO {s}.messages (session_id, {columns})
                SELECT %s, session.last_seq - %s + m.position, m.role, m.content, m.name, m.tool_calls,
                       m.tool_call_id, m.metadata, m.status, m.ts, m.token_count
                FROM session, unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                                     %s::text[], %s::text[], %s::float8[], %s::integer[])
                     WITH ORDINALITY AS m(role, content, name, tool_calls, tool_call_id, metadata,
                                          status, ts, token_count, position)
                RETURNING seq
            )
            SELECT last_seq FROM session"""

    # -- schema --------------------------------------------------------------------------

    def migrate(self) -> _Operation[int]:
        """Bring the schema up to `SCHEMA_VERSION`; run in one transaction."""
        s = self.s
        (exists,) = (yield _Sql("SELECT to_regclass(%s) IS NOT NULL", (f"{s}.schema_version",)))[0]
        if exists:
            current = yield from self._version()
            if current >= SCHEMA_VERSION:
                return current
        yield _Sql("SELECT pg_advisory_xact_lock(%s)", (self.lock_key,))
        yield _Sql(f"CREATE SCHEMA IF NOT EXISTS {s}")
        yield _Sql(
            f"CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY, "
            "description text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        current = yield from self._version()  # again, under the lock: another server may have migrated
        for version, description, statements in _MIGRATIONS:
            if version > current:
                for statement in statements:
                    yield _Sql(statement.format(s=s))
                yield _Sql(
                    f"INSERT INTO {s}.schema_version (version, description) VALUES (%s, %s)",
                    (version, description),
                )
        return SCHEMA_VERSION

    def _version(self) -> _Operation[int]:
        (current,) = (yield _Sql(f"SELECT coalesce(max(version), 0) FROM {self.s}.schema_version"))[0]
        if current > SCHEMA_VERSION:
            raise StoreError(
                f"schema {self.schema!r} was written by a newer convmem (schema version {current} > "
                f"{SCHEMA_VERSION}); upgrade convmem to use it"
            )
        return int(current)

    # -- messages ------------------------------------------------------------------------

    @staticmethod
    def _decode(rows: list[tuple[Any, ...]], session_id: str) -> list[Message]:
        return [message_from_record(dict(zip(_COLUMNS, row, strict=True)), session_id) for row in rows]

    def append(
        self, session_id: str, messages: Sequence[Message], user_id: str | None
    ) -> _Operation[list[Message]]:
        messages = validate_messages(messages)
        _check_id(session_id, "session_id")
        if user_id is not None:
            _check_id(user_id, "user_id")
        if not messages:
            return []
        records = [_row_values(m, session_id) for m in messages]
        columns = [[record[name] for record in records] for name in _COLUMNS[1:]]
        count = len(messages)
        rows = yield _Sql(
            self.append_sql,
            (
                session_id,
                user_id,
                count,
                count,
                sum(m.token_count or 0 for m in messages),
                session_id,
                count,
                *columns,
            ),
        )
        first = int(rows[0][0]) - count + 1
        return [dataclasses.replace(m, seq=first + i) for i, m in enumerate(messages)]

    def messages(self, session_id: str, after_seq: int, through_seq: int | None) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        if through_seq is not None and through_seq <= after_seq:
            return []
        upper = 2**62 if through_seq is None else int(through_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq > %s AND seq <= %s ORDER BY seq",
            (session_id, int(after_seq), upper),
        )
        return self._decode(rows, session_id)

    def tail(self, session_id: str, limit: int, before_seq: int | None) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        if limit <= 0:
            return []
        upper = 2**62 if before_seq is None else int(before_seq)
        rows = yield _Sql(
            f"{self.select_messages} AND seq < %s ORDER BY seq DESC LIMIT %s", (session_id, upper, int(limit))
        )
        rows.reverse()
        return self._decode(rows, session_id)

    def get(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        _check_id(session_id, "session_id")
        wanted = sorted({int(s) for s in seqs})
        if not wanted:
            return []
        rows = yield _Sql(
            f"{self.select_messages} AND seq = ANY(%s::bigint[]) ORDER BY seq", (session_id, wanted)
        )
        return self._decode(rows, session_id)

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> _Operation[Message]:
        _check_id(session_id, "session_id")
        s = self.s
        # The session row is locked before the message row, as every other write does.
        rows = yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW})
                WHERE session_id = %s
                  AND EXISTS (SELECT 1 FROM {s}.messages WHERE session_id = %s AND seq = %s)
                RETURNING session_id
            )
            UPDATE {s}.messages AS m SET status = %s FROM touched
            WHERE m.session_id = touched.session_id AND m.seq = %s
            RETURNING {", ".join("m." + c for c in _COLUMNS)}""",
            (session_id, session_id, int(seq), status.value, int(seq)),
        )
        if not rows:
            raise InvalidMessageError(f"session {session_id!r:.80} has no message with seq={seq}")
        return self._decode(rows, session_id)[0]

    def stats(self, session_id: str) -> _Operation[SessionStats]:
        _check_id(session_id, "session_id")
        rows = yield _Sql(
            f"SELECT message_count, last_seq, total_tokens, user_id, created_at, updated_at "
            f"FROM {self.s}.sessions WHERE session_id = %s",
            (session_id,),
        )
        if not rows:
            return SessionStats(session_id, 0, 0, 0)
        count, last_seq, tokens, user_id, created, updated = rows[0]
        return SessionStats(session_id, int(count), int(last_seq), int(tokens), user_id, created, updated)

    # -- state records -----------------------------------------------------------------------

    def get_state(self, session_id: str, key: str) -> _Operation[StateRecord | None]:
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        rows = yield _Sql(
            f"SELECT value, version FROM {self.s}.state WHERE session_id = %s AND key = %s", (session_id, key)
        )
        return StateRecord(rows[0][0], int(rows[0][1])) if rows else None

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        expected_version: int | None,
        requires_seq: int | None,
    ) -> _Operation[StateRecord | None]:
        """Run in a transaction: the session row's lock makes the version check and the write one step."""
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        _check_text(value, f"the value of state {key!r}")
        s = self.s
        if requires_seq is None:
            # A state-only session is still a session: listed, forgotten and expired like any other.
            yield _Sql(
                f"INSERT INTO {s}.sessions AS known (session_id, created_at, updated_at) "
                f"SELECT %s, now, now FROM (SELECT {_NOW} AS now) AS clock "
                "ON CONFLICT (session_id) DO UPDATE SET updated_at = known.updated_at",
                (session_id,),
            )
        else:
            # A deleted session must not get its derived state back from a late writer.
            rows = yield _Sql(
                f"SELECT last_seq FROM {s}.sessions WHERE session_id = %s FOR UPDATE", (session_id,)
            )
            if not rows or int(rows[0][0]) < requires_seq:
                return None
        rows = yield _Sql(
            f"SELECT version FROM {s}.state WHERE session_id = %s AND key = %s", (session_id, key)
        )
        current = int(rows[0][0]) if rows else 0
        if expected_version is not None and expected_version != current:
            raise _RollBack(None)  # also undoes a session row created above for nothing
        yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW}) WHERE session_id = %s
                RETURNING updated_at
            )
            INSERT INTO {s}.state (session_id, key, value, version, updated_at)
            SELECT %s, %s, %s, %s, touched.updated_at FROM touched
            ON CONFLICT (session_id, key) DO UPDATE SET
                value = EXCLUDED.value, version = EXCLUDED.version, updated_at = EXCLUDED.updated_at""",
            (session_id, session_id, key, value, current + 1),
        )
        return StateRecord(value, current + 1)

    def delete_state(self, session_id: str, key: str) -> _Operation[None]:
        _check_id(session_id, "session_id")
        _check_text(key, "a state key")
        s = self.s
        yield _Sql(
            f"""
            WITH touched AS (
                UPDATE {s}.sessions SET updated_at = GREATEST(updated_at, {_NOW})
                WHERE session_id = %s
                  AND EXISTS (SELECT 1 FROM {s}.state WHERE session_id = %s AND key = %s)
                RETURNING session_id
            ),
            deleted AS (
                DELETE FROM {s}.state USING touched
                WHERE state.session_id = touched.session_id AND state.key = %s
                RETURNING 1
            )
            SELECT count(*) FROM deleted""",
            (session_id, session_id, key, key),
        )

    # -- listing, deleting, retention ---------------------------------------------------------

    def clear(self, session_id: str) -> _Operation[None]:
        _check_id(session_id, "session_id")
        yield _Sql(f"DELETE FROM {self.s}.sessions WHERE session_id = %s", (session_id,))

    def sessions(self, user_id: str | None) -> _Operation[list[str]]:
        if user_id is None:
            rows = yield _Sql(f"SELECT session_id FROM {self.s}.sessions ORDER BY session_id")
        else:
            _check_id(user_id, "user_id")
            rows = yield _Sql(
                f"SELECT session_id FROM {self.s}.sessions WHERE user_id = %s ORDER BY session_id", (user_id,)
            )
        return [row[0] for row in rows]

    def forget_user(self, user_id: str) -> _Operation[list[str]]:
        _check_id(user_id, "user_id")
        s = self.s
        # Locked in id order, so two sweeps over overlapping sessions never deadlock.
        rows = yield _Sql(
            f"""
            DELETE FROM {s}.sessions WHERE session_id IN (
                SELECT session_id FROM {s}.sessions WHERE user_id = %s ORDER BY session_id FOR UPDATE
            ) RETURNING session_id""",
            (user_id,),
        )
        return sorted(row[0] for row in rows)

    def expire_idle(self, older_than_seconds: float) -> _Operation[list[str]]:
        idle_cutoff(older_than_seconds, 0.0)  # a bad age is refused before any I/O
        if math.isinf(older_than_seconds):
            return []
        (now,) = (yield _Sql(f"SELECT {_NOW}"))[0]
        cutoff = idle_cutoff(older_than_seconds, float(now))
        s = self.s
        deleted: list[str] = []
        while True:
            # A locked session is being written right now, so it is not idle: skip it. The
            # lock re-checks updated_at, so a session touched meanwhile is skipped too.
            rows = yield _Sql(
                f"""
                DELETE FROM {s}.sessions WHERE session_id IN (
                    SELECT session_id FROM {s}.sessions WHERE updated_at < %s
                    ORDER BY session_id LIMIT %s FOR UPDATE SKIP LOCKED
                ) RETURNING session_id""",
                (cutoff, _SWEEP_BATCH),
            )
            deleted.extend(row[0] for row in rows)
            if len(rows) < _SWEEP_BATCH:
                return sorted(deleted)


# -- the I/O edges ---------------------------------------------------------------------


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
        raise ConfigError(f"cannot use PostgreSQL URL {url!r:.200}: {exc}") from None
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
        reason = f"{type(exc).__name__}: {str(exc).strip()}"
    if isinstance(exc, (psycopg.OperationalError, psycopg_pool.PoolTimeout, psycopg.errors.QueryCanceled)):
        hint = "check that PostgreSQL is running and reachable; the next call reconnects"
    elif isinstance(exc, psycopg_pool.PoolClosed):
        hint = "open the pool (or use an open one) before using the store"
    else:
        hint = "check that the store's schema was not changed by hand"
    return StoreError(
        f"{where}: {action} failed ({reason}). Each write is applied whole or not at all; {hint}"
    )


def _retryable(exc: BaseException) -> bool:
    import psycopg

    return isinstance(exc, (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected))


class PostgresStore:
    """A store in PostgreSQL, shared by every process and server that uses the same database and schema.

    Args:
        url: a libpq connection URL or DSN (``postgresql://user:password@host:5432/dbname``);
            query options such as ``?sslmode=require`` are honoured.
        pool: an open ``psycopg_pool.ConnectionPool`` to use instead of `url`. It is not
            closed by `close`. Connections in autocommit mode save a round trip per read.
        schema: the PostgreSQL schema (namespace) holding the tables; created if missing.
            Stores with different schemas in one database never see each other.
        timeout: seconds any call may take, waiting for a pooled connection included,
            before it fails with `StoreError`.
        max_connections: the size of the store's own connection pool; more concurrent
            calls wait for a free connection (within `timeout`).

    The schema is created or migrated when the store opens, so the server must be
    reachable then (`StoreError` otherwise). Needs ``pip install 'convmem[postgres]'``.

    Example::

        store = PostgresStore("postgresql://app@db.internal/chat")
        store.append("session-1", [Message.create("user", "hi")], user_id="alice")
        store.tail("session-1", 20)
        store.close()
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: psycopg_pool.ConnectionPool[Any] | None = None,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 10.0,
        max_connections: int = 10,
    ) -> None:
        self._queries = _Queries(schema)
        self._timeout = _check_timeout(timeout)
        _check_pool_size(max_connections)
        if (url is None) == (pool is None):
            raise ConfigError("PostgresStore needs exactly one of url=... or pool=...")
        pg, pg_pool = _psycopg()
        self._psycopg_errors = (pg.Error, pg_pool.PoolTimeout, pg_pool.PoolClosed)
        self._owns_pool = pool is None
        if pool is None:
            assert url is not None
            pool = pg_pool.ConnectionPool(
                url,
                min_size=1,
                max_size=max_connections,
                kwargs=_connection_kwargs(url, self._timeout),
                # Give up a run of failed reconnections after one timeout: the next call then
                # starts a fresh attempt at once, instead of waiting out a long backoff after
                # the server came back.
                reconnect_timeout=self._timeout,
                open=False,
                name="convmem",
            )
            pool.open(wait=False)
        self._pool: psycopg_pool.ConnectionPool[Any] = pool
        self._where = _describe(pool.conninfo if isinstance(pool.conninfo, str) else "")
        self._watchdog = _Watchdog()
        try:
            self._run(self._queries.migrate, "creating or migrating the schema", transaction=True)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self._queries.schema!r})"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def schema(self) -> str:
        return self._queries.schema

    @staticmethod
    def _drive(conn: psycopg.Connection[Any], operation: _Operation[_T]) -> _T:
        try:
            request = next(operation)
            while True:
                cursor = conn.execute(request.text, request.params)
                rows = cursor.fetchall() if cursor.description is not None else []
                request = operation.send(rows)
        except StopIteration as done:
            result: _T = done.value
            return result
        finally:
            operation.close()

    def _run(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool = False) -> _T:
        deadline = time.monotonic() + self._timeout
        attempt = 0
        while True:
            attempt += 1
            watch: _Watch | None = None
            try:
                with self._pool.connection(timeout=max(0.001, deadline - time.monotonic())) as conn:
                    _refuse_stale(conn)
                    with self._watchdog.watch(conn, deadline) as watch:
                        if transaction:
                            with conn.transaction():
                                return self._drive(conn, make())
                        return self._drive(conn, make())
            except _StaleConnection:
                # The server closed the pooled connections (a restart): drop all the dead ones now.
                self._pool.check()
            except _RollBack as rolled_back:
                result: _T = rolled_back.result  # type: ignore[assignment]
                return result
            except self._psycopg_errors as exc:
                severed = watch is not None and watch.severed
                if not (_retryable(exc) and attempt < _ATTEMPTS and time.monotonic() < deadline):
                    raise _failure(self._where, action, exc, self._timeout, severed) from exc
            except UnicodeEncodeError as exc:
                raise _not_utf8(action, exc) from None

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return self._run(
            lambda: self._queries.append(session_id, messages, user_id),
            f"append to session {session_id!r:.80}",
        )

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return self._run(
            lambda: self._queries.messages(session_id, after_seq, through_seq),
            f"read of session {session_id!r:.80}",
        )

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return self._run(
            lambda: self._queries.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(lambda: self._queries.get(session_id, seqs), f"read of session {session_id!r:.80}")

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return self._run(
            lambda: self._queries.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    def stats(self, session_id: str) -> SessionStats:
        return self._run(lambda: self._queries.stats(session_id), f"stats of session {session_id!r:.80}")

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return self._run(
            lambda: self._queries.get_state(session_id, key),
            f"read of state {key!r} of session {session_id!r:.80}",
        )

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        return self._run(
            lambda: self._queries.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
            transaction=True,
        )

    def delete_state(self, session_id: str, key: str) -> None:
        self._run(
            lambda: self._queries.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    def clear(self, session_id: str) -> None:
        self._run(lambda: self._queries.clear(session_id), f"clear of session {session_id!r:.80}")

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        return self._run(lambda: self._queries.sessions(user_id), "listing sessions")

    def forget_user(self, user_id: str) -> list[str]:
        return self._run(lambda: self._queries.forget_user(user_id), f"forget_user({user_id!r:.80})")

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete sessions idle longer than `older_than_seconds` by the server's clock."""
        return self._run(lambda: self._queries.expire_idle(older_than_seconds), "expire_idle")

    def close(self) -> None:
        """Close the connection pool, unless it was passed in. Closing twice does nothing."""
        self._watchdog.close()
        if self._owns_pool:
            self._pool.close()


class AsyncPostgresStore:
    """`PostgresStore` for asyncio (psycopg's async connections): the same arguments, and the
    same methods as coroutines, under the same names::

        store = AsyncPostgresStore("postgresql://app@db.internal/chat")
        await store.append("session-1", [Message.create("user", "hi")])
        window = await store.tail("session-1", 20)
        await store.close()

    The pool opens, and the schema is created or migrated, on the first call; `pool`
    takes an open ``psycopg_pool.AsyncConnectionPool``. Both classes share one
    implementation and one schema, so sync and async processes serve the same sessions.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        pool: psycopg_pool.AsyncConnectionPool[Any] | None = None,
        schema: str = DEFAULT_SCHEMA,
        timeout: float = 10.0,
        max_connections: int = 10,
    ) -> None:
        self._queries = _Queries(schema)
        self._timeout = _check_timeout(timeout)
        _check_pool_size(max_connections)
        if (url is None) == (pool is None):
            raise ConfigError("AsyncPostgresStore needs exactly one of url=... or pool=...")
        pg, pg_pool = _psycopg()
        self._psycopg_errors = (pg.Error, pg_pool.PoolTimeout, pg_pool.PoolClosed)
        self._owns_pool = pool is None
        if pool is None:
            assert url is not None
            pool = pg_pool.AsyncConnectionPool(
                url,
                min_size=1,
                max_size=max_connections,
                kwargs=_connection_kwargs(url, self._timeout),
                reconnect_timeout=self._timeout,
                open=False,
                name="convmem",
            )
        self._pool: psycopg_pool.AsyncConnectionPool[Any] = pool
        self._where = _describe(pool.conninfo if isinstance(pool.conninfo, str) else "")
        self._ready = False
        self._opening: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"AsyncPostgresStore({self._where!r}, schema={self._queries.schema!r})"

    async def __aenter__(self) -> AsyncPostgresStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def schema(self) -> str:
        return self._queries.schema

    async def _open(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._ready:
                return
            if self._owns_pool and self._pool.closed:
                await self._pool.open(wait=False)
            await self._attempts(self._queries.migrate, "creating or migrating the schema", transaction=True)
            self._ready = True

    @staticmethod
    async def _drive(conn: psycopg.AsyncConnection[Any], operation: _Operation[_T]) -> _T:
        try:
            request = next(operation)
            while True:
                cursor = await conn.execute(request.text, request.params)
                rows = await cursor.fetchall() if cursor.description is not None else []
                request = operation.send(rows)
        except StopIteration as done:
            result: _T = done.value
            return result
        finally:
            operation.close()

    @asynccontextmanager
    async def _watch(self, conn: Any, deadline: float) -> AsyncIterator[_Watch]:
        watch = _Watch(deadline, conn)

        def sever() -> None:
            watch.severed = True
            _sever(conn)

        handle = asyncio.get_running_loop().call_later(max(0.0, deadline - time.monotonic()), sever)
        try:
            yield watch
        finally:
            handle.cancel()

    async def _run(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool = False) -> _T:
        if not self._ready:
            await self._open()
        return await self._attempts(make, action, transaction=transaction)

    async def _attempts(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool) -> _T:
        deadline = time.monotonic() + self._timeout
        attempt = 0
        while True:
            attempt += 1
            watch: _Watch | None = None
            try:
                async with self._pool.connection(timeout=max(0.001, deadline - time.monotonic())) as conn:
                    _refuse_stale(conn)
                    async with self._watch(conn, deadline) as watch:
                        if transaction:
                            async with conn.transaction():
                                return await self._drive(conn, make())
                        return await self._drive(conn, make())
            except _StaleConnection:
                await self._pool.check()
            except _RollBack as rolled_back:
                result: _T = rolled_back.result  # type: ignore[assignment]
                return result
            except self._psycopg_errors as exc:
                severed = watch is not None and watch.severed
                if not (_retryable(exc) and attempt < _ATTEMPTS and time.monotonic() < deadline):
                    raise _failure(self._where, action, exc, self._timeout, severed) from exc
            except UnicodeEncodeError as exc:
                raise _not_utf8(action, exc) from None

    async def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return await self._run(
            lambda: self._queries.append(session_id, messages, user_id),
            f"append to session {session_id!r:.80}",
        )

    async def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return await self._run(
            lambda: self._queries.messages(session_id, after_seq, through_seq),
            f"read of session {session_id!r:.80}",
        )

    async def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return await self._run(
            lambda: self._queries.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    async def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return await self._run(
            lambda: self._queries.get(session_id, seqs), f"read of session {session_id!r:.80}"
        )

    async def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return await self._run(
            lambda: self._queries.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    async def stats(self, session_id: str) -> SessionStats:
        return await self._run(
            lambda: self._queries.stats(session_id), f"stats of session {session_id!r:.80}"
        )

    async def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return await self._run(
            lambda: self._queries.get_state(session_id, key),
            f"read of state {key!r} of session {session_id!r:.80}",
        )

    async def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        return await self._run(
            lambda: self._queries.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
            transaction=True,
        )

    async def delete_state(self, session_id: str, key: str) -> None:
        await self._run(
            lambda: self._queries.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    async def clear(self, session_id: str) -> None:
        await self._run(lambda: self._queries.clear(session_id), f"clear of session {session_id!r:.80}")

    async def sessions(self, *, user_id: str | None = None) -> list[str]:
        return await self._run(lambda: self._queries.sessions(user_id), "listing sessions")

    async def forget_user(self, user_id: str) -> list[str]:
        return await self._run(lambda: self._queries.forget_user(user_id), f"forget_user({user_id!r:.80})")

    async def expire_idle(self, older_than_seconds: float) -> list[str]:
        """See `PostgresStore.expire_idle`."""
        return await self._run(lambda: self._queries.expire_idle(older_than_seconds), "expire_idle")

    async def close(self) -> None:
        """Close the connection pool, unless it was passed in."""
        if self._owns_pool:
            await self._pool.close()
