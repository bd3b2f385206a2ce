"""A password in a store's URL never shows in an error message or a log line: Redis node and
Cluster URLs, PostgreSQL URLs and libpq option strings, against a refused connection and as a
URL the client library cannot use."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from redis_server import free_port

from convmem import (
    AsyncPostgresStore,
    AsyncRedisStore,
    ConfigError,
    Message,
    PostgresStore,
    RedisStore,
    StoreError,
)
from convmem._stores.credentials import redact, redact_url

PASSWORD = "pa%3Ass-w0rd-7f3e"  # percent-encoded in the URL: "pa:ss-w0rd-7f3e" to the server
SECRETS = (PASSWORD, "pa:ss-w0rd-7f3e", "w0rd-7f3e")


def refused(scheme: str) -> str:
    return f"{scheme}://app:{PASSWORD}@127.0.0.1:{free_port()}/0"


def append(store: Any) -> None:
    store.append("s", [Message.create("user", "hi")])


async def append_async(store: Any) -> None:
    try:
        await store.append("s", [Message.create("user", "hi")])
    finally:
        await store.close()


ATTEMPTS: dict[str, Callable[[], object]] = {
    "redis node, refused": lambda: append(RedisStore(refused("redis"), socket_timeout=1)),
    "redis cluster, refused": lambda: RedisStore(refused("redis"), cluster=True, socket_timeout=1),
    "async redis node, refused": lambda: asyncio.run(
        append_async(AsyncRedisStore(refused("redis"), socket_timeout=1))
    ),
    "async redis cluster, refused": lambda: asyncio.run(
        append_async(AsyncRedisStore(refused("redis"), cluster=True, socket_timeout=1))
    ),
    "redis node, unusable url": lambda: RedisStore(refused("redis") + "?socket_timeout=abc"),
    "redis cluster, unusable url": lambda: RedisStore(refused("redis") + "?socket_timeout=abc", cluster=True),
    "postgres url, refused": lambda: PostgresStore(refused("postgresql"), timeout=1),
    "postgres options, refused": lambda: PostgresStore(
        f"host=127.0.0.1 port={free_port()} user=app password='{PASSWORD}' dbname=chat", timeout=1
    ),
    "async postgres, refused": lambda: asyncio.run(
        append_async(AsyncPostgresStore(refused("postgresql"), timeout=1))
    ),
    "postgres url, unusable": lambda: PostgresStore(refused("postgresql") + "?bogus=1", timeout=1),
    "postgres options, unusable": lambda: PostgresStore(f"host=127.0.0.1 password={PASSWORD} bogus=1"),
}


@pytest.mark.parametrize("attempt", list(ATTEMPTS.values()), ids=list(ATTEMPTS))
def test_no_error_or_log_line_shows_the_password(
    attempt: Callable[[], object], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises((StoreError, ConfigError)) as failed:
        attempt()
    shown = [str(failed.value), repr(failed.value), *(r.getMessage() for r in caplog.records)]
    assert [text for text in shown if any(secret in text for secret in SECRETS)] == []
    assert "127.0.0.1" in str(failed.value) or "URL" in str(failed.value)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://app:secret@host:6379/0", "redis://app:***@host:6379/0"),
        ("rediss://:secret@host/0", "rediss://:***@host/0"),
        ("postgresql://app:s%40c@db/chat?sslmode=require", "postgresql://app:***@db/chat?sslmode=require"),
        ("host=db password='a b' user=app", "host=db password=*** user=app"),
        ("host=db PASSWORD = secret", "host=db PASSWORD = ***"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("unix:///tmp/redis.sock", "unix:///tmp/redis.sock"),
    ],
)
def test_a_url_is_shown_without_its_password(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_a_message_loses_the_password_however_it_is_quoted() -> None:
    url = "redis://app:p%40ss@host/0"
    assert redact("auth failed for p@ss and p%40ss", url) == "auth failed for *** and ***"
