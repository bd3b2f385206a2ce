"""`RedisStore` and `AsyncRedisStore`: session logs in Redis (one node or a Cluster), shared by
many processes and servers.

How sessions are laid out in keys, and why concurrent writers never collide,
is told in `layout`, how ids and messages are written there in `records`;
the scripts that make each write atomic are in `scripts`, and how the client is
made from a URL in `connection`.

Both classes share every piece of logic (`_RedisLayout`); they differ only in how a
request reaches Redis (a blocking call or an awaited one).

Data written by convmem before hash tags (keys ``P:session:E:meta`` without
braces, and a ``P:sessions`` set) is invisible to this layout: run
`RedisStore.migrate_untagged_keys` once on that server (it renames the keys in
place), then, to move into a Cluster, ``redis-cli --cluster import``.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..._errors import ConfigError
from ..._models import Message, TurnStatus
from ..._sansio import arun, run
from ..base import AsyncStore, SessionSnapshot, SessionStats, StateRecord, Store
from ..capabilities import (
    AsyncReadsSession,
    ListsUserSessions,
    LogRead,
    ReadsLogs,
    ReadsSession,
    ReadsStates,
    ReadsUserScope,
)
from .connection import (
    DEFAULT_URL,
    _check_pool_size,
    _check_socket_timeout,
    _check_source,
    _cluster,
    _describe_client,
    _describe_url,
    _failure,
    _pool,
    _redis_module,
)
from .layout import _Command, _Operation, _RedisLayout, _Request, _Scan, _Script
from .records import _escape as _escape  # the tests name keys by it
from .scripts import _SCRIPT_SHAS, _SCRIPT_SOURCES

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

__all__ = ["AsyncRedisStore", "RedisStore"]

_T = TypeVar("_T")
# Keys asked for per SCAN step.
_SCAN_COUNT = 1000
# Users whose sessions a store remembers between builds (see `RedisStore.read_user_scope`).
_USERS_REMEMBERED = 4096


class RedisStore(Store, ReadsSession, ReadsStates, ReadsLogs, ListsUserSessions, ReadsUserScope):
    """A store in Redis (one node or a Cluster), shared by every process and server that uses
    the same URL and prefix.

    Args:
        url: a redis-py connection URL (``redis://``, ``rediss://`` or ``unix://``);
            query options such as ``?socket_timeout=5`` are honoured. With
            ``cluster=True``, the address of any node of the Cluster.
        cluster: connect to a Redis Cluster at `url` (``redis.cluster.RedisCluster``).
        prefix: the namespace of every key this store writes (``prefix:...``).
        ttl_seconds: if set, a session is deleted by Redis after this long without
            a write; every write refreshes the expiry of all the session's keys.
        client: an existing ``redis.Redis`` or ``redis.cluster.RedisCluster`` to use
            instead of `url`. It is not closed by `close`. Its retry policy is kept:
            redis-py retries failed commands by default, which can repeat an append
            whose reply was lost, so pass ``retry=Retry(NoBackoff(), 0)`` to get
            at-most-once appends.
        socket_timeout: seconds to wait for Redis (or for a free pooled connection)
            before a call fails with `StoreError`.
        max_connections: the size of the connection pool of a single node; more
            concurrent calls wait for a free connection instead of failing.

    A lost connection raises `StoreError`; nothing is retried behind your back,
    and the next call reconnects. Sessions that expire by TTL vanish from
    `sessions`; `expire_idle` also prunes them from their users' sets.

    Example::

        store = RedisStore("redis://127.0.0.1:6379/0", prefix="chat", ttl_seconds=7 * 86400)
        store.append("session-1", [Message.create("user", "hi")], user_id="alice")
        store.tail("session-1", 20)

        cluster = RedisStore("redis://10.0.0.5:7000", cluster=True, prefix="chat")
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster: bool = False,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.Redis | redis.cluster.RedisCluster | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        _check_source(url, client)
        _check_pool_size(max_connections)
        _check_socket_timeout(socket_timeout)
        redis_module = _redis_module()
        self._errors = (redis_module.RedisError, redis_module.exceptions.RedisClusterException, OSError)
        self._no_script = redis_module.exceptions.NoScriptError
        self._owns_client = client is None
        if client is None:
            from redis.backoff import NoBackoff
            from redis.cluster import RedisCluster
            from redis.retry import Retry

            url = url or DEFAULT_URL
            if cluster:
                try:
                    client = _cluster(RedisCluster, url, socket_timeout, Retry(NoBackoff(), 0))
                except self._errors as exc:
                    raise _failure(_describe_url(url, "Redis Cluster"), "connecting", exc, url) from exc
            else:
                pool = _pool(
                    redis_module.BlockingConnectionPool,
                    url,
                    socket_timeout,
                    max_connections,
                    Retry(NoBackoff(), 0),
                )
                client = redis_module.Redis.from_pool(pool)
        self._client: Any = client
        self._where = _describe_client(client)
        self._scripts_loaded = False
        # The members of the users' sets read last (escaped ids), least recently used
        # first: the guess that lets `read_user_scope` read a user's scope in one round trip.
        self._members: OrderedDict[str, list[str]] = OrderedDict()
        self._members_lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, prefix={self._layout.prefix!r})"

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def prefix(self) -> str:
        """The namespace of every key this store writes (``prefix:...``)."""
        return self._layout.prefix

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the server (no credentials) and key prefix."""
        return f"{self._where}, prefix {self._layout.prefix}"

    def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Script):
            return self._evalsha(request)
        if isinstance(request, _Command):
            return self._client.execute_command(*request.args)
        if isinstance(request, _Scan):
            # A Cluster client scans every primary; a single node is the only one.
            return list(self._client.scan_iter(match=request.pattern, count=_SCAN_COUNT, _type=request.kind))
        pipe = self._client.pipeline(transaction=False)
        for command in request.commands:
            pipe.execute_command(*command)
        return pipe.execute()

    def _load_scripts(self) -> None:
        # On a Cluster, SCRIPT LOAD reaches every primary.
        for source in _SCRIPT_SOURCES.values():
            self._client.script_load(source)
        self._scripts_loaded = True

    def _evalsha(self, request: _Script) -> Any:
        # Scripts are loaded before their first use (and again after a server restart
        # forgot them): a NOSCRIPT reply means the script did not run, so a retry is safe.
        if not self._scripts_loaded:
            self._load_scripts()
        command = ("EVALSHA", _SCRIPT_SHAS[request.name], len(request.keys), *request.keys, *request.args)
        try:
            return self._client.execute_command(*command)
        except self._no_script:
            self._load_scripts()
            return self._client.execute_command(*command)

    def _run(self, operation: _Operation[_T], action: str) -> _T:
        def perform(request: _Request) -> Any:
            # Only what Redis raises is a store failure: an operation's own error (a
            # SessionOwnerError is an OSError too) reaches the caller as it is.
            try:
                return self._perform(request)
            except self._errors as exc:
                raise _failure(self._where, action, exc) from exc

        return run(operation, perform)

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return self._run(
            self._layout.append(session_id, messages, user_id), f"append to session {session_id!r:.80}"
        )

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return self._run(
            self._layout.messages(session_id, after_seq, through_seq), f"read of session {session_id!r:.80}"
        )

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return self._run(
            self._layout.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(self._layout.get(session_id, seqs), f"read of session {session_id!r:.80}")

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return self._run(
            self._layout.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(
            self._layout.delete_messages(session_id, seqs),
            f"delete of messages of session {session_id!r:.80}",
        )

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        return self._run(
            self._layout.replace_message(session_id, seq, message),
            f"replacing seq={seq} of session {session_id!r:.80}",
        )

    def stats(self, session_id: str) -> SessionStats:
        return self._run(self._layout.stats(session_id), f"stats of session {session_id!r:.80}")

    def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """The session's stats and its `keys` state records (those it has), in one round
        trip (see `ReadsSession`)."""
        return self._run(self._layout.read_session(session_id, keys), f"read of session {session_id!r:.80}")

    def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one, in one pipeline (a user's
        facts are read from all their sessions for each build)."""
        return self._run(self._layout.get_states(session_ids, key), f"read of state {key!r}")

    def read_logs(self, session_ids: Sequence[str]) -> dict[str, LogRead]:
        """Each session's stats, whole log and stats again, in one pipeline per 64
        sessions (see `ReadsLogs`): a new process's first search of a user reads all
        their logs."""
        return self._run(self._layout.read_logs(session_ids), f"read of {len(session_ids)} session logs")

    def read_user_scope(
        self, session_id: str, keys: Sequence[str], user_id: str, user_key: str
    ) -> SessionSnapshot:
        """`read_session` with the stats of `user_id`'s sessions and their `user_key`
        records (see `ReadsUserScope`): one round trip when the user's sessions are the
        ones this store saw last time (it remembers the last members of a bounded number
        of users), two when they changed."""
        with self._members_lock:
            guess = self._members.get(user_id, ())
        snapshot, members = self._run(
            self._layout.read_user_scope(session_id, keys, user_id, user_key, guess),
            f"read of session {session_id!r:.80} and the sessions of {user_id!r:.80}",
        )
        with self._members_lock:
            self._members[user_id] = members
            self._members.move_to_end(user_id)
            while len(self._members) > _USERS_REMEMBERED:
                self._members.popitem(last=False)
        return snapshot

    def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id, in two round trips."""
        return self._run(
            self._layout.user_session_stats(user_id), f"stats of the sessions of {user_id!r:.80}"
        )

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return self._run(
            self._layout.get_state(session_id, key), f"read of state {key!r} of session {session_id!r:.80}"
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
            self._layout.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
        )

    def delete_state(self, session_id: str, key: str) -> None:
        self._run(
            self._layout.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    def clear(self, session_id: str) -> None:
        self._run(self._layout.clear(session_id), f"clear of session {session_id!r:.80}")

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        return self._run(self._layout.sessions(user_id), "listing sessions")

    def forget_user(self, user_id: str) -> list[str]:
        return self._run(self._layout.forget_user(user_id), f"forget_user({user_id!r:.80})")

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete sessions idle longer than `older_than_seconds` by Redis's clock.

        With ``ttl_seconds`` Redis already deletes idle sessions by itself; this
        sweep then only removes the index entries they leave behind (those ids
        are not returned). Without a TTL it is the retention path.
        """
        return self._run(self._layout.expire_idle(older_than_seconds), "expire_idle")

    def migrate_untagged_keys(self) -> int:
        """Move sessions written by convmem before hash tags into today's key layout.

        Renames ``P:session:E:*`` to ``P:session:{E}:*`` and ``P:user:U:sessions`` to
        ``P:user:{U}:sessions`` on this (single) server, drops the old ``P:sessions``
        index, and returns how many sessions were moved. Safe to run again; stop
        writers of the old version first. To then move into a Cluster, use
        ``redis-cli --cluster import <cluster node> --cluster-from <this server>``.
        """
        if hasattr(self._client, "nodes_manager"):
            raise ConfigError(
                "keys without hash tags were only ever written to a single Redis server: run "
                "migrate_untagged_keys there, then move them with redis-cli --cluster import"
            )
        return self._run(self._layout.migrate_untagged_keys(), "migrating keys without hash tags")

    def close(self) -> None:
        """Close the connection pool, unless the client was passed in."""
        if self._owns_client:
            self._client.close()


class AsyncRedisStore(AsyncStore, AsyncReadsSession):
    """`RedisStore` for asyncio (``redis.asyncio``): the same arguments, and the same
    methods as coroutines, under the same names::

        store = AsyncRedisStore("redis://127.0.0.1:6379/0", prefix="chat")
        await store.append("session-1", [Message.create("user", "hi")])
        window = await store.tail("session-1", 20)
        await store.close()

    `client` may be a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``;
    ``cluster=True`` makes the latter from `url`. A store is bound to the event loop
    it is first used in, like any redis.asyncio client. Both classes share one
    implementation and one key layout, so sync and async processes can serve the
    same sessions.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster: bool = False,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        _check_source(url, client)
        _check_pool_size(max_connections)
        _check_socket_timeout(socket_timeout)
        redis_module = _redis_module()
        self._owns_client = client is None
        if client is None:
            from redis.asyncio import BlockingConnectionPool, Redis
            from redis.asyncio.cluster import RedisCluster
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            url = url or DEFAULT_URL
            if cluster:
                client = _cluster(RedisCluster, url, socket_timeout, Retry(NoBackoff(), 0))
            else:
                pool = _pool(
                    BlockingConnectionPool, url, socket_timeout, max_connections, Retry(NoBackoff(), 0)
                )
                client = Redis.from_pool(pool)
        self._client: Any = client
        self._errors = (redis_module.RedisError, redis_module.exceptions.RedisClusterException, OSError)
        self._no_script = redis_module.exceptions.NoScriptError
        self._where = _describe_client(client)
        self._scripts_loaded = False
        self._loading: asyncio.Lock | None = None
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None

    def __repr__(self) -> str:
        return f"AsyncRedisStore({self._where!r}, prefix={self._layout.prefix!r})"

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def prefix(self) -> str:
        """The namespace of every key this store writes (``prefix:...``)."""
        return self._layout.prefix

    @property
    def namespace(self) -> str:
        """This store's name in a shared vector store: the server (no credentials) and key prefix."""
        return f"{self._where}, prefix {self._layout.prefix}"

    async def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Script):
            return await self._evalsha(request)
        if isinstance(request, _Command):
            return await self._client.execute_command(*request.args)
        if isinstance(request, _Scan):
            return [
                key
                async for key in self._client.scan_iter(
                    match=request.pattern, count=_SCAN_COUNT, _type=request.kind
                )
            ]
        async with self._client.pipeline(transaction=False) as pipe:
            for command in request.commands:
                pipe.execute_command(*command)
            return await pipe.execute()

    async def _load_scripts(self, known_missing: bool) -> None:
        # One load at a time: redis.asyncio's Cluster client breaks connections when many
        # calls hit NOSCRIPT and load the same script at once.
        if self._loading is None:
            self._loading = asyncio.Lock()
        async with self._loading:
            if self._scripts_loaded and not known_missing:
                return
            for source in _SCRIPT_SOURCES.values():
                await self._client.script_load(source)
            self._scripts_loaded = True

    async def _evalsha(self, request: _Script) -> Any:
        if not self._scripts_loaded:
            await self._load_scripts(known_missing=False)
        command = ("EVALSHA", _SCRIPT_SHAS[request.name], len(request.keys), *request.keys, *request.args)
        try:
            return await self._client.execute_command(*command)
        except self._no_script:
            await self._load_scripts(known_missing=True)
            return await self._client.execute_command(*command)

    def _check_loop(self) -> None:
        """Refuse an event loop other than the first one: the client's connections are its."""
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = weakref.ref(loop)
        elif self._loop() is not loop:
            raise ConfigError(
                f"{self!r} was first used in another event loop, and a redis.asyncio client "
                "stays bound to it; make an AsyncRedisStore in each event loop (each asyncio.run), "
                "or use RedisStore, which any thread may share"
            )

    async def _run(self, operation: _Operation[_T], action: str) -> _T:
        self._check_loop()

        async def perform(request: _Request) -> Any:
            try:
                return await self._perform(request)
            except self._errors as exc:
                raise _failure(self._where, action, exc) from exc

        return await arun(operation, perform)

    async def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return await self._run(
            self._layout.append(session_id, messages, user_id), f"append to session {session_id!r:.80}"
        )

    async def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return await self._run(
            self._layout.messages(session_id, after_seq, through_seq), f"read of session {session_id!r:.80}"
        )

    async def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return await self._run(
            self._layout.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    async def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return await self._run(self._layout.get(session_id, seqs), f"read of session {session_id!r:.80}")

    async def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return await self._run(
            self._layout.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    async def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return await self._run(
            self._layout.delete_messages(session_id, seqs),
            f"delete of messages of session {session_id!r:.80}",
        )

    async def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        return await self._run(
            self._layout.replace_message(session_id, seq, message),
            f"replacing seq={seq} of session {session_id!r:.80}",
        )

    async def stats(self, session_id: str) -> SessionStats:
        return await self._run(self._layout.stats(session_id), f"stats of session {session_id!r:.80}")

    async def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        """Async `RedisStore.read_session`."""
        return await self._run(
            self._layout.read_session(session_id, keys), f"read of session {session_id!r:.80}"
        )

    async def get_states(self, session_ids: Sequence[str], key: str) -> dict[str, StateRecord]:
        """The `key` record of each of `session_ids` that has one, in one pipeline."""
        return await self._run(self._layout.get_states(session_ids, key), f"read of state {key!r}")

    async def user_session_stats(self, user_id: str) -> list[SessionStats]:
        """`stats` of every session of `user_id`, sorted by id, in two round trips."""
        return await self._run(
            self._layout.user_session_stats(user_id), f"stats of the sessions of {user_id!r:.80}"
        )

    async def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return await self._run(
            self._layout.get_state(session_id, key), f"read of state {key!r} of session {session_id!r:.80}"
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
            self._layout.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
        )

    async def delete_state(self, session_id: str, key: str) -> None:
        await self._run(
            self._layout.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    async def clear(self, session_id: str) -> None:
        await self._run(self._layout.clear(session_id), f"clear of session {session_id!r:.80}")

    async def sessions(self, *, user_id: str | None = None) -> list[str]:
        return await self._run(self._layout.sessions(user_id), "listing sessions")

    async def forget_user(self, user_id: str) -> list[str]:
        return await self._run(self._layout.forget_user(user_id), f"forget_user({user_id!r:.80})")

    async def expire_idle(self, older_than_seconds: float) -> list[str]:
        """See `RedisStore.expire_idle`."""
        return await self._run(self._layout.expire_idle(older_than_seconds), "expire_idle")

    async def close(self) -> None:
        """Close the connection pool, unless the client was passed in."""
        if self._owns_client:
            await self._client.aclose()
