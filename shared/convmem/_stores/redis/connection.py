"""The I/O edge of `RedisStore`: making its client (one node or a Cluster) from a URL, the
checks on its connection options, and what a failure tells the caller."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ..._errors import ConfigError, StoreError
from ..._options import check_number
from ..credentials import redact, redact_url

DEFAULT_URL = "redis://127.0.0.1:6379/0"


def _describe_client(client: Any) -> str:
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        names = sorted(getattr(manager, "startup_nodes", {}) or {})
        return "Redis Cluster at " + (",".join(names[:3]) or "?")
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return "Redis"
    if "path" in kwargs:
        return f"Redis at unix:{kwargs['path']} db {kwargs.get('db', 0)}"
    return f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')} db {kwargs.get('db', 0)}"


def _failure(where: str, action: str, exc: BaseException, url: str | None = None) -> StoreError:
    """What the caller is told when Redis fails: never a password, of `url` or any other."""
    import redis.exceptions

    if isinstance(exc, redis.exceptions.ResponseError):
        hint = "check that no other data uses this store's key prefix"
    else:
        hint = "check that Redis is running and reachable; the next call reconnects"
    return StoreError(
        f"{where}: {action} failed ({type(exc).__name__}: {redact(str(exc), url)}). Each write is applied "
        "whole or "
        f"not at all; {hint}"
    )


def _describe_url(url: str, what: str) -> str:
    """``<what> at host:port``, without user or password."""
    try:
        parts = urlsplit(url)
        return f"{what} at {parts.hostname or '?'}:{parts.port or 6379}"
    except ValueError:
        return what


def _pool(pool_class: Any, url: str, socket_timeout: float | None, max_connections: int, retry: Any) -> Any:
    _check_pool_size(max_connections)
    try:
        return pool_class.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            # No automatic retry: a retried script whose first reply was lost would append twice.
            retry=retry,
        )
    except ValueError as exc:
        raise ConfigError(f"cannot use Redis URL {redact_url(url)!r}: {redact(str(exc), url)}") from None


_MAX_CONNECTIONS = 100_000
# Seconds: a call that waits longer than a day for Redis is not waiting for a reply.
_MAX_SOCKET_TIMEOUT = 86_400.0


def _check_pool_size(max_connections: object) -> None:
    if (
        isinstance(max_connections, bool)
        or not isinstance(max_connections, int)
        or not 1 <= max_connections <= _MAX_CONNECTIONS
    ):
        raise ConfigError(
            f"max_connections must be an int from 1 to {_MAX_CONNECTIONS}, got {max_connections!r:.60}"
        )


def _check_socket_timeout(socket_timeout: object) -> None:
    if socket_timeout is not None:
        check_number(
            "socket_timeout",
            socket_timeout,
            low=0,
            high=_MAX_SOCKET_TIMEOUT,
            low_open=True,
            allowed=f"None or a number of seconds in (0, {_MAX_SOCKET_TIMEOUT:.0f}]",
        )


def _cluster(cluster_class: Any, url: str, socket_timeout: float | None, retry: Any) -> Any:
    """A Cluster client that follows MOVED/ASK redirections but never re-runs a failed command."""
    try:
        return cluster_class.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=retry,
        )
    except ValueError as exc:
        raise ConfigError(
            f"cannot use Redis Cluster URL {redact_url(url)!r}: {redact(str(exc), url)}"
        ) from None


def _check_source(url: str | None, client: object) -> None:
    if url is not None and client is not None:
        raise ConfigError("pass either url=... or client=..., not both")
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"url must be a Redis URL string, got {type(url).__name__}")


def _redis_module() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigError("RedisStore needs the redis package: pip install 'convmem[redis]'") from None
    return redis
