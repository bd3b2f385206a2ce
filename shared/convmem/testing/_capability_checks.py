"""The contract of each capability a store may declare (`convmem._stores.capabilities`)."""

from __future__ import annotations

from pathlib import Path

from .._stores.base import Store
from .._stores.capabilities import (
    HasFileLocation,
    HostsHistoryIndex,
    HostsVectors,
    ListsUserSessions,
    ReadsLogs,
    ReadsSession,
    ReadsStates,
    ReadsUserScope,
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


# -- ReadsLogs ---------------------------------------------------------------------------------


@check(capability=ReadsLogs)
def many_logs_read_at_once_are_what_each_sessions_reads_give(store: Store) -> None:
    assert isinstance(store, ReadsLogs)
    ids = HOSTILE_IDS[::3]
    for number, session_id in enumerate(ids):
        store.append(
            session_id, [user(f"m{number}-{n}", n + 1) for n in range(number % 4 + 1)], user_id="ana"
        )
    store.delete_messages(ids[-1], [2])  # a hole in a log
    store.put_state(ids[0], "summary", "not a message")
    found = store.read_logs([*ids, "never-written", ids[0]])
    assert list(found) == [*ids, "never-written"]
    for session_id, read in found.items():
        assert read.stats == read.stats_after == store.stats(session_id)
        assert read.messages == store.messages(session_id)
    assert [m.seq for m in found[ids[-1]].messages] == [1, 3, 4]
    assert (found["never-written"].messages, found["never-written"].stats.last_seq) == ([], 0)
    assert store.read_logs([]) == {}


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


# -- ReadsUserScope ------------------------------------------------------------------------------


@check(capability=ReadsUserScope)
def a_users_scope_read_whole_is_the_session_the_users_sessions_and_their_records(store: Store) -> None:
    assert isinstance(store, ReadsUserScope)
    store.append("s2", [user("a", 2), assistant("b", 3)], user_id="ana")
    store.append("s1", [user("c")], user_id="ana")
    store.append("s3", [user("d")], user_id="bob")
    store.put_state("s2", "facts", '{"name": "Ana"}')
    store.put_state("s3", "facts", '{"name": "Bob"}')
    store.put_state("new", "summary", "not yet owned")
    store.put_state("new", "facts", '{"city": "Lyon"}')
    scope = store.read_user_scope("new", ["summary"], "ana", "facts")
    assert scope.stats == store.stats("new")
    assert scope.states == {"summary": store.get_state("new", "summary")}
    assert scope.user_sessions == [store.stats("s1"), store.stats("s2")]
    assert scope.user_states == {"new": store.get_state("new", "facts"), "s2": store.get_state("s2", "facts")}
    owned = store.read_user_scope("s2", ["summary", "facts"], "ana", "facts")
    assert owned.stats == store.stats("s2")
    assert owned.states == {"facts": store.get_state("s2", "facts")}
    assert owned.user_states == {"s2": store.get_state("s2", "facts")}
    store.forget_user("ana")
    gone = store.read_user_scope("new", [], "ana", "facts")
    assert (gone.states, gone.user_sessions) == ({}, [])


# -- HostsHistoryIndex ------------------------------------------------------------------------------


def _batch(store: Store, session_id: str, *, reset: bool = True, after: object = None) -> object:
    from .._recall.config import RecallConfig
    from .._recall.index_rows import IndexCursor, derive

    stats = store.stats(session_id)
    cursor = after if isinstance(after, IndexCursor) else IndexCursor()
    return derive(
        cursor,
        store.messages(session_id, after_seq=cursor.seq),
        RecallConfig(),
        session_id=session_id,
        generation=stats.generation,
        reset=reset,
    )


@check(capability=HostsHistoryIndex)
def a_users_history_is_written_once_and_read_by_terms_and_keys(store: Store) -> None:
    from .._recall.index_rows import KEY_SHIFT, IndexBatch, owner_key

    assert isinstance(store, HostsHistoryIndex)
    tables = store.history_tables()
    if tables is None:
        return
    store.append("s1", [user("My corgi is called Duoduo."), assistant("A fine corgi name.")], user_id="ana")
    store.append("s2", [user("I cycle to work every day.")], user_id="ana")
    owner = owner_key("ana", "s1")
    for session_id in ("s1", "s2"):
        batch = _batch(store, session_id)
        assert isinstance(batch, IndexBatch)
        assert tables.write(owner, batch, None)
        assert not tables.write(owner, batch, None)  # the session has a row now: written once
    history = tables.indexed(owner)
    assert history.number is not None and set(history.sessions) == {"s1", "s2"}
    row = tables.indexed_session("s1")
    assert row is not None and row.owner == owner and row.generation == store.stats("s1").generation
    found = tables.postings(history.number, ["corgi", "cycl"])
    terms = {(int(kind), str(term)) for kind, term, _, _, _ in found}
    assert terms == {(0, "corgi"), (1, "corgi"), (0, "cycl"), (1, "cycl")}
    corgi = [r for r in found if r[0] == 0 and r[1] == "corgi"]
    assert [int(r[3]) for r in corgi] == [1] * len(corgi)
    s1 = history.sessions["s1"].slot
    units = tables.units(history.number, [], [s1 << KEY_SHIFT | 1])  # the exchange opening at seq 1
    assert sorted(int(u[0]) & ((1 << KEY_SHIFT) - 1) for u in units) == [1, 2]
    messages = tables.messages(history.number, [s1 << KEY_SHIFT | 2])
    assert [m.text for m in messages.values()] == ["A fine corgi name."]


@check(capability=HostsHistoryIndex)
def a_history_write_checks_the_log_generation_and_edits_reset_the_rows(store: Store) -> None:
    from .._recall.index_rows import owner_key

    assert isinstance(store, HostsHistoryIndex)
    tables = store.history_tables()
    if tables is None:
        return
    store.append("s", [user("The code is 4111 2222."), user("Second line.")], user_id="bo")
    owner = owner_key("bo", "s")
    stale = _batch(store, "s")
    store.delete_messages("s", [1])  # a new generation: what was read before must not land
    assert not tables.write(owner, stale, None)  # type: ignore[arg-type]
    assert tables.write(owner, _batch(store, "s"), None)  # type: ignore[arg-type]
    history = tables.indexed(owner)
    assert history.number is not None
    assert not [r for r in tables.postings(history.number, ["4111"])]
    store.replace_message("s", 2, user("Replaced."))
    row = tables.indexed_session("s")
    assert row is not None and row.cursor == ""  # reset in the edit's own transaction
    assert not tables.postings(history.number, ["second"])
    store.forget_user("bo")
    assert tables.indexed(owner).sessions == {}
    assert tables.indexed_session("s") is None


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
