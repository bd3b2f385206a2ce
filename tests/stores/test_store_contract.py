"""The store contract (`convmem.testing`), run against every store: in-memory, SQLite (a real
file), Redis (a real server and a real 3-master Cluster), PostgreSQL (a real server), and the
async stores on those servers, through `convmem.testing.blocking`."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pytest
from shared_stores import STORE_KINDS, STORE_TYPES, location_for

from convmem import InMemoryStore, Message, SQLiteStore, StoreError
from convmem.testing import StoreCheck, check_store, store_checks
from convmem.testing._data import fill, texts


def contract() -> list[object]:
    """(kind, check) for every kind of store and every check that applies to it."""
    cases: list[object] = []
    for kind in STORE_KINDS:
        name, marks = (kind, ()) if isinstance(kind, str) else (kind.values[0], kind.marks)
        for check in store_checks(STORE_TYPES[str(name)], persistent=name != "memory"):
            cases.append(pytest.param(name, check, id=f"{name}-{check.name}", marks=marks))
    return cases


@pytest.mark.parametrize(("kind", "check"), contract())
def test_store_contract(kind: str, check: StoreCheck, request: pytest.FixtureRequest) -> None:
    location = location_for(kind, request)
    try:
        check.run(location.open)
    finally:
        location.cleanup()


# -- damage: written by hand into each backend's own layout --------------------------------------

PERSISTENT_KINDS = [kind for kind in STORE_KINDS if kind != "memory"]


@pytest.mark.parametrize("damage", ["{broken", "null", ""])
@pytest.mark.parametrize("kind", PERSISTENT_KINDS)
def test_a_malformed_stored_record_raises_store_error_and_spares_other_sessions(
    kind: str, damage: str, request: pytest.FixtureRequest
) -> None:
    location = location_for(kind, request)
    store = location.open()
    try:
        fill(store, "bad", 3)
        fill(store, "good", 3)
        location.corrupt("bad", 2, damage)
        with pytest.raises(StoreError, match=r"seq=2 of session 'bad' is malformed"):
            store.messages("bad")
        with pytest.raises(StoreError, match="seq=2"):
            store.get("bad", [2])
        assert texts(store.tail("bad", 1)) == ["m3"]
        assert texts(store.messages("good")) == ["m1", "m2", "m3"]
        assert store.stats("bad").message_count == 3
    finally:
        store.close()
        location.cleanup()


# -- the contract as a store's author runs it -------------------------------------------------------


class NewestFirstTail(InMemoryStore):
    """A store with one bug: its tail comes back newest first."""

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return list(reversed(super().tail(session_id, limit, before_seq=before_seq)))


def test_check_store_passes_a_store_that_keeps_the_contract(tmp_path: object) -> None:
    memory = InMemoryStore()
    check_store(lambda: memory, persistent=False)
    check_store(lambda: SQLiteStore(f"{tmp_path}/contract.db"))


def test_check_store_names_every_check_a_store_fails_and_why() -> None:
    broken = NewestFirstTail()
    with pytest.raises(AssertionError) as failed:
        check_store(lambda: broken, persistent=False)
    report = str(failed.value)
    assert "tail_returns_the_newest_messages_oldest_first: AssertionError" in report
    assert "tail_before_seq_pages_backwards" in report
    assert "append_assigns_consecutive_seqs_from_one" not in report


def test_a_store_without_persistence_skips_only_the_checks_that_reopen() -> None:
    every, kept = store_checks(InMemoryStore), store_checks(InMemoryStore, persistent=False)
    assert {check.name for check in every} - {check.name for check in kept} == {
        check.name for check in every if check.reopens
    }
    assert any(check.reopens for check in every)


def test_capability_checks_apply_only_to_stores_that_declare_them() -> None:
    def capabilities(checks: Sequence[StoreCheck]) -> set[str]:
        return {check.capability.__name__ for check in checks if check.capability is not None}

    assert capabilities(store_checks(InMemoryStore)) == {"ReadsStates", "ListsUserSessions"}
    assert capabilities(store_checks(STORE_TYPES["postgres"])) == {
        "ReadsSession",
        "ReadsStates",
        "ReadsLogs",
        "ListsUserSessions",
        "ReadsUserScope",
        "HostsHistoryIndex",
        "HostsVectors",
    }
    assert capabilities(store_checks(STORE_TYPES["async-redis"])) == {"ReadsSession"}


def test_the_contract_is_not_loaded_with_convmem_and_needs_no_pytest() -> None:
    code = (
        "import sys, convmem; assert 'convmem.testing' not in sys.modules; "
        "sys.modules['pytest'] = None; import convmem.testing; assert convmem.testing.store_checks"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
