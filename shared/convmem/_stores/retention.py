"""Retention: the "delete my data" path.

Deleting a session removes everything convmem keeps about it: the log, the
derived state records (rolling summary, facts and their watermarks) and, when
the recall engines that index it are passed in, its vectors. The store is
emptied first, so that an indexer running at the same moment finds an empty
log and cannot bring the vectors back; then each engine forgets the session.
Each store sees to its own copies of deleted text (`SQLiteStore` empties its
write-ahead log after a delete), so nothing here depends on the kind of store.

Three entry points, each with an async twin::

    forget_session(store, "session-1", recall=recall)   # one conversation
    forget_user(store, "alice", recall=recall)           # a privacy request
    expire_idle(store, 30 * 86400, recall=recall)        # a periodic sweep

``recall`` is anything with a ``forget(session_id)`` method (the `Recall`
engine, or an adapter over a shared vector store), or a list of them; one whose
``forget`` also takes ``store=`` (`Recall`) is told the store, so it deletes
that store's vectors and no other tenant's.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from .._errors import ConfigError, StoreError
from .base import AsyncStore, Store, idle_cutoff, is_async_store, is_store, validate_id

__all__ = [
    "Forgettable",
    "aexpire_idle",
    "aforget_session",
    "aforget_user",
    "expire_idle",
    "forget_session",
    "forget_user",
]

# Ids named in an error message; the rest are counted, so one huge sweep cannot make a huge message.
_IDS_SHOWN = 20


@runtime_checkable
class Forgettable(Protocol):
    """Something that holds per-session data derived from the log, e.g. a vector index."""

    def forget(self, session_id: str) -> object:
        """Delete everything held for `session_id`; forgetting an unknown session does nothing."""
        ...


RecallEngines = Forgettable | Sequence[Forgettable] | None


# -- checks made before anything is deleted ---------------------------------------------


def _engines(recall: RecallEngines) -> list[Forgettable]:
    if recall is None:
        return []
    candidates: list[object] = list(recall) if isinstance(recall, (list, tuple)) else [recall]
    engines: list[Forgettable] = []
    for engine in candidates:
        if not isinstance(engine, Forgettable) or not callable(engine.forget):
            raise ConfigError(
                f"recall must have a forget(session_id) method (e.g. a Recall engine), or be a list "
                f"of such objects; got {type(engine).__name__}. Nothing was deleted"
            )
        engines.append(engine)
    return engines


def _check_store(store: object, *, asynchronous: bool) -> None:
    if not is_store(store) and not is_async_store(store):
        hint = " (pass memory.store)" if hasattr(store, "store") else ""
        raise ConfigError(
            "store must be a convmem store (InMemoryStore, SQLiteStore, RedisStore, PostgresStore, or "
            f"for the async functions AsyncRedisStore, AsyncPostgresStore), "
            f"got {type(store).__name__}{hint}. Nothing was deleted"
        )
    if not asynchronous and is_async_store(store):
        raise ConfigError(
            f"{type(store).__name__} is an asyncio store; use the async twins "
            "(aforget_session, aforget_user, aexpire_idle). Nothing was deleted"
        )


def _check_sync_engines(engines: list[Forgettable]) -> None:
    for engine in engines:
        if inspect.iscoroutinefunction(engine.forget):
            raise ConfigError(
                f"{type(engine).__name__}.forget is a coroutine function; use the async twins "
                "(aforget_session, aforget_user, aexpire_idle). Nothing was deleted"
            )


def _check_age(older_than_seconds: float) -> None:
    idle_cutoff(older_than_seconds, 0.0)  # raises ConfigError with the reason


# -- forgetting vectors ------------------------------------------------------------------


def _vector_failure(failures: list[tuple[str, Forgettable, BaseException]], deleted: int) -> StoreError:
    ids = sorted({session_id for session_id, _, _ in failures})
    shown = ", ".join(repr(i) for i in ids[:_IDS_SHOWN])
    more = f" and {len(ids) - _IDS_SHOWN} more" if len(ids) > _IDS_SHOWN else ""
    _, engine, first = failures[0]
    return StoreError(
        f"the logs, summaries and facts of {deleted} session(s) were deleted, but the vectors of "
        f"session(s) {shown}{more} could not be deleted from {engine!r} "
        f"({type(first).__name__}: {first}); call forget_session(store, session_id, recall=...) "
        "for each of them to retry (it is safe to repeat)"
    )


def _forgetting(engine: Forgettable, store: object) -> Callable[[str], object]:
    """``engine.forget``, given the store when it takes one: a shared vector store holds the
    sessions of many stores, and only this store's are to go."""
    try:
        takes_store = "store" in inspect.signature(engine.forget).parameters
    except (TypeError, ValueError):
        takes_store = False
    forget: Callable[..., object] = engine.forget
    return functools.partial(forget, store=store) if takes_store else forget


def _forget_vectors(engines: list[Forgettable], session_ids: Sequence[str], store: object) -> None:
    failures: list[tuple[str, Forgettable, BaseException]] = []
    for session_id in session_ids:
        for engine in engines:
            try:
                _forgetting(engine, store)(session_id)
            except Exception as exc:  # every other session still gets its vectors deleted
                failures.append((session_id, engine, exc))
    if failures:
        raise _vector_failure(failures, len(session_ids)) from failures[0][2]


async def _aforget_vectors(engines: list[Forgettable], session_ids: Sequence[str], store: object) -> None:
    failures: list[tuple[str, Forgettable, BaseException]] = []
    for session_id in session_ids:
        for engine in engines:
            forget = _forgetting(engine, store)
            try:
                if inspect.iscoroutinefunction(engine.forget):
                    await forget(session_id)  # type: ignore[misc]
                else:
                    # Deleting index files is blocking I/O: keep it off the event loop.
                    await asyncio.to_thread(forget, session_id)
            except Exception as exc:  # every other session still gets its vectors deleted
                failures.append((session_id, engine, exc))
    if failures:
        raise _vector_failure(failures, len(session_ids)) from failures[0][2]


async def _call(store: Any, method: str, *args: Any) -> Any:
    """Call a store method from async code: awaited on an asyncio store, in a thread otherwise."""
    function: Callable[..., Any] = getattr(store, method)
    if is_async_store(store):
        result: Awaitable[Any] = function(*args)
        return await result
    return await asyncio.to_thread(function, *args)


# -- the public functions ----------------------------------------------------------------


def forget_session(store: Store, session_id: str, *, recall: RecallEngines = None) -> None:
    """Delete one session: its log, summary, facts and, given `recall`, its vectors.

    Forgetting a session that does not exist does nothing, so a failed call can
    simply be repeated. A writer that keeps appending to the session afterwards
    starts a new, empty one: stop writers before forgetting.

    Raises `InvalidSessionIdError` for an unusable id, `ConfigError` for a wrong
    `store` or `recall` (before anything is deleted), and `StoreError` when the
    store fails or when vectors could not be deleted (the message says which).

    Example::

        store = SQLiteStore("chat.db")
        forget_session(store, "session-1", recall=recall)
    """
    session_id = validate_id(session_id, "session_id")
    engines = _engines(recall)
    _check_store(store, asynchronous=False)
    _check_sync_engines(engines)
    store.clear(session_id)
    _forget_vectors(engines, [session_id], store)


def forget_user(store: Store, user_id: str, *, recall: RecallEngines = None) -> list[str]:
    """Delete every session of `user_id` (logs, summaries, facts, vectors); return their ids, sorted.

    A session belongs to the user it was first written with
    (``ConversationMemory(..., user_id=...)``); sessions written without a user
    id are not found here, forget them with `forget_session`. An unknown user
    deletes nothing and returns ``[]``.
    """
    user_id = validate_id(user_id, "user_id")
    engines = _engines(recall)
    _check_store(store, asynchronous=False)
    _check_sync_engines(engines)
    deleted = store.forget_user(user_id)
    _forget_vectors(engines, deleted, store)
    return deleted


def expire_idle(store: Store, older_than_seconds: float, *, recall: RecallEngines = None) -> list[str]:
    """Delete every session with no write for more than `older_than_seconds`; return their ids, sorted.

    A write is an append, a status change or a summary/facts update. Run it
    periodically (e.g. daily) to keep conversations for a bounded time. With
    ``RedisStore(ttl_seconds=...)`` Redis expires sessions by itself; those are
    not returned, so vectors of TTL-expired sessions must be swept by the
    recall engine's own means.
    """
    _check_age(older_than_seconds)
    engines = _engines(recall)
    _check_store(store, asynchronous=False)
    _check_sync_engines(engines)
    deleted = store.expire_idle(older_than_seconds)
    _forget_vectors(engines, deleted, store)
    return deleted


async def aforget_session(
    store: Store | AsyncStore, session_id: str, *, recall: RecallEngines = None
) -> None:
    """Async `forget_session`; `store` may be an `AsyncRedisStore`, an `AsyncPostgresStore` or any sync store."""
    session_id = validate_id(session_id, "session_id")
    engines = _engines(recall)
    _check_store(store, asynchronous=True)
    await _call(store, "clear", session_id)
    await _aforget_vectors(engines, [session_id], store)


async def aforget_user(store: Store | AsyncStore, user_id: str, *, recall: RecallEngines = None) -> list[str]:
    """Async `forget_user`; `store` may be an `AsyncRedisStore`, an `AsyncPostgresStore` or any sync store."""
    user_id = validate_id(user_id, "user_id")
    engines = _engines(recall)
    _check_store(store, asynchronous=True)
    deleted: list[str] = await _call(store, "forget_user", user_id)
    await _aforget_vectors(engines, deleted, store)
    return deleted


async def aexpire_idle(
    store: Store | AsyncStore, older_than_seconds: float, *, recall: RecallEngines = None
) -> list[str]:
    """Async `expire_idle`; `store` may be an `AsyncRedisStore`, an `AsyncPostgresStore` or any sync store."""
    _check_age(older_than_seconds)
    engines = _engines(recall)
    _check_store(store, asynchronous=True)
    deleted: list[str] = await _call(store, "expire_idle", older_than_seconds)
    await _aforget_vectors(engines, deleted, store)
    return deleted
