"""Where a store lives for one test, for every kind of store: in this process, a SQLite file,
Redis (a node or a Cluster), PostgreSQL, and the async stores on those servers.

A `Location` names a server (URL) or file and a namespace of the test's own (a key prefix
for Redis, a schema for PostgreSQL), opens stores on it in any process, and deletes the
namespace at the end::

    location = location_for("postgres", request)
    store = location.open()
    ...
    location.cleanup()

The async kinds open their store through `convmem.testing.blocking`, so a test written for
a `Store` holds the async stores to it too.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from contextlib import closing

import psycopg
import pytest
import redis
import redis.cluster
from postgres_server import drop_schema, new_schema
from redis_server import delete_prefix, new_prefix, open_shared_store

from convmem import (
    AsyncPostgresStore,
    AsyncRedisStore,
    InMemoryStore,
    PostgresStore,
    RedisStore,
    SQLiteStore,
    Store,
)
from convmem._stores.redis.records import _escape
from convmem.testing import blocking

__all__ = ["ASYNC_KINDS", "SERVER_KINDS", "STORE_KINDS", "STORE_TYPES", "Location", "location_for"]

# Each server kind once, marked so that `-m "not redis"` or `-m "not postgres"` leaves it out.
SERVER_KINDS = [
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]
ASYNC_KINDS = [
    pytest.param("async-redis", marks=pytest.mark.redis),
    pytest.param("async-redis-cluster", marks=pytest.mark.redis),
    pytest.param("async-postgres", marks=pytest.mark.postgres),
]
STORE_KINDS = ["memory", "sqlite", *SERVER_KINDS, *ASYNC_KINDS]
STORE_TYPES: dict[str, type] = {
    "memory": InMemoryStore,
    "sqlite": SQLiteStore,
    "redis": RedisStore,
    "redis-cluster": RedisStore,
    "postgres": PostgresStore,
    "async-redis": AsyncRedisStore,
    "async-redis-cluster": AsyncRedisStore,
    "async-postgres": AsyncPostgresStore,
}


@dataclasses.dataclass(frozen=True)
class Location:
    kind: str
    url: str
    """The server's URL, or the SQLite file."""
    namespace: str
    memory: InMemoryStore | None = None
    """The one store of the "memory" kind: every open returns it."""

    @property
    def persistent(self) -> bool:
        """Whether a store opened after another was closed sees its data."""
        return self.kind != "memory"

    @property
    def server_kind(self) -> str:
        return self.kind.removeprefix("async-")

    def open(self) -> Store:
        if self.memory is not None:
            return self.memory
        if self.kind == "async-postgres":
            return blocking(lambda: AsyncPostgresStore(self.url, schema=self.namespace))()
        if self.kind.startswith("async-"):
            cluster = self.kind == "async-redis-cluster"
            return blocking(lambda: AsyncRedisStore(self.url, cluster=cluster, prefix=self.namespace))()
        return open_shared_store(self.kind, self.url, self.namespace)

    def corrupt(self, session_id: str, seq: int, raw: str) -> None:
        """Overwrite the stored content of one message with `raw`, as damage would."""
        if self.server_kind == "sqlite":
            with closing(sqlite3.connect(self.url)) as conn, conn:
                conn.execute(
                    "UPDATE messages SET content = ? WHERE session_id = ? AND seq = ?", (raw, session_id, seq)
                )
        elif self.server_kind == "postgres":
            with psycopg.connect(self.url, autocommit=True) as conn:
                conn.execute(
                    f'UPDATE "{self.namespace}".messages SET content = %s WHERE session_id = %s AND seq = %s',
                    (raw, session_id, seq),
                )
        elif self.server_kind.startswith("redis"):
            # Documented layout: prefix:session:{<escaped id>}:log, a hash of seq -> JSON record.
            cluster = self.server_kind == "redis-cluster"
            client = (
                redis.cluster.RedisCluster.from_url(self.url) if cluster else redis.Redis.from_url(self.url)
            )
            client.hset(f"{self.namespace}:session:{{{_escape(session_id)}}}:log", str(seq), raw)
            client.close()
        else:
            raise ValueError(f"a {self.kind} store keeps nothing to damage")

    def cleanup(self) -> None:
        if self.server_kind == "postgres":
            drop_schema(self.url, self.namespace)
        elif self.server_kind.startswith("redis"):
            delete_prefix(self.url, self.namespace, cluster=self.server_kind == "redis-cluster")


def location_for(kind: str, request: pytest.FixtureRequest) -> Location:
    """A fresh namespace of `kind` (skips or fails if its server cannot be had)."""
    if kind == "memory":
        return Location(kind, "", "", InMemoryStore())
    if kind == "sqlite":
        return Location(kind, str(request.getfixturevalue("tmp_path") / "memory.db"), "")
    server = kind.removeprefix("async-")
    if server == "postgres":
        return Location(kind, request.getfixturevalue("postgres_url"), new_schema())
    fixture = "redis_cluster_url" if server == "redis-cluster" else "redis_url"
    return Location(kind, request.getfixturevalue(fixture), new_prefix())
