"""LangChain's own chat-history behaviours, run against InMemoryChatMessageHistory and ours.

Ported from langchain-core's unit tests of chat histories and of
RunnableWithMessageHistory: every behaviour is checked on the built-in class
too, so a failure here means ours differs from what LangChain code expects.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory, InMemoryChatMessageHistory
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_convmem import ConvMemChatMessageHistory

pytestmark = pytest.mark.filterwarnings(
    "ignore:RunnableWithMessageHistory is deprecated",
    "ignore:The class `InMemoryChatMessageHistory` was deprecated",
)

HistoryClass = Callable[..., BaseChatMessageHistory]


def runnable(func: Callable[..., Any]) -> Runnable[Any, Any]:
    """A RunnableLambda, typed loosely for these tests."""
    return RunnableLambda(func)


@pytest.fixture(params=["langchain", "convmem"])
def history_class(request: pytest.FixtureRequest) -> HistoryClass:
    return InMemoryChatMessageHistory if request.param == "langchain" else ConvMemChatMessageHistory


def session_factory(history_class: HistoryClass) -> Callable[..., BaseChatMessageHistory]:
    store: dict[str, BaseChatMessageHistory] = {}

    def get_session_history(session_id: str, **kwargs: Any) -> BaseChatMessageHistory:
        if session_id not in store:
            store[session_id] = history_class()
        return store[session_id]

    return get_session_history


def you_said(messages: list[BaseMessage]) -> str:
    return "you said: " + "\n".join(str(m.content) for m in messages if isinstance(m, HumanMessage))


def test_interfaces(history_class: HistoryClass) -> None:
    history = history_class()
    history.add_message(SystemMessage(content="system"))
    history.add_user_message("human 1")
    history.add_ai_message("ai")
    history.add_message(HumanMessage(content="human 2"))
    assert str(history) == "System: system\nHuman: human 1\nAI: ai\nHuman: human 2"


async def test_async_interface(history_class: HistoryClass) -> None:
    history = history_class()
    await history.aadd_messages([HumanMessage(content="Hello"), HumanMessage(content="World")])
    assert await history.aget_messages() == [HumanMessage(content="Hello"), HumanMessage(content="World")]
    await history.aadd_messages([HumanMessage(content="!")])
    assert await history.aget_messages() == [
        HumanMessage(content="Hello"),
        HumanMessage(content="World"),
        HumanMessage(content="!"),
    ]
    await history.aclear()
    assert await history.aget_messages() == []


def test_constructed_with_messages_and_equal_by_messages(history_class: HistoryClass) -> None:
    messages = [HumanMessage(content="hello"), AIMessage(content="you said: hello")]
    assert history_class(messages=messages) == history_class(messages=messages)
    assert history_class(messages=messages).messages == messages


def test_input_messages(history_class: HistoryClass) -> None:
    with_history = RunnableWithMessageHistory(runnable(you_said), session_factory(history_class))
    config: RunnableConfig = {"configurable": {"session_id": "1"}}
    assert with_history.invoke([HumanMessage(content="hello")], config) == "you said: hello"
    assert with_history.invoke([HumanMessage(content="good bye")], config) == "you said: hello\ngood bye"


async def test_input_messages_async(history_class: HistoryClass) -> None:
    with_history = RunnableWithMessageHistory(runnable(you_said), session_factory(history_class))
    config: RunnableConfig = {"configurable": {"session_id": "1_async"}}
    assert await with_history.ainvoke([HumanMessage(content="hello")], config) == "you said: hello"
    assert (
        await with_history.ainvoke([HumanMessage(content="good bye")], config) == "you said: hello\ngood bye"
    )


def test_input_dict(history_class: HistoryClass) -> None:
    wrapped = runnable(lambda value: you_said(value["messages"]))
    with_history = RunnableWithMessageHistory(
        wrapped, session_factory(history_class), input_messages_key="messages"
    )
    config: RunnableConfig = {"configurable": {"session_id": "2"}}
    assert with_history.invoke({"messages": [HumanMessage(content="hello")]}, config) == "you said: hello"
    second = with_history.invoke({"messages": [HumanMessage(content="good bye")]}, config)
    assert second == "you said: hello\ngood bye"


def test_input_dict_with_history_key(history_class: HistoryClass) -> None:
    wrapped = runnable(
        lambda value: (
            "you said: "
            + "\n".join(
                [str(m.content) for m in value["history"] if isinstance(m, HumanMessage)] + [value["input"]]
            )
        )
    )
    with_history = RunnableWithMessageHistory(
        wrapped, session_factory(history_class), input_messages_key="input", history_messages_key="history"
    )
    config: RunnableConfig = {"configurable": {"session_id": "3"}}
    assert with_history.invoke({"input": "hello"}, config) == "you said: hello"
    assert with_history.invoke({"input": "good bye"}, config) == "you said: hello\ngood bye"


def _answer(value: dict[str, Any]) -> str:
    return "you said: " + "\n".join(
        [str(m.content) for m in value["history"] if isinstance(m, HumanMessage)] + [value["input"]]
    )


def test_output_message(history_class: HistoryClass) -> None:
    with_history = RunnableWithMessageHistory(
        runnable(lambda value: AIMessage(content=_answer(value))),
        session_factory(history_class),
        input_messages_key="input",
        history_messages_key="history",
    )
    config: RunnableConfig = {"configurable": {"session_id": "4"}}
    assert with_history.invoke({"input": "hello"}, config) == AIMessage(content="you said: hello")
    assert with_history.invoke({"input": "good bye"}, config) == AIMessage(
        content="you said: hello\ngood bye"
    )


def test_output_messages(history_class: HistoryClass) -> None:
    with_history = RunnableWithMessageHistory(
        runnable(lambda value: [AIMessage(content=_answer(value))]),
        session_factory(history_class),
        input_messages_key="input",
        history_messages_key="history",
    )
    config: RunnableConfig = {"configurable": {"session_id": "5"}}
    assert with_history.invoke({"input": "hello"}, config) == [AIMessage(content="you said: hello")]
    assert with_history.invoke({"input": "good bye"}, config) == [
        AIMessage(content="you said: hello\ngood bye")
    ]


def test_output_dict(history_class: HistoryClass) -> None:
    with_history = RunnableWithMessageHistory(
        runnable(lambda value: {"output": [AIMessage(content=_answer(value))]}),
        session_factory(history_class),
        input_messages_key="input",
        history_messages_key="history",
        output_messages_key="output",
    )
    config: RunnableConfig = {"configurable": {"session_id": "6"}}
    assert with_history.invoke({"input": "hello"}, config) == {
        "output": [AIMessage(content="you said: hello")]
    }
    assert with_history.invoke({"input": "good bye"}, config) == {
        "output": [AIMessage(content="you said: hello\ngood bye")]
    }


def test_using_custom_config_specs(history_class: HistoryClass) -> None:
    store: dict[tuple[str, str], BaseChatMessageHistory] = {}

    def get_session_history(user_id: str, conversation_id: str) -> BaseChatMessageHistory:
        if (user_id, conversation_id) not in store:
            store[(user_id, conversation_id)] = history_class()
        return store[(user_id, conversation_id)]

    with_message_history = RunnableWithMessageHistory(
        runnable(lambda value: [AIMessage(content=you_said(value["messages"]))]),
        get_session_history=get_session_history,
        input_messages_key="messages",
        history_messages_key="history",
        history_factory_config=[
            ConfigurableFieldSpec(id="user_id", annotation=str, name="User ID", default="", is_shared=True),
            ConfigurableFieldSpec(
                id="conversation_id", annotation=str, name="Conversation ID", default=None, is_shared=True
            ),
        ],
    )
    result = with_message_history.invoke(
        {"messages": [HumanMessage(content="hello")]},
        {"configurable": {"user_id": "user1", "conversation_id": "1"}},
    )
    assert result == [AIMessage(content="you said: hello")]
    result = with_message_history.invoke(
        {"messages": [HumanMessage(content="goodbye")]},
        {"configurable": {"user_id": "user1", "conversation_id": "1"}},
    )
    assert result == [AIMessage(content="you said: goodbye")]
    with_message_history.invoke(
        {"messages": [HumanMessage(content="meow")]},
        {"configurable": {"user_id": "user2", "conversation_id": "1"}},
    )
    assert store == {
        ("user1", "1"): history_class(
            messages=[
                HumanMessage(content="hello"),
                AIMessage(content="you said: hello"),
                HumanMessage(content="goodbye"),
                AIMessage(content="you said: goodbye"),
            ]
        ),
        ("user2", "1"): history_class(
            messages=[HumanMessage(content="meow"), AIMessage(content="you said: meow")]
        ),
    }


def test_ignore_session_id(history_class: HistoryClass) -> None:
    """A factory without parameters is called without the session id."""
    history = history_class()
    with_history = RunnableWithMessageHistory(runnable(you_said), lambda: history)
    assert with_history.invoke([HumanMessage(content="hello")]) == "you said: hello"
    assert with_history.invoke([HumanMessage(content="goodbye")]) == "you said: hello\ngoodbye"
