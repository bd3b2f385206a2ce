"""What a build reads from its store: the session's stats, summary and facts together, in
one round trip where the store offers `read_session`, and nothing of another user's
session however it is read."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pytest

from convmem import ConversationMemory, InMemoryStore, MemoryConfig
from convmem._errors import SessionOwnerError
from convmem._stores.base import SessionSnapshot, SessionStats, StateRecord
from convmem._stores.capabilities import ReadsSession, read_session


class CountingStore(InMemoryStore, ReadsSession):
    """An in-memory store that reads a session whole, as the networked stores do, and
    counts the reads a build makes."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    def read_session(self, session_id: str, keys: Sequence[str]) -> SessionSnapshot:
        self.calls["read_session"] += 1
        stats = InMemoryStore.stats(self, session_id)
        states = {k: r for k in keys if (r := InMemoryStore.get_state(self, session_id, k)) is not None}
        return SessionSnapshot(stats, states)

    def stats(self, session_id: str) -> SessionStats:
        self.calls["stats"] += 1
        return super().stats(session_id)

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        self.calls["get_state"] += 1
        return super().get_state(session_id, key)


def chat(memory: ConversationMemory) -> None:
    memory.add_turn("My dog is called Rex and I live in Lyon.", "Noted!")
    for number in range(12):
        memory.add_turn(f"Question {number}: how do I sort a list in Python?", f"Use sorted(). ({number})")


@pytest.mark.parametrize("query", [None, "What is my dog called?"])
def test_a_build_reads_stats_summary_and_facts_in_one_read(query: str | None) -> None:
    store = CountingStore()
    memory = ConversationMemory("s", store, MemoryConfig(budget=400))
    chat(memory)
    memory.flush()
    assert memory.summary().text  # there is a summary and there are facts to read
    assert memory.facts()
    memory.build_context(query)  # the first build reads the recent turns too
    store.calls.clear()
    context = memory.build_context(query)
    assert store.calls == {"read_session": 1}
    assert "Rex" in context.to_text()


def test_a_build_shows_the_summary_and_facts_the_read_brought() -> None:
    counting, plain = CountingStore(), InMemoryStore()
    texts = []
    for store in (counting, plain):
        memory = ConversationMemory("s", store, MemoryConfig(budget=400))
        chat(memory)
        memory.flush()
        texts.append(memory.build_context("Where do I live?").to_text())
    assert texts[0] == texts[1]
    assert "Lyon" in texts[0]


def test_a_build_for_another_user_reads_whole_but_shows_nothing() -> None:
    store = CountingStore()
    bob = ConversationMemory("s", store, user_id="bob")  # opened while nobody owned it
    alice = ConversationMemory("s", store, user_id="alice")
    chat(alice)
    alice.flush()
    store.calls.clear()
    with pytest.raises(SessionOwnerError):
        bob.build_context("What is my dog called?")
    assert store.calls == {"read_session": 1}
    snapshot = read_session(store, "s", ["summary"])
    assert snapshot.stats.user_id == "alice"  # still hers, untouched


def test_a_user_scoped_build_reads_its_session_once_and_the_users_facts_apart() -> None:
    store = CountingStore()
    first = ConversationMemory("first", store, user_id="alice")
    chat(first)
    first.flush()
    second = ConversationMemory("second", store, user_id="alice")
    second.add_turn("Hello again", "Hi!")
    second.flush()
    second.build_context("What is my dog called?")
    store.calls.clear()
    context = second.build_context("What is my dog called?")
    assert store.calls["read_session"] == 1
    assert "Rex" in context.to_text()
