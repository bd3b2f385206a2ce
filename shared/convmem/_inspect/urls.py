"""Opening a store from a URL, as ``convmem inspect`` and ``convmem serve`` take one.

    sqlite:///chat.db               a SQLite file, relative to the working directory
    sqlite:////var/lib/chat.db      ... or absolute (four slashes)
    chat.db                         a path alone is a SQLite file too
    redis://host:6379/0?prefix=chat            a Redis node (``rediss://``, ``unix://`` too)
    redis://host:7000/0?cluster=1&prefix=chat  a Redis Cluster, reached through any node
    postgresql://user@host/db?schema=convmem   PostgreSQL (``postgres://`` too)

``prefix``, ``cluster`` and ``schema`` are the store's own options and are taken
out of the URL; every other query option goes to the client as written.
A SQLite file must exist: inspecting a path with a typo would otherwise create
an empty database there.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from .._errors import ConfigError
from .._stores.base import Store

__all__ = ["URL_FORMS", "open_store_url"]

URL_FORMS = "sqlite:///chat.db, a path to a SQLite file, redis://host:6379/0, postgresql://user@host/db"

_TRUE = {"1", "true", "yes", "on"}


def _without(url: str, names: set[str]) -> tuple[str, dict[str, str]]:
    """`url` without the query options `names`, and those options' values."""
    parts = urlsplit(url)
    kept, taken = [], {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in names:
            taken[name] = value
        else:
            kept.append((name, value))
    return urlunsplit(parts._replace(query=urlencode(kept))), taken


def _sqlite(path_text: str, url: str) -> Store:
    from .._stores.sqlite.store import SQLiteStore

    if not path_text:
        raise ConfigError(
            f"store URL {url!r} names no file; write sqlite:///chat.db (or sqlite:////abs/chat.db)"
        )
    path = Path(path_text).expanduser()
    if not path.is_file():
        raise ConfigError(
            f"no SQLite file at {str(path)!r} (from {url!r}); the inspector opens existing stores only"
        )
    return SQLiteStore(path)


def open_store_url(url: str) -> Store:
    """The store `url` names (see the module docstring); `ConfigError` for a URL of no known kind."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"a store URL is needed ({URL_FORMS}), got {url!r:.80}")
    scheme = urlsplit(url).scheme.lower() if "://" in url else ""
    if scheme == "sqlite":
        return _sqlite(url.split("://", 1)[1].removeprefix("/"), url)
    if scheme in ("redis", "rediss", "unix"):
        from .._stores.redis.store import RedisStore

        client_url, options = _without(url, {"prefix", "cluster"})
        return RedisStore(
            client_url,
            cluster=options.get("cluster", "").lower() in _TRUE,
            prefix=options.get("prefix") or "convmem",
        )
    if scheme in ("postgresql", "postgres"):
        from .._stores.postgres.store import PostgresStore

        client_url, options = _without(url, {"schema"})
        return PostgresStore(client_url, schema=options.get("schema") or "convmem")
    if scheme:
        raise ConfigError(f"store URL {url!r:.80} has the unknown scheme {scheme!r}; use one of: {URL_FORMS}")
    return _sqlite(url, url)
