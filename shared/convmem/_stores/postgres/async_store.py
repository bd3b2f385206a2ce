"""`AsyncPostgresStore`: `PostgresStore` for asyncio, on psycopg's async connections.

It shares every piece of logic with `PostgresStore` (`_Queries`, the connection
options, the watchdog and the failure messages); only how a statement reaches the
server differs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import ConfigError
from ..._models import Message, TurnStatus
from ..._sansio import arun
from ..base import AsyncStore, SessionSnapshot, SessionStats, StateRecord
from ..capabilities import (
    AsyncReadsSession,
)
from .connection import (
    _connection_kwargs,
    _describe,
    _failure,
    _missing_recall_table,
    _psycopg,
    _refuse_stale,
    _retryable,
    _sever,
    _StaleConnection,
    _warn_remade,
    _Watch,
)
from .queries import _Queries
from .sql import DEFAULT_SCHEMA, _not_utf8, _Operation, _RollBack

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool


from .store import _ATTEMPTS, _check_pool_size, _check_timeout

__all__ = ["AsyncPostgresStore"]

_T = TypeVar("_T")


class AsyncPostgresStore(AsyncStore, AsyncReadsSession):
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
        """The PostgreSQL schema that holds this store's tables."""
        return self._queries.schema

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the server and database (no credentials), and schema."""
        return f"{self._where}, schema {self._queries.schema}"

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
        async def perform(request: Any) -> list[Any]:
            cursor = await conn.execute(request.text, request.params)
            return await cursor.fetchall() if cursor.description is not None else []

        return await arun(operation, perform)

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
        remade = False
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
                if not remade and _missing_recall_table(exc):
                    remade = True
                    made = await self._attempts(
                        self._queries.remake_recall_tables, "making recall's tables again", transaction=True
                    )
                    _warn_remade(self._where, made, exc)
                    continue
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

    async def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """Async `PostgresStore.read_session`."""
        return await self._run(
            lambda: self._queries.read_session(session_id, keys), f"read of session {session_id!r:.80}"
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

    async def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return await self._run(
            lambda: self._queries.delete_messages(session_id, seqs),
            f"delete of messages of session {session_id!r:.80}",
            transaction=True,
        )

    async def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        return await self._run(
            lambda: self._queries.replace_message(session_id, seq, message),
            f"replacing seq={seq} of session {session_id!r:.80}",
            transaction=True,
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
