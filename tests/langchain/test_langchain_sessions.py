"""LangChain's sessions are convmem's bounded registry; memory= and options never mix."""

from __future__ import annotations

import pytest
from langchain_core.runnables import RunnableLambda

from convmem import ConfigError, ConversationMemory, InMemoryStore, MemoryConfig, SessionRegistry
from convmem._errors import SessionOwnerError
from langchain_convmem import ConvMemChatMessageHistory, ConvMemMiddleware, ConvMemSessions, with_convmem


def test_conv_mem_sessions_is_the_core_registry() -> None:
    assert isinstance(ConvMemSessions(), SessionRegistry)


def test_the_factory_gives_conv_mem_sessions() -> None:
    assert isinstance(ConvMemChatMessageHistory.factory(), ConvMemSessions)


def test_a_session_beyond_the_bound_closes_the_least_recently_used() -> None:
    sessions = ConvMemSessions(max_cached_sessions=1)
    first = sessions.memory("a")
    closed: list[str] = []
    first.close = lambda: closed.append("a")  # type: ignore[method-assign]
    sessions("b")
    assert closed == ["a"]
    assert sessions.memory("a") is not first


def test_a_user_and_a_session_are_stored_under_one_id() -> None:
    assert ConvMemSessions().memory("1", "ana").session_id == "ana/1"


def test_a_history_given_memory_and_options_names_the_options() -> None:
    with pytest.raises(ConfigError, match=r"memory= .*not both.*\['config', 'store'\]"):
        ConvMemChatMessageHistory(
            memory=ConversationMemory("s1"), store=InMemoryStore(), config=MemoryConfig()
        )


def test_a_history_given_something_else_as_memory_names_it() -> None:
    with pytest.raises(ConfigError, match="memory must be a ConversationMemory, got str"):
        ConvMemChatMessageHistory(memory="s1")  # type: ignore[arg-type]


def test_a_history_with_path_and_store_names_both() -> None:
    with pytest.raises(ConfigError, match=r"path= .*store=, not both"):
        ConvMemChatMessageHistory("s1", path="chat.db", store=InMemoryStore())


def test_a_runnable_given_sessions_and_options_names_the_options() -> None:
    with pytest.raises(ConfigError, match=r"sessions= .*not both.*\['store'\]"):
        with_convmem(RunnableLambda(lambda x: x), ConvMemSessions(), store=InMemoryStore())


def test_a_runnable_given_an_option_the_memory_does_not_take_names_it() -> None:
    with pytest.raises(ConfigError, match=r"unknown option 'turbo'; it accepts: "):
        with_convmem(RunnableLambda(lambda x: x), turbo=True)


def test_middleware_given_memory_and_sessions_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"memory=.*sessions=, not both"):
        ConvMemMiddleware(ConvMemSessions(), memory=ConversationMemory("s1"))


def test_middleware_given_memory_and_options_names_the_options() -> None:
    with pytest.raises(ConfigError, match=r"memory= .*not both.*\['path'\]"):
        ConvMemMiddleware(memory=ConversationMemory("s1"), path="chat.db")


def test_a_history_of_another_user_on_the_same_session_is_refused() -> None:
    store = InMemoryStore()
    ConvMemChatMessageHistory("1", store=store, user_id="alice").add_user_message("alice's secret")
    with pytest.raises(SessionOwnerError, match="user 'bob'"):
        ConvMemChatMessageHistory("1", store=store, user_id="bob")
    assert store.forget_user("bob") == []
    assert store.forget_user("alice") == ["1"]


def test_a_history_opened_before_another_user_wrote_refuses_to_read_it() -> None:
    store = InMemoryStore()
    bob = ConvMemChatMessageHistory("1", store=store, user_id="bob")
    ConvMemChatMessageHistory("1", store=store, user_id="alice").add_user_message("alice's secret")
    with pytest.raises(SessionOwnerError):
        _ = bob.messages
    with pytest.raises(SessionOwnerError):
        bob.add_user_message("bob's question")


def test_sessions_keep_two_users_conversations_with_one_id_apart() -> None:
    sessions = ConvMemSessions(store=InMemoryStore())
    sessions.history("1", "alice").add_user_message("alice's")
    sessions.history("1", "bob").add_user_message("bob's")
    assert [m.content for m in sessions.history("1", "bob").full_messages] == ["bob's"]
    assert sessions.store.forget_user("bob") == ["bob/1"]
