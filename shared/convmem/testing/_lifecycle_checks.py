"""The contract every store keeps: listing, clearing, forgetting users, expiring idle sessions,
hostile ids and texts, and data seen again by a store opened later."""

from __future__ import annotations

import dataclasses
import time

from .._errors import ConfigError, InvalidSessionIdError
from .._models import Message
from .._stores.base import Store
from ._data import (
    HOSTILE_IDS,
    SQL_LOOKING_TEXTS,
    UNUSABLE_IDS,
    assistant,
    fill,
    seqs,
    texts,
    user,
)
from ._registry import OpenStore, check, raises


@check()
def clear_removes_log_state_and_listing(store: Store) -> None:
    store.append("s", [user("a")], user_id="ana")
    store.put_state("s", "summary", "x")
    store.clear("s")
    assert store.messages("s") == []
    assert store.get_state("s", "summary") is None
    assert store.stats("s").message_count == 0
    assert store.sessions() == []
    assert store.sessions(user_id="ana") == []


@check()
def clear_leaves_other_sessions_alone(store: Store) -> None:
    fill(store, "s1", 2)
    fill(store, "s2", 3)
    store.clear("s1")
    assert seqs(store.messages("s2")) == [1, 2, 3]


@check()
def a_cleared_session_starts_again_at_seq_one(store: Store) -> None:
    fill(store, "s", 3)
    store.clear("s")
    assert seqs(store.append("s", [user("again")])) == [1]


@check()
def sessions_lists_all_or_one_users_sessions(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    store.append("s2", [user("b")], user_id="bob")
    store.append("s3", [user("c")], user_id="ana")
    store.append("s4", [user("d")])
    assert store.sessions() == ["s1", "s2", "s3", "s4"]
    assert store.sessions(user_id="ana") == ["s1", "s3"]
    assert store.sessions(user_id="nobody") == []


@check()
def a_state_only_session_is_listed(store: Store) -> None:
    store.put_state("s", "summary", "x")
    assert store.sessions() == ["s"]


@check()
def forget_user_deletes_that_users_sessions_and_returns_their_ids(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    store.put_state("s1", "facts", '{"dog": "Duoduo"}')
    store.append("s2", [user("b")], user_id="bob")
    store.append("s3", [user("c")], user_id="ana")
    assert store.forget_user("ana") == ["s1", "s3"]
    assert store.messages("s1") == [] and store.messages("s3") == []
    assert store.get_state("s1", "facts") is None
    assert store.sessions() == ["s2"]
    assert store.sessions(user_id="ana") == []
    assert texts(store.messages("s2")) == ["b"]


@check()
def forget_user_of_an_unknown_user_deletes_nothing(store: Store) -> None:
    store.append("s1", [user("a")], user_id="ana")
    assert store.forget_user("nobody") == []
    assert store.sessions() == ["s1"]


@check()
def forget_user_does_not_touch_similar_user_ids(store: Store) -> None:
    similar = ["a", "a*", "a?", "a:b", "a:b:sessions", "*", "a%2A"]
    for user_id in similar:
        store.append(f"session of {user_id}", [user("hello")], user_id=user_id)
    assert store.forget_user("a") == ["session of a"]
    assert store.forget_user("*") == ["session of *"]
    assert store.sessions() == sorted(f"session of {u}" for u in similar if u not in ("a", "*"))


@check()
def a_session_forgotten_with_its_user_can_be_used_again(store: Store) -> None:
    store.append("s", [user("old")], user_id="ana")
    store.forget_user("ana")
    store.append("s", [user("new")], user_id="ana")
    assert texts(store.messages("s")) == ["new"]
    assert store.sessions(user_id="ana") == ["s"]


@check()
def expire_idle_deletes_only_sessions_idle_longer_than_the_age(store: Store) -> None:
    store.append("old", [user("a")], user_id="ana")
    store.put_state("old", "summary", "x")
    time.sleep(0.3)
    boundary = time.time()
    time.sleep(0.3)
    store.append("fresh", [user("b")])
    assert store.expire_idle(time.time() - boundary) == ["old"]
    assert store.sessions() == ["fresh"]
    assert store.messages("old") == [] and store.get_state("old", "summary") is None
    assert store.sessions(user_id="ana") == []


@check()
def a_state_write_counts_as_activity(store: Store) -> None:
    store.append("s", [user("a")])
    time.sleep(0.3)
    boundary = time.time()
    time.sleep(0.3)
    store.put_state("s", "summary", "x")
    assert store.expire_idle(time.time() - boundary) == []
    assert store.sessions() == ["s"]


@check()
def expire_idle_with_an_age_longer_than_any_session_deletes_nothing(store: Store) -> None:
    fill(store, "s", 2)
    assert store.expire_idle(3600) == []
    assert store.expire_idle(float("inf")) == []
    assert seqs(store.messages("s")) == [1, 2]


@check(cases=[-1, float("nan"), "10"])
def expire_idle_rejects_an_invalid_age(store: Store, age: object) -> None:
    with raises(ConfigError, match="older_than_seconds"):
        store.expire_idle(age)  # type: ignore[arg-type]


@check()
def hostile_session_ids_never_share_data(store: Store) -> None:
    for index, session_id in enumerate(HOSTILE_IDS):
        store.append(session_id, [user(f"message {index}")], user_id=session_id)
        store.put_state(session_id, "summary", f"summary {index}")
    for index, session_id in enumerate(HOSTILE_IDS):
        assert texts(store.messages(session_id)) == [f"message {index}"]
        assert texts(store.tail(session_id, 10)) == [f"message {index}"]
        record = store.get_state(session_id, "summary")
        assert record is not None and record.value == f"summary {index}"
        assert store.stats(session_id).message_count == 1
        assert store.sessions(user_id=session_id) == [session_id]
    assert store.sessions() == sorted(HOSTILE_IDS)


@check(cases=UNUSABLE_IDS, ids=["nul", "10k-chars"])
def an_unusable_id_is_kept_apart_or_refused_with_invalid_session_id_error(
    store: Store, unusable: str
) -> None:
    store.append("a", [user("the plain one")])
    try:
        store.append(unusable, [user("the unusable one")], user_id=unusable)
    except InvalidSessionIdError as exc:
        assert "session_id" in str(exc)
        assert store.sessions() == ["a"]
    else:
        assert texts(store.messages(unusable)) == ["the unusable one"]
        assert store.sessions(user_id=unusable) == [unusable]
        store.clear(unusable)
    assert texts(store.messages("a")) == ["the plain one"]


@check()
def sql_and_format_looking_text_is_stored_and_read_back_exactly(store: Store) -> None:
    originals = [
        Message.create("user", text, name=f"n{i}{text[:8]}", metadata={text: text})
        for i, text in enumerate(SQL_LOOKING_TEXTS)
    ]
    store.append(SQL_LOOKING_TEXTS[0], originals, user_id=SQL_LOOKING_TEXTS[1])
    for key in SQL_LOOKING_TEXTS:
        store.put_state(SQL_LOOKING_TEXTS[0], key, key)
    back = store.messages(SQL_LOOKING_TEXTS[0])
    assert [dataclasses.replace(m, seq=None) for m in back] == originals
    for key in SQL_LOOKING_TEXTS:
        record = store.get_state(SQL_LOOKING_TEXTS[0], key)
        assert record is not None and record.value == key
    assert store.sessions(user_id=SQL_LOOKING_TEXTS[1]) == [SQL_LOOKING_TEXTS[0]]
    assert store.forget_user(SQL_LOOKING_TEXTS[1]) == [SQL_LOOKING_TEXTS[0]]
    assert store.sessions() == []


@check()
def clearing_a_hostile_id_leaves_lookalikes_alone(store: Store) -> None:
    for session_id in HOSTILE_IDS:
        store.append(session_id, [user(f"in {session_id}")])
    doomed = ("a", "*", "a:b", "{a}", "'", "%s")
    for session_id in doomed:
        store.clear(session_id)
    survivors = [s for s in HOSTILE_IDS if s not in doomed]
    assert store.sessions() == sorted(survivors)
    for session_id in survivors:
        assert texts(store.messages(session_id)) == [f"in {session_id}"]


@check(reopens=True)
def a_reopened_store_sees_every_session(open_store: OpenStore) -> None:
    first = open_store()
    try:
        first.append("s1", [user("a", tokens=3), assistant("b", tokens=4)], user_id="ana")
        first.put_state("s1", "summary", "so far")
        first.append("s2", [user("c")])
    finally:
        first.close()
    second = open_store()
    try:
        assert texts(second.messages("s1")) == ["a", "b"]
        assert second.stats("s1").total_tokens == 7
        assert second.sessions(user_id="ana") == ["s1"]
        record = second.get_state("s1", "summary")
        assert record is not None and record.value == "so far"
        assert seqs(second.append("s2", [user("d")])) == [2]
    finally:
        second.close()
