"""Where a server-backed store lives for one test, for every kind that several processes can share.

A `Location` names a server (URL) and a namespace of the test's own (a key prefix
for Redis, a schema for PostgreSQL), opens stores on it in any process, and
deletes the namespace at the end::

    location = location_for("postgres", request)
    store = location.open()
    ...
    location.cleanup()
"""

from __future__ import annotations

import dataclasses

import pytest
from postgres_server import drop_schema, new_schema
from redis_server import delete_prefix, new_prefix, open_shared_store

from convmem import Store

__all__ = ["SERVER_KINDS", "Location", "location_for"]

# Each server kind once, marked so that `-m "not redis"` or `-m "not postgres"` leaves it out.
SERVER_KINDS = [
    pytest.param("redis", marks=pytest.mark.redis),
    pytest.param("redis-cluster", marks=pytest.mark.redis),
    pytest.param("postgres", marks=pytest.mark.postgres),
]


@dataclasses.dataclass(frozen=True)
class Location:
    kind: str
    url: str
    namespace: str

    def open(self) -> Store:
        return open_shared_store(self.kind, self.url, self.namespace)

    def cleanup(self) -> None:
        if self.kind == "postgres":
            drop_schema(self.url, self.namespace)
        else:
            delete_prefix(self.url, self.namespace, cluster=self.kind == "redis-cluster")


def location_for(kind: str, request: pytest.FixtureRequest) -> Location:
    """A fresh namespace on the shared server of `kind` (skips or fails if there is none)."""
    if kind == "postgres":
        return Location(kind, request.getfixturevalue("postgres_url"), new_schema())
    fixture = "redis_cluster_url" if kind == "redis-cluster" else "redis_url"
    return Location(kind, request.getfixturevalue(fixture), new_prefix())
