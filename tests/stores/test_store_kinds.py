"""Sync and async stores are told apart by one declared protocol each (`Store`, `AsyncStore`),
and a memory refuses an async store when it is made, naming the store to use instead."""

from __future__ import annotations

from pathlib import Path

import pytest

import convmem.integration
from convmem import (
    AsyncPostgresStore,
    AsyncRedisStore,
    AsyncStore,
    ConfigError,
    ConversationMemory,
    InMemoryStore,
    PostgresStore,
    RedisStore,
    SessionRegistry,
    SQLiteStore,
    Store,
)
from convmem._stores.base import is_async_store, is_store
from convmem.integration import memory_from_options

REDIS_URL = "redis://:s3cret@127.0.0.1:1/0"
POSTGRES_URL = "postgresql://app:s3cret@127.0.0.1:1/chat"


@pytest.mark.parametrize("store_class", [AsyncRedisStore, AsyncPostgresStore])
def test_an_async_store_is_an_async_store_and_not_a_store(store_class: type) -> None:
    store = store_class(REDIS_URL if store_class is AsyncRedisStore else POSTGRES_URL)
    assert is_async_store(store) and not is_store(store)
    assert isinstance(store, AsyncStore)


def test_a_sync_store_is_a_store_and_not_an_async_store(tmp_path: Path) -> None:
    sqlite = SQLiteStore(tmp_path / "m.db")
    for store in (InMemoryStore(), sqlite, RedisStore(REDIS_URL)):
        assert is_store(store) and not is_async_store(store)
        assert isinstance(store, Store)
    sqlite.close()


def test_an_object_with_only_some_coroutine_methods_is_neither() -> None:
    class Mixed(InMemoryStore):
        async def clear(self, session_id: str) -> None:  # type: ignore[override]
            super().clear(session_id)

    assert not is_store(Mixed()) and not is_async_store(Mixed())


@pytest.mark.parametrize(
    ("store_class", "url", "sync_name"),
    [(AsyncRedisStore, REDIS_URL, "RedisStore"), (AsyncPostgresStore, POSTGRES_URL, "PostgresStore")],
)
def test_a_memory_refuses_an_async_store_when_it_is_made_and_names_the_sync_one(
    store_class: type, url: str, sync_name: str
) -> None:
    with pytest.raises(
        ConfigError, match=rf"ConversationMemory needs a sync store.*{store_class.__name__}"
    ) as refused:
        ConversationMemory("x", store_class(url))
    assert f"Pass {sync_name}(...) with the same arguments" in str(refused.value)
    assert "aforget_session" in str(refused.value)


@pytest.mark.parametrize("store_class", [AsyncRedisStore, AsyncPostgresStore])
def test_a_registry_and_memory_from_options_refuse_an_async_store(store_class: type) -> None:
    store = store_class(REDIS_URL if store_class is AsyncRedisStore else POSTGRES_URL)
    with pytest.raises(ConfigError, match="needs a sync store"):
        SessionRegistry(store=store)
    with pytest.raises(ConfigError, match="needs a sync store"):
        memory_from_options(None, "s", store=store)


def test_the_capabilities_are_offered_to_store_authors() -> None:
    names = [
        "ReadsSession",
        "ReadsStates",
        "ReadsLogs",
        "ListsUserSessions",
        "ReadsUserScope",
        "HostsHistoryIndex",
        "HostsVectors",
        "HasFileLocation",
    ]
    assert [name for name in names if name not in convmem.integration.__all__] == []


@pytest.mark.parametrize(
    ("store_class", "declared"),
    [
        (InMemoryStore, {"ReadsStates", "ListsUserSessions"}),
        (
            SQLiteStore,
            {"ReadsStates", "ReadsLogs", "ListsUserSessions", "HostsHistoryIndex", "HasFileLocation"},
        ),
        (RedisStore, {"ReadsSession", "ReadsStates", "ReadsLogs", "ListsUserSessions", "ReadsUserScope"}),
        (
            PostgresStore,
            {
                "ReadsSession",
                "ReadsStates",
                "ReadsLogs",
                "ListsUserSessions",
                "ReadsUserScope",
                "HostsHistoryIndex",
                "HostsVectors",
            },
        ),
        (AsyncRedisStore, {"AsyncReadsSession"}),
        (AsyncPostgresStore, {"AsyncReadsSession"}),
    ],
)
def test_each_store_declares_its_capabilities_among_its_bases(store_class: type, declared: set[str]) -> None:
    capabilities = {
        name
        for name in convmem.integration.__all__
        if name.startswith(("Reads", "Lists", "Hosts", "Has", "Async"))
    }
    assert {base.__name__ for base in store_class.__mro__} & capabilities == declared


@pytest.mark.parametrize("not_a_store", ["memory.db", 3, object(), {"url": "redis://"}])
def test_a_memory_refuses_what_is_not_a_store_and_says_what_is_allowed(not_a_store: object) -> None:
    with pytest.raises(
        ConfigError, match=r"ConversationMemory needs store= to be a convmem Store"
    ) as refused:
        ConversationMemory("x", not_a_store)  # type: ignore[arg-type]
    assert type(not_a_store).__name__ in str(refused.value) and "SQLiteStore" in str(refused.value)


def test_a_store_missing_a_method_is_refused_with_the_methods_it_lacks() -> None:
    class Half:
        def append(self, session_id: str, message: object) -> int:
            return 0

    with pytest.raises(ConfigError, match=r"it lacks .*messages"):
        ConversationMemory("x", Half())  # type: ignore[arg-type]


class _Delegating:
    """A wrapper that forwards every attribute to the store it wraps."""

    def __init__(self, store: object) -> None:
        self._store = store

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)


def test_what_a_store_offers_is_what_isinstance_says_each_time_for_a_wrapper(tmp_path: Path) -> None:
    from convmem._stores.capabilities import offers
    from convmem.integration import HostsHistoryIndex, ListsUserSessions, ReadsUserScope

    sqlite, in_memory = SQLiteStore(tmp_path / "m.db"), InMemoryStore()
    for _ in range(2):  # the second answers are the remembered ones
        assert offers(sqlite, ListsUserSessions) and offers(sqlite, HostsHistoryIndex)
        assert not offers(sqlite, ReadsUserScope) and not offers(in_memory, HostsHistoryIndex)
    # A wrapper's class has none of the methods; what it offers is its store's, asked each time.
    wrapper = _Delegating(sqlite)
    assert offers(wrapper, HostsHistoryIndex) and offers(wrapper, ListsUserSessions)
    wrapper._store = in_memory
    assert not offers(wrapper, HostsHistoryIndex) and offers(wrapper, ListsUserSessions)
    sqlite.close()
