"""Wrapper options: a misspelled one, or a key argument no dict can be read by, fails at
construction; with_convmem takes a get_session_history."""

from __future__ import annotations

import itertools
import re

import pytest
from langchain_core.chat_history import InMemoryChatMessageHistory
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from convmem import ConfigError, TurnStatus
from langchain_convmem import (
    ConvMemChatMessageHistory,
    ConvMemMiddleware,
    ConvMemNode,
    ConvMemSessions,
    with_convmem,
)

NOT_KEYS = [None, "", "  ", 3, ("thread_id",)]
NOT_KEYS_OR_NONE = ["", "  ", 5, ["question"]]


def echo_model() -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=itertools.cycle(["ok"]))


def test_a_misspelled_middleware_option_fails_at_construction() -> None:
    with pytest.raises(
        ConfigError, match=r"ConvMemMiddleware got unknown option 'max_tokens'; it accepts: budget"
    ):
        ConvMemMiddleware(max_tokens=1000)


def test_a_misspelled_with_convmem_option_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"'budgett'.*did you mean 'budget'.*accepts:.*session_id_key"):
        with_convmem(echo_model(), budgett=100)


def test_a_misspelled_history_option_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"'pin_message'.*did you mean 'pin_messages'"):
        ConvMemChatMessageHistory(pin_message=True)


def test_a_misspelled_sessions_option_fails_at_construction() -> None:
    with pytest.raises(ConfigError, match=r"'max_cached_session'.*did you mean 'max_cached_sessions'"):
        ConvMemSessions(max_cached_session=3)


@pytest.mark.parametrize("argument", ["session_id_key", "user_id_key"])
@pytest.mark.parametrize("value", NOT_KEYS)
def test_a_middleware_config_key_that_is_not_a_non_empty_str_is_refused(argument: str, value: object) -> None:
    with pytest.raises(
        ConfigError, match=rf"^{argument} must be a non-empty str .*, got {re.escape(repr(value))}"
    ):
        ConvMemMiddleware(**{argument: value})


@pytest.mark.parametrize("argument", ["session_id_key", "user_id_key"])
@pytest.mark.parametrize("value", NOT_KEYS)
def test_a_node_config_key_that_is_not_a_non_empty_str_is_refused(argument: str, value: object) -> None:
    with pytest.raises(
        ConfigError, match=rf"^{argument} must be a non-empty str .*, got {re.escape(repr(value))}"
    ):
        ConvMemNode(**{argument: value})


@pytest.mark.parametrize("argument", ["session_id_key", "user_id_key"])
@pytest.mark.parametrize("value", NOT_KEYS)
def test_a_with_convmem_config_key_that_is_not_a_non_empty_str_is_refused(
    argument: str, value: object
) -> None:
    with pytest.raises(
        ConfigError, match=rf"^{argument} must be a non-empty str .*, got {re.escape(repr(value))}"
    ):
        with_convmem(echo_model(), **{argument: value})


@pytest.mark.parametrize("argument", ["input_messages_key", "history_messages_key", "output_messages_key"])
@pytest.mark.parametrize("value", NOT_KEYS_OR_NONE)
def test_a_with_convmem_messages_key_that_is_not_none_or_a_non_empty_str_is_refused(
    argument: str, value: object
) -> None:
    with pytest.raises(
        ConfigError, match=rf"^{argument} must be None or a non-empty str .*, got {re.escape(repr(value))}"
    ):
        with_convmem(echo_model(), **{argument: value})


def test_with_convmem_accepts_a_get_session_history_function() -> None:
    sessions = ConvMemSessions()

    def get_session_history(session_id: str) -> ConvMemChatMessageHistory:
        return sessions(session_id)

    chain = with_convmem(echo_model(), get_session_history)
    chain.invoke("hello", {"configurable": {"session_id": "s"}})
    assert [(m.text, m.status) for m in sessions.memory("s").messages()] == [
        ("hello", TurnStatus.COMPLETED),
        ("ok", TurnStatus.COMPLETED),
    ]


def test_a_get_session_history_taking_user_id_gets_it() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(echo_model(), lambda session_id, user_id=None: sessions(session_id, user_id))
    chain.invoke("hi", {"configurable": {"session_id": "s", "user_id": "ana"}})
    assert [m.text for m in sessions.memory("s", "ana").messages()] == ["hi", "ok"]


# Users still pass LangChain's deprecated in-memory history; the refusal must name ours.
@pytest.mark.filterwarnings("ignore:The class `InMemoryChatMessageHistory` was deprecated")
def test_a_get_session_history_of_another_kind_is_refused_clearly() -> None:
    chain = with_convmem(echo_model(), lambda session_id: InMemoryChatMessageHistory())
    with pytest.raises(ConfigError, match="must return a ConvMemChatMessageHistory"):
        chain.invoke("hi", {"configurable": {"session_id": "s"}})


def test_an_empty_message_through_runnable_with_message_history() -> None:
    sessions = ConvMemSessions()
    chain = RunnableWithMessageHistory(echo_model(), sessions)
    chain.invoke([HumanMessage("")], {"configurable": {"session_id": "e"}})
    assert [(m.role.value, m.text) for m in sessions.memory("e").messages()] == [
        ("user", ""),
        ("assistant", "ok"),
    ]


def test_an_empty_message_through_with_convmem() -> None:
    sessions = ConvMemSessions()
    chain = with_convmem(RunnableLambda(lambda messages: "ok"), sessions)
    chain.invoke("", {"configurable": {"session_id": "e"}})
    assert [(m.text, m.status) for m in sessions.memory("e").messages()] == [
        ("", TurnStatus.COMPLETED),
        ("ok", TurnStatus.COMPLETED),
    ]
