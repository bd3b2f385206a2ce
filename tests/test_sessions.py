"""The sessions registry and `memory_from_options`: how code serving many sessions gets memories."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from convmem import (
    ApproximateCounter,
    ConfigError,
    ConversationMemory,
    ExtractiveSummarizer,
    InMemoryStore,
    InvalidSessionIdError,
    MemoryConfig,
    SessionRegistry,
    SQLiteStore,
)
from convmem._errors import SessionOwnerError
from convmem._sessions import DEFAULT_MAX_CACHED_SESSIONS, memory_from_options


def spy_on_close(memory: ConversationMemory) -> list[str]:
    closed: list[str] = []
    memory.close = lambda: closed.append(memory.session_id)  # type: ignore[method-assign]
    return closed


# -- the registry ---------------------------------------------------------------------


def test_a_session_gets_the_same_memory_on_every_lookup() -> None:
    sessions = SessionRegistry()
    assert sessions.memory("s1") is sessions.memory("s1")


def test_one_session_id_of_two_users_gets_two_memories() -> None:
    sessions = SessionRegistry()
    ana, bo = sessions.memory("s1", "ana"), sessions.memory("s1", "bo")
    assert ana is not bo
    assert (ana.user_id, bo.user_id) == ("ana", "bo")


def test_every_memory_shares_the_store_config_and_options() -> None:
    config, summarizer = MemoryConfig(keep_recent_turns=3), ExtractiveSummarizer(ApproximateCounter())
    sessions = SessionRegistry(config=config, summarizer=summarizer)
    first, second = sessions.memory("a"), sessions.memory("b")
    assert first.store is second.store is sessions.store
    assert first.config is second.config is config
    assert first.summarizer is second.summarizer is summarizer


def test_the_default_bound_is_1024_sessions() -> None:
    assert DEFAULT_MAX_CACHED_SESSIONS == 1024
    assert SessionRegistry().max_cached_sessions == DEFAULT_MAX_CACHED_SESSIONS


def test_past_the_bound_the_least_recently_used_memory_is_dropped() -> None:
    sessions = SessionRegistry(max_cached_sessions=2)
    first = sessions.memory("a")
    sessions.memory("b")
    sessions.memory("c")
    assert len(sessions) == 2
    assert sessions.memory("a") is not first


def test_a_lookup_makes_a_session_the_most_recently_used() -> None:
    sessions = SessionRegistry(max_cached_sessions=2)
    a, b = sessions.memory("a"), sessions.memory("b")
    sessions.memory("a")
    sessions.memory("c")
    assert sessions.memory("a") is a
    assert sessions.memory("b") is not b


def test_an_evicted_memory_is_closed() -> None:
    sessions = SessionRegistry(max_cached_sessions=1)
    closed = spy_on_close(sessions.memory("a"))
    sessions.memory("b")
    assert closed == ["a"]


def test_an_evicted_session_keeps_its_log() -> None:
    sessions = SessionRegistry(max_cached_sessions=1)
    sessions.memory("a").add_turn("My dog is Rex.", "Nice!")
    sessions.memory("b")
    assert [m.text for m in sessions.memory("a").messages()] == ["My dog is Rex.", "Nice!"]


def test_a_slow_close_of_an_evicted_memory_does_not_hold_up_lookups() -> None:
    sessions = SessionRegistry(max_cached_sessions=2)
    evicted, cached = sessions.memory("a"), sessions.memory("b")
    looked_up: list[ConversationMemory] = []

    def close_while_another_thread_looks_up() -> None:
        # Were the registry's lock held here, this lookup would wait for close to end.
        lookup = threading.Thread(target=lambda: looked_up.append(sessions.memory("b")))
        lookup.start()
        lookup.join(timeout=30)

    evicted.close = close_while_another_thread_looks_up  # type: ignore[method-assign]
    sessions.memory("c")
    assert looked_up == [cached]


def test_concurrent_first_lookups_of_a_session_share_one_memory() -> None:
    sessions = SessionRegistry()
    barrier = threading.Barrier(8)
    found: list[ConversationMemory] = []

    def look_up() -> None:
        barrier.wait()
        found.append(sessions.memory("s1"))

    threads = [threading.Thread(target=look_up) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(memory) for memory in found}) == 1


def test_close_closes_every_memory_and_later_lookups_make_new_ones() -> None:
    sessions = SessionRegistry()
    first = sessions.memory("a")
    closed = spy_on_close(first)
    sessions.close()
    assert closed == ["a"]
    assert len(sessions) == 0
    assert sessions.memory("a") is not first


@pytest.mark.parametrize("bound", [0, -1, 2.5, True, "10"])
def test_a_bound_that_is_not_a_positive_int_is_refused_naming_it(bound: object) -> None:
    with pytest.raises(ConfigError, match="max_cached_sessions"):
        SessionRegistry(max_cached_sessions=bound)  # type: ignore[arg-type]


def test_a_memory_option_the_memory_does_not_take_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"does not accept \['turbo'\]"):
        SessionRegistry(turbo=True)


def test_a_user_id_given_as_a_registry_option_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"\['user_id'\]"):
        SessionRegistry(user_id="ana")


def test_from_options_builds_a_registry_from_the_options() -> None:
    store = InMemoryStore()
    assert SessionRegistry.from_options(None, store=store).store is store


def test_from_options_refuses_sessions_with_options_naming_them() -> None:
    with pytest.raises(ConfigError, match=r"sessions= .*not both.*\['config', 'store'\]"):
        SessionRegistry.from_options(SessionRegistry(), store=InMemoryStore(), config=MemoryConfig())


def test_from_options_refuses_sessions_that_are_not_a_registry() -> None:
    with pytest.raises(ConfigError, match="sessions must be a SessionRegistry, got dict"):
        SessionRegistry.from_options({})  # type: ignore[arg-type]


# -- memory_from_options ----------------------------------------------------------------


def test_a_given_memory_is_served_as_it_is() -> None:
    memory = ConversationMemory("s1")
    assert memory_from_options(memory) is memory


def test_options_build_a_memory_on_the_named_sqlite_file(tmp_path: Path) -> None:
    memory = memory_from_options(None, "s1", path=tmp_path / "chat.db", user_id="ana")
    assert isinstance(memory.store, SQLiteStore)
    assert (memory.session_id, memory.user_id) == ("s1", "ana")


def test_a_memory_with_options_is_refused_naming_the_options() -> None:
    with pytest.raises(ConfigError, match=r"memory= .*not both.*\['path', 'summarizer'\]"):
        memory_from_options(ConversationMemory("s1"), path="chat.db", summarizer=object())


def test_a_memory_that_is_not_a_conversation_memory_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="memory must be a ConversationMemory, got str"):
        memory_from_options("s1")  # type: ignore[arg-type]


def test_a_session_id_other_than_the_memorys_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match="session_id 'other' differs from the memory's session 's1'"):
        memory_from_options(ConversationMemory("s1"), "other")


def test_path_and_store_together_are_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"path= .*store=, not both"):
        memory_from_options(None, "s1", path="chat.db", store=InMemoryStore())


def test_a_store_that_is_not_a_convmem_store_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="needs store= to be a convmem Store"):
        memory_from_options(None, "s1", store={})  # type: ignore[arg-type]


def test_a_config_that_is_not_a_memory_config_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="config must be a MemoryConfig, got dict"):
        memory_from_options(None, "s1", config={"budget": 100})  # type: ignore[arg-type]


def test_an_option_the_memory_does_not_take_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"does not accept \['turbo'\]"):
        memory_from_options(None, "s1", turbo=True)


def test_a_new_memory_without_a_session_id_is_refused() -> None:
    with pytest.raises(InvalidSessionIdError, match="session_id is missing"):
        memory_from_options(None)


def test_a_registry_refuses_a_second_user_on_a_session_the_first_one_wrote() -> None:
    registry = SessionRegistry()
    registry.memory("1", "alice").add_turn("alice's question", "an answer")
    with pytest.raises(SessionOwnerError):
        registry.memory("1", "bob")


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_kept_memory_refuses_a_session_deleted_and_started_again_by_another_user(
    kind: str, tmp_path: Path
) -> None:
    """A server keeps alice's memory; her session is deleted by other means (forgetting
    her, expiry, another process) and bob starts one under the same id. Every later call
    of the kept memory is refused: nothing of bob's is read, changed or cleared."""
    store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "chat.db")
    alice = ConversationMemory("chat-1", store, user_id="alice")
    alice.add_turn("My name is Alice.", "Hello Alice.")
    assert alice.messages() and alice.facts()  # seen as hers
    store.forget_user("alice")
    bob = ConversationMemory("chat-1", store, user_id="bob")
    bob.add_turn("My bank PIN is 4321 and I live in Oslo.", "Noted, Bob.")
    reads = [alice.messages, lambda: alice.tail(5), alice.render_transcript, alice.facts, alice.summary]
    writes = [
        lambda: alice.set_status(1, "failed"),
        lambda: alice.replace_message(1, {"role": "user", "content": "overwritten"}),
        lambda: alice.delete_messages([2]),
        alice.clear,
        lambda: alice.build_context("Where do I live?"),
    ]
    for call in reads + writes:
        with pytest.raises(SessionOwnerError, match="belongs to another user"):
            call()
    kept = [(m.text, m.status.value) for m in bob.messages()]
    assert kept == [("My bank PIN is 4321 and I live in Oslo.", "completed"), ("Noted, Bob.", "completed")]


def test_a_memory_without_a_user_reaches_any_session() -> None:
    registry = SessionRegistry()
    registry.memory("1", "alice").add("user", "alice's question")
    assert [m.text for m in registry.memory("1").messages()] == ["alice's question"]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_memory_evicted_while_a_request_holds_it_keeps_its_summary_and_facts(asynchronous: bool) -> None:
    config = MemoryConfig(
        keep_recent_turns=1, summary_trigger="turns", summary_every_turns=1, background=True
    )
    sessions = SessionRegistry(config=config, max_cached_sessions=1)
    held = sessions.memory("alice")  # a request holds alice's memory ...
    sessions.memory("bob")  # ... while another one's lookup evicts and closes it
    turns = [("My name is Alice. I live in Oslo.", "Hi Alice."), ("My dog is called Rex.", "Nice.")]
    if asynchronous:

        async def add() -> bool:
            for user, assistant in turns:
                await held.aadd_turn(user, assistant)
            return await held.aflush(10)

        assert asyncio.run(asyncio.wait_for(add(), 20))
    else:
        for user, assistant in turns:
            held.add_turn(user, assistant)
        assert held.flush(10)
    assert {fact.key: fact.value for fact in held.facts()}["city"] == "Oslo"
    assert held.summary().covers_through_seq == 2
