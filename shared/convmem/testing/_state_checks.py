"""The contract every store keeps: state records with compare-and-set, and no state written
back to a session that is gone."""

from __future__ import annotations

from .._stores.base import Store
from ._data import (
    assistant,
    fill,
    user,
)
from ._registry import check


@check()
def put_state_with_expected_version_zero_creates_only_once(store: Store) -> None:
    first = store.put_state("s", "summary", "v1", expected_version=0)
    assert first is not None and first.version == 1
    assert store.put_state("s", "summary", "other", expected_version=0) is None
    record = store.get_state("s", "summary")
    assert record is not None and (record.value, record.version) == ("v1", 1)


@check()
def put_state_with_a_stale_version_is_refused(store: Store) -> None:
    store.put_state("s", "summary", "v1")
    store.put_state("s", "summary", "v2", expected_version=1)
    assert store.put_state("s", "summary", "late", expected_version=1) is None
    record = store.get_state("s", "summary")
    assert record is not None and (record.value, record.version) == ("v2", 2)


@check()
def put_state_without_a_version_overwrites(store: Store) -> None:
    store.put_state("s", "facts", "{}")
    record = store.put_state("s", "facts", '{"city": "Oslo"}')
    assert record is not None and record.version == 2
    assert store.get_state("s", "facts") == record


@check()
def missing_state_is_none(store: Store) -> None:
    assert store.get_state("s", "summary") is None


@check()
def delete_state_removes_only_that_key(store: Store) -> None:
    store.put_state("s", "summary", "x")
    store.put_state("s", "facts", "y")
    store.delete_state("s", "summary")
    store.delete_state("s", "never-written")
    assert store.get_state("s", "summary") is None
    facts = store.get_state("s", "facts")
    assert facts is not None and facts.value == "y"


@check()
def state_keys_that_look_like_separators_do_not_collide(store: Store) -> None:
    keys = ["a", "v:a", "n:a", ":a", "a:", "*", "v:"]
    for key in keys:
        store.put_state("s", key, f"value of {key}")
    for key in keys:
        record = store.get_state("s", key)
        assert record is not None and (record.value, record.version) == (f"value of {key}", 1)


@check()
def state_is_per_session(store: Store) -> None:
    store.put_state("s1", "summary", "one")
    assert store.get_state("s2", "summary") is None


@check()
def state_values_keep_unicode_and_json_text(store: Store) -> None:
    value = '{"name": "多多", "quote": "\\"x\\"", "emoji": "🐶"}'
    store.put_state("s", "facts", value)
    record = store.get_state("s", "facts")
    assert record is not None and record.value == value


@check()
def put_state_requiring_a_seq_is_written_once_the_session_has_reached_it(store: Store) -> None:
    fill(store, "s", 3)
    record = store.put_state("s", "summary", "through 3", expected_version=0, requires_seq=3)
    assert record is not None and record.version == 1
    assert store.put_state("s", "summary", "through 1", requires_seq=1) is not None
    stored = store.get_state("s", "summary")
    assert stored is not None and (stored.value, stored.version) == ("through 1", 2)


@check()
def put_state_requiring_a_seq_beyond_the_last_one_is_refused(store: Store) -> None:
    fill(store, "s", 2)
    assert store.put_state("s", "summary", "through 3", requires_seq=3) is None
    assert store.get_state("s", "summary") is None


@check()
def put_state_requiring_a_seq_is_refused_for_a_session_that_does_not_exist(store: Store) -> None:
    assert store.put_state("nobody", "summary", "x", expected_version=0, requires_seq=0) is None
    assert store.put_state("nobody", "facts", "x", requires_seq=1) is None
    assert store.get_state("nobody", "summary") is None and store.get_state("nobody", "facts") is None
    assert store.sessions() == []


@check()
def state_planned_before_a_clear_is_not_written_back_after_it(store: Store) -> None:
    store.append("s", [user("my secret"), assistant("noted")], user_id="ana")
    planned = store.get_state("s", "summary")  # a summarizer plans from version 0 up to seq 2
    store.clear("s")
    late = store.put_state(
        "s", "summary", "my secret", expected_version=planned.version if planned else 0, requires_seq=2
    )
    assert late is None
    assert store.get_state("s", "summary") is None
    assert store.sessions() == [] and store.sessions(user_id="ana") == []
    assert store.stats("s").message_count == 0


@check()
def state_planned_before_forget_user_is_not_written_back_after_it(store: Store) -> None:
    fill(store, "s", 2)
    store.append("s", [user("mine")], user_id="ana")
    store.put_state("s", "facts", "v1", requires_seq=3)
    store.forget_user("ana")
    assert store.put_state("s", "facts", "v2", expected_version=1, requires_seq=3) is None
    assert store.put_state("s", "facts", "v2", expected_version=0, requires_seq=3) is None
    assert store.get_state("s", "facts") is None
    assert store.sessions() == []


@check()
def put_state_requiring_a_seq_still_checks_the_version(store: Store) -> None:
    fill(store, "s", 2)
    store.put_state("s", "summary", "v1")
    assert store.put_state("s", "summary", "stale", expected_version=0, requires_seq=2) is None
    record = store.get_state("s", "summary")
    assert record is not None and record.value == "v1"


@check()
def a_state_only_session_has_reached_seq_zero_only(store: Store) -> None:
    store.put_state("s", "summary", "x")
    assert store.put_state("s", "summary", "y", requires_seq=0) is not None
    assert store.put_state("s", "summary", "z", requires_seq=1) is None
    record = store.get_state("s", "summary")
    assert record is not None and record.value == "y"
