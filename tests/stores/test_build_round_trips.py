"""A warm build of a returning user's new chat makes a few round trips to a networked
store, however many sessions the user has: the user's sessions and their facts are
read in one pipeline or statement each, never one read per session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from shared_stores import SERVER_KINDS, location_for

from convmem import ConversationMemory, HashingEmbedder, Recall, Store

QUERIES = ("Which bike do I ride to work?", "Write a haiku about autumn rain.")
MOST_ROUND_TRIPS = {"redis": 1, "postgres": 2}
"""The session's stats and summary with the user's sessions and their facts (one
statement on PostgreSQL; one pipeline on Redis, holding every session of the user the
store saw last time), and the keyword index's rows where the store keeps them."""


@pytest.fixture(params=SERVER_KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    location = location_for(request.param, request)
    store = location.open()
    yield store
    store.close()
    location.cleanup()


def _add_sessions(store: Store, first: int, count: int) -> None:
    for number in range(first, first + count):
        earlier = ConversationMemory(f"earlier-{number}", store, user_id="u")
        earlier.add_turn(f"I rode bike number {number} to work today.", "Sounds like a good ride.")
        earlier.add_turn("My name is Ana.", "Nice to meet you, Ana.")
        earlier.flush()
        earlier.close()


def _count_round_trips(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter (``[n]``) of the round trips to `store`'s server from now until
    ``monkeypatch.undo()``: Redis requests (a command, a pipeline or a script each),
    PostgreSQL statements."""
    counted = [0]
    if hasattr(store, "_perform"):
        perform = store._perform

        def counting(request: Any) -> Any:
            counted[0] += 1
            return perform(request)

        monkeypatch.setattr(store, "_perform", counting)
    else:
        execute = psycopg.Cursor.execute

        def counting_execute(self: psycopg.Cursor[Any], *args: Any, **kwargs: Any) -> Any:
            counted[0] += 1
            return execute(self, *args, **kwargs)

        monkeypatch.setattr(psycopg.Cursor, "execute", counting_execute)
    return counted


def _round_trips(store: Store, memory: ConversationMemory, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Round trips of each build of `QUERIES`, after one build of each to warm up."""
    counted = _count_round_trips(store, monkeypatch)
    for query in QUERIES:
        memory.build_context(query=query, budget=1500)
    trips = []
    for query in QUERIES:
        counted[0] = 0
        memory.build_context(query=query, budget=1500)
        trips.append(counted[0])
    monkeypatch.undo()
    return trips


def test_a_warm_build_makes_as_many_round_trips_for_many_sessions_as_for_few(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_sessions(store, 0, 2)
    memory = ConversationMemory("new", store, user_id="u")
    few = _round_trips(store, memory, monkeypatch)
    _add_sessions(store, 2, 10)
    many = _round_trips(store, memory, monkeypatch)
    assert many == few
    assert max(many) <= MOST_ROUND_TRIPS["redis" if hasattr(store, "_perform") else "postgres"]


def _first_build_round_trips(store: Store, user: str, embeds: bool, monkeypatch: pytest.MonkeyPatch) -> int:
    """Round trips of the first build of a new chat of `user` by a recall that has read
    none of their sessions, as in a new process (Redis, or with an embedder: recall reads
    their logs; PostgreSQL with keywords only: its index rows)."""
    recall = Recall(HashingEmbedder()) if embeds else Recall()
    memory = ConversationMemory(f"{user}-new", store, user_id=user, recall=recall)
    counted = _count_round_trips(store, monkeypatch)
    context = memory.build_context(query="Which bike do I ride to work?", budget=1500)
    monkeypatch.undo()
    assert "bike number" in context.memory_text, context.memory_text
    return counted[0]


@pytest.mark.parametrize("embeds", [False, True], ids=["keywords", "embedder"])
def test_a_returning_users_first_build_reads_many_sessions_in_as_many_round_trips_as_few(
    store: Store, embeds: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_sessions(store, 0, 2)  # user "u"
    for number in range(12):
        earlier = ConversationMemory(f"many-{number}", store, user_id="many")
        earlier.add_turn(f"I rode bike number {number} to work today.", "Sounds like a good ride.")
        earlier.flush()
        earlier.close()
    few = _first_build_round_trips(store, "u", embeds, monkeypatch)
    many = _first_build_round_trips(store, "many", embeds, monkeypatch)
    assert many == few
