"""The contract of each capability a store may declare (`convmem._stores.capabilities`)."""

from __future__ import annotations

from pathlib import Path

from .._stores.base import Store
from .._stores.capabilities import (
    HasFileLocation,
    HostsLexicalIndex,
    HostsVectors,
    ListsUserSessions,
    ReadsSession,
    ReadsStates,
    read_session,
)
from ._data import HOSTILE_IDS, assistant, user
from ._registry import OpenStore, check

# -- ReadsSession: the helper asks the store's own read_session ----------------------------


@check(capability=ReadsSession)
def a_session_read_whole_is_its_stats_and_the_records_it_has(store: Store) -> None:
    store.append("s", [user("a", 3), assistant("b", 4)], user_id="ana")
    store.put_state("s", "summary", "we met")
    store.put_state("s", "facts", '{"name": "多多"}')
    store.put_state("s", "facts", '{"name": "Rex"}')
    store.put_state("other", "missing", "not this session's")
    snapshot = read_session(store, "s", ["summary", "facts", "missing"])
    assert snapshot.stats == store.stats("s")
    assert (snapshot.stats.message_count, snapshot.stats.total_tokens, snapshot.stats.user_id) == (
        2,
        7,
        "ana",
    )
    assert snapshot.states == {
        "summary": store.get_state("s", "summary"),
        "facts": store.get_state("s", "facts"),
    }
    assert snapshot.states["facts"].version == 2
    assert read_session(store, "s", []).states == {}


@check(capability=ReadsSession)
def a_session_never_written_reads_as_empty(store: Store) -> None:
    snapshot = read_session(store, "nobody", ["summary", "facts"])
    assert snapshot.stats == store.stats("nobody")
    assert (snapshot.stats.message_count, snapshot.stats.last_seq) == (0, 0)
    assert snapshot.states == {}


@check(capability=ReadsSession)
def a_session_read_whole_keeps_hostile_ids_and_keys_apart(store: Store) -> None:
    ids = HOSTILE_IDS[::3]
    keys = ["a", "v:a", "n:a", ":a", "*", "summary"]
    for number, session_id in enumerate(ids):
        store.append(session_id, [user(f"m{number}")] * (number % 3 + 1))
        for key in keys[: number % len(keys) + 1]:
            store.put_state(session_id, key, f"{key} of {session_id}")
    for number, session_id in enumerate(ids):
        snapshot = read_session(store, session_id, keys)
        assert snapshot.stats == store.stats(session_id)
        assert snapshot.stats.message_count == number % 3 + 1
        assert snapshot.states == {
            key: record for key in keys if (record := store.get_state(session_id, key)) is not None
        }
        assert all(record.value.endswith(f" of {session_id}") for record in snapshot.states.values())


@check(capability=ReadsSession)
def a_session_read_whole_by_the_store_is_what_its_reads_give(store: Store) -> None:
    assert isinstance(store, ReadsSession)
    store.append("s", [user("a", 3)], user_id="ana")
    store.put_state("s", "summary", "we met")
    snapshot = store.read_session("s", ["summary", "summary", "facts"])
    assert snapshot.stats == store.stats("s")
    assert snapshot.states == {"summary": store.get_state("s", "summary")}


# -- ReadsStates -----------------------------------------------------------------------------


@check(capability=ReadsStates)
def one_state_of_many_sessions_is_what_each_session_holds(store: Store) -> None:
    assert isinstance(store, ReadsStates)
    ids = HOSTILE_IDS[::4]
    for number, session_id in enumerate(ids):
        if number % 2 == 0:
            store.put_state(session_id, "facts", f"facts of {session_id}")
        store.put_state(session_id, "summary", f"summary of {session_id}")
    found = store.get_states([*ids, "never-written", ids[0]], "facts")
    assert found == {s: r for s in ids if (r := store.get_state(s, "facts")) is not None}
    assert len(found) == len(ids[::2])
    assert store.get_states([], "facts") == {}


# -- ListsUserSessions ---------------------------------------------------------------------------


@check(capability=ListsUserSessions)
def a_users_sessions_come_with_their_stats_sorted_by_id(store: Store) -> None:
    assert isinstance(store, ListsUserSessions)
    store.append("s2", [user("a", 2), assistant("b", 3)], user_id="ana")
    store.append("s1", [user("c")], user_id="ana")
    store.append("s3", [user("d")], user_id="bob")
    store.append("s4", [user("e")])
    listed = store.user_session_stats("ana")
    assert listed == [store.stats("s1"), store.stats("s2")]
    assert store.user_session_stats("nobody") == []
    store.forget_user("ana")
    assert store.user_session_stats("ana") == []


# -- HostsLexicalIndex ------------------------------------------------------------------------------


@check(capability=HostsLexicalIndex)
def the_keyword_indexes_of_a_session_are_none_or_a_pair(store: Store) -> None:
    assert isinstance(store, HostsLexicalIndex)
    indexes = store.lexical_indexes("s")
    assert indexes is None or len(indexes) == 2
    for index in indexes or ():
        assert all(callable(getattr(index, method, None)) for method in ("add", "remove", "clear", "scores"))


# -- HostsVectors --------------------------------------------------------------------------------------


@check(capability=HostsVectors)
def a_vector_index_factory_makes_vector_indexes(store: Store) -> None:
    from .._recall.index_scope import IndexScope, store_namespace
    from .._recall.vector_index import VectorIndex

    assert isinstance(store, HostsVectors)
    store.append("s", [user("a")])
    factory = store.vector_index_factory("contract-model")
    generation = store.stats("s").generation
    scope = IndexScope(
        namespace=store_namespace(store),
        session_id="s",
        user_id=None,
        generation=generation,
        dimension=4,
        store=store,
    )
    assert isinstance(factory(scope), VectorIndex)


# -- HasFileLocation --------------------------------------------------------------------------------------


@check(capability=HasFileLocation, reopens=True)
def every_store_on_the_same_data_puts_vector_files_in_one_folder(open_store: OpenStore) -> None:
    first, second = open_store(), open_store()
    try:
        assert isinstance(first, HasFileLocation) and isinstance(second, HasFileLocation)
        assert isinstance(first.vector_index_dir(), Path)
        assert first.vector_index_dir() == second.vector_index_dir()
    finally:
        first.close()
        second.close()
