"""`PostgresStore`: the system of record for many servers, in PostgreSQL (and, in
`async_store`, `AsyncPostgresStore` for asyncio).

Every call is bounded by ``timeout``: waiting for a pooled connection, the
statements, and a server that stops answering (a watchdog shuts the socket
of a call past its deadline) all end in `StoreError` by then.

Both classes share every piece of logic (`_Queries`); they differ only
in how a statement reaches the server, as `RedisStore` and `AsyncRedisStore` do.

The tables and their migrations are in `migrations`, the SQL of the operations in
`queries` (recall's vectors and keyword index: `vector_queries`, `lexical_queries`);
connection options, the watchdog and failure messages in `connection`.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import ConfigError, StoreError
from ..._models import Message, TurnStatus
from ..._options import check_number
from ..._sansio import run
from ..base import SessionSnapshot, SessionStats, StateRecord, Store
from ..capabilities import (
    HostsHistoryIndex,
    HostsVectors,
    ListsUserSessions,
    LogRead,
    ReadsLogs,
    ReadsSession,
    ReadsStates,
    ReadsUserScope,
)
from .connection import (
    _connection_kwargs,
    _describe,
    _failure,
    _missing_recall_table,
    _psycopg,
    _refuse_stale,
    _release,
    _retryable,
    _StaleConnection,
    _warn_remade,
    _Watch,
    _Watchdog,
)
from .lexical import PostgresHistoryTables
from .queries import _Queries
from .sql import DEFAULT_SCHEMA, _not_utf8, _Operation, _RollBack

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    from ..._recall.embedder import Embedder
    from ..._recall.index_scope import IndexScope
    from .vectors import PostgresVectorIndex

__all__ = ["PostgresStore"]

_T = TypeVar("_T")

# A write that the server rolled back as a deadlock victim or serialization failure is tried again.
_ATTEMPTS = 5


# A day: no call should wait longer for PostgreSQL, and psycopg takes milliseconds as an int.
_MAX_TIMEOUT_SECONDS = 86_400.0
_MAX_CONNECTIONS = 10_000


def _check_timeout(timeout: object) -> float:
    check_number(
        "timeout",
        timeout,
        low=0,
        high=_MAX_TIMEOUT_SECONDS,
        low_open=True,
        allowed=f"a number of seconds in (0, {_MAX_TIMEOUT_SECONDS:.0f}]",
    )
    assert isinstance(timeout, (int, float))
    return float(timeout)


def _check_pool_size(max_connections: object) -> int:
    if (
        isinstance(max_connections, bool)
        or not isinstance(max_connections, int)
        or not 1 <= max_connections <= _MAX_CONNECTIONS
    ):
        raise ConfigError(
            f"max_connections must be an int from 1 to {_MAX_CONNECTIONS}, got {max_connections!r:.60}"
        )
    return max_connections


class PostgresStore(
    Store,
    ReadsSession,
    ReadsStates,
    ReadsLogs,
    ListsUserSessions,
    ReadsUserScope,
    HostsHistoryIndex,
    HostsVectors,
):
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
        lexical_index: where recall keeps its keyword index of this store's sessions:
            ``"store"`` (default; ``"tsvector"`` is its older name): tables in this schema
            keyed by user, shared by every server, so a server new to a user answers their
            first query without reading their logs (see `convmem._stores.postgres.lexical`);
            ``"process"``: BM25 in each process, built from the logs.

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
        lexical_index: str = "store",
    ) -> None:
        self._queries = _Queries(schema)
        self._timeout = _check_timeout(timeout)
        _check_pool_size(max_connections)
        if lexical_index not in ("store", "tsvector", "process"):
            raise ConfigError(
                f"PostgresStore lexical_index must be 'store' (tables in the schema, the default) or "
                f"'process' (BM25 in each process), got {lexical_index!r:.60}"
            )
        self.lexical_index = "process" if lexical_index == "process" else "store"
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
        # A store dropped without close() frees what it started: per request or per tenant,
        # stores over one shared pool would otherwise each leave their watchdog behind.
        self._finalizer = weakref.finalize(self, _release, self._watchdog, pool if self._owns_pool else None)
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
        """The PostgreSQL schema that holds this store's tables."""
        return self._queries.schema

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the server and database (no credentials), and schema."""
        return f"{self._where}, schema {self._queries.schema}"

    @staticmethod
    def _drive(conn: psycopg.Connection[Any], operation: _Operation[_T]) -> _T:
        def perform(request: Any) -> list[Any]:
            cursor = conn.execute(request.text, request.params)
            return cursor.fetchall() if cursor.description is not None else []

        return run(operation, perform)

    def _run(
        self,
        make: Callable[[], _Operation[_T]],
        action: str,
        *,
        transaction: bool = False,
        retry_remade: bool = True,
    ) -> _T:
        """Run an operation on a pooled connection, retrying what may be retried. A table of
        recall's index that is missing (dropped by hand) is made again, and the operation
        run again (with `retry_remade`) or failed (a read of that index: recall reads the logs)."""
        deadline = time.monotonic() + self._timeout
        attempt = 0
        remade = False
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
                if not remade and _missing_recall_table(exc):
                    remade = True
                    made = self._run(
                        self._queries.remake_recall_tables, "making recall's tables again", transaction=True
                    )
                    _warn_remade(self._where, made, exc)
                    if retry_remade:
                        continue
                    # this search reads the logs; the next indexes each session again
                    raise StoreError(
                        f"{self._where}: {action} failed: recall's keyword index was missing a "
                        "table and was made again"
                    ) from exc
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

    def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """The session's stats and its `keys` state records (those it has), in one
        statement (see `ReadsSession`)."""
        return self._run(
            lambda: self._queries.read_session(session_id, keys), f"read of session {session_id!r:.80}"
        )

    def read_logs(self, session_ids: Sequence[str]) -> dict[str, LogRead]:
        """Each session's stats, whole log and stats again, three statements per 64
        sessions (see `ReadsLogs`): what recall with an embedder reads of a returning
        user in a new process."""
        return self._run(
            lambda: self._queries.read_logs(session_ids), f"read of {len(session_ids)} session logs"
        )

    def read_user_scope(
        self, session_id: str, keys: Sequence[str], user_id: str, user_key: str
    ) -> SessionSnapshot:
        """`read_session` with the stats of `user_id`'s sessions and their `user_key`
        records, in one statement (see `ReadsUserScope`)."""
        return self._run(
            lambda: self._queries.read_user_scope(session_id, keys, user_id, user_key),
            f"read of session {session_id!r:.80} and the sessions of {user_id!r:.80}",
        )

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id, in one query."""
        return self._run(
            lambda: self._queries.user_session_stats(user_id), f"stats of the sessions of {user_id!r:.80}"
        )

    def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one, in one query."""
        return self._run(lambda: self._queries.get_states(session_ids, key), f"read of state {key!r}")

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

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(
            lambda: self._queries.delete_messages(session_id, seqs),
            f"delete of messages of session {session_id!r:.80}",
            transaction=True,
        )

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        return self._run(
            lambda: self._queries.replace_message(session_id, seq, message),
            f"replacing seq={seq} of session {session_id!r:.80}",
            transaction=True,
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

    def history_tables(self) -> PostgresHistoryTables | None:
        """Recall's keyword index of each user's history in this schema, unless the store was
        opened with ``lexical_index="process"`` (see `HostsHistoryIndex`)."""
        return None if self.lexical_index == "process" else PostgresHistoryTables(self)

    def vector_index_factory(self, embedder: Embedder | str) -> Callable[[IndexScope], PostgresVectorIndex]:
        """An ``index_factory`` for `Recall` that keeps recall vectors in this database.

        `embedder` is the `Recall`'s embedder (or its ``name``): vectors are stored under
        its name and dimension, and those of another model are never read. A server that
        sees a session for the first time loads its stored vectors instead of embedding
        its log again; search runs on that copy in this process (see `PostgresVectorIndex`).
        It serves this store's sessions only: a scope of another store raises `ConfigError`.

        Example::

            store = PostgresStore("postgresql://app@db.internal/chat")
            embedder = SentenceTransformerEmbedder()
            recall = Recall(embedder, index_factory=store.vector_index_factory(embedder))
        """
        model = embedder if isinstance(embedder, str) else getattr(embedder, "name", None)
        if not isinstance(model, str) or not model:
            raise ConfigError(
                f"vector_index_factory needs the recall embedder (or its name), got {embedder!r:.80}"
            )
        from ..._recall.index_scope import store_namespace
        from .vectors import PostgresVectorIndex

        def new_index(scope: IndexScope) -> PostgresVectorIndex:
            if scope.store is not None and store_namespace(scope.store) != self.namespace:
                raise ConfigError(
                    f"the vector_index_factory of {self!r} keeps this store's vectors only, and was "
                    f"asked for session {scope.session_id!r:.80} of {scope.store!r}; give that "
                    "store's Recall its own factory"
                )
            return PostgresVectorIndex(
                self, session_id=scope.session_id, dimension=scope.dimension, model=model
            )

        return new_index

    def close(self) -> None:
        """Close the connection pool, unless it was passed in. Closing twice does nothing.

        A store that is dropped without it is closed when it is garbage-collected.
        """
        self._finalizer()
