"""The contracts langchain-core's own tests encode for a chat history, checked on
ConvMemChatMessageHistory.

langchain-core's tests/unit_tests/chat_history/test_chat_history.py and
runnables/test_history.py (RunnableWithMessageHistory) pass unchanged with our
class in place of InMemoryChatMessageHistory. test_langchain_history_compat.py
runs their RunnableWithMessageHistory shapes side by side with the built-in
class; this file states the remaining contracts in our own words: the base
class's add paths, separate conversations, a real chat model counting what it
is sent, a bad output writing nothing, the pinned histories `factory` hands out
serving every input/output shape, and where ours deliberately differs (past
the budget, ``messages`` is the managed context, not the log).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from convmem import InMemoryStore
from langchain_convmem import ConvMemChatMessageHistory, ConvMemMiddleware, ConvMemNode, ConvMemSessions

pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")

HELLO, WORLD = HumanMessage(content="Hello"), HumanMessage(content="World")


def runnable(func: Callable[..., Any]) -> Runnable[Any, Any]:
    return RunnableLambda(func)


def you_said(messages: list[BaseMessage], *extra: str) -> str:
    said = [str(m.content) for m in messages if isinstance(m, HumanMessage)]
    return "you said: " + "\n".join([*said, *extra])


class SentToModel(BaseCallbackHandler):
    """Records the messages of every chat model call."""

    def __init__(self) -> None:
        self.calls: list[list[BaseMessage]] = []

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kwargs: Any
    ) -> None:
        self.calls.extend(messages)


# -- chat_history/test_chat_history.py -----------------------------------------------------


def test_add_message_and_add_messages_append_in_order() -> None:
    history = ConvMemChatMessageHistory()
    history.add_message(HELLO)
    assert history.messages == [HELLO]
    history.add_message(WORLD)
    history.add_messages([HumanMessage(content="Hello again"), HumanMessage(content="World again")])
    assert [m.content for m in history.messages] == ["Hello", "World", "Hello again", "World again"]
    assert history.full_messages == history.messages


async def test_aadd_messages_appends_and_aclear_empties() -> None:
    history = ConvMemChatMessageHistory()
    await history.aadd_messages([HELLO, WORLD])
    await history.aadd_messages([HumanMessage(content="!")])
    assert [m.content for m in await history.aget_messages()] == ["Hello", "World", "!"]
    await history.aclear()
    assert await history.aget_messages() == []
    assert await history.aget_full_messages() == []


async def test_histories_made_without_a_session_id_are_separate_conversations() -> None:
    history = ConvMemChatMessageHistory(messages=[HELLO])
    other = ConvMemChatMessageHistory()
    await other.aadd_messages([WORLD])
    assert history.messages == [HELLO]
    await history.aclear()
    assert history.messages == []
    assert other.messages == [WORLD]


def test_sessions_sharing_a_store_are_separate_conversations() -> None:
    store = InMemoryStore()
    first = ConvMemChatMessageHistory("first", store=store, messages=[HELLO])
    second = ConvMemChatMessageHistory("second", store=store, messages=[WORLD])
    first.clear()
    assert first.messages == []
    assert second.messages == [WORLD]
    assert ConvMemChatMessageHistory("second", store=store).messages == [WORLD]


def test_docstring_says_langchain_deprecated_the_base_class_and_where_to_go() -> None:
    doc = ConvMemChatMessageHistory.__doc__ or ""
    assert "deprecated" in doc
    assert "https://docs.langchain.com/oss/python/langchain/short-term-memory" in doc
    assert ConvMemMiddleware.__name__ in doc
    assert ConvMemNode.__name__ in doc


# -- runnables/test_history.py ---------------------------------------------------------------


def chat_chain(answers: list[str]) -> Runnable[Any, Any]:
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    return prompt | FakeListChatModel(responses=answers)


def test_a_chat_model_is_sent_the_history_and_the_new_message() -> None:
    sent = SentToModel()
    chain = RunnableWithMessageHistory(
        chat_chain(["first answer", "second answer"]),
        ConvMemChatMessageHistory.factory(),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: RunnableConfig = {"configurable": {"session_id": "s"}, "callbacks": [sent]}
    assert chain.invoke({"question": "one"}, config).content == "first answer"
    assert chain.invoke({"question": "two"}, config).content == "second answer"
    assert [[m.content for m in call] for call in sent.calls] == [
        ["one"],
        ["one", "first answer", "two"],
    ]


async def test_a_chat_model_is_sent_the_history_and_the_new_message_async() -> None:
    sent = SentToModel()
    sessions = ConvMemChatMessageHistory.factory()
    chain = RunnableWithMessageHistory(
        chat_chain(["first answer", "second answer"]),
        sessions,
        input_messages_key="question",
        history_messages_key="history",
    )
    config: RunnableConfig = {"configurable": {"session_id": "s"}, "callbacks": [sent]}
    await chain.ainvoke({"question": "one"}, config)
    await chain.ainvoke({"question": "two"}, config)
    assert [len(call) for call in sent.calls] == [1, 3]
    assert [m.content for m in await sessions("s").aget_full_messages()] == [
        "one",
        "first answer",
        "two",
        "second answer",
    ]


@pytest.mark.parametrize("bad_output", [False, 123], ids=["bool", "int"])
def test_an_output_that_is_not_a_message_writes_nothing(bad_output: object) -> None:
    history = ConvMemChatMessageHistory()
    outputs = iter([bad_output, "fine"])
    chain = RunnableWithMessageHistory(runnable(lambda _: next(outputs)), lambda: history)
    chain.invoke("question")  # RunnableWithMessageHistory reports the bad output from a listener
    assert history.full_messages == []
    chain.invoke("question")
    assert history.full_messages == [HumanMessage(content="question"), AIMessage(content="fine")]


SHAPES: dict[str, dict[str, Any]] = {
    "messages in, text out": {
        "chain": lambda: runnable(lambda messages: you_said(messages)),
        "keys": {},
        "ask": lambda text: [HumanMessage(content=text)],
        "answer": lambda output: output,
    },
    "dict in, messages key": {
        "chain": lambda: runnable(lambda value: you_said(value["messages"])),
        "keys": {"input_messages_key": "messages"},
        "ask": lambda text: {"messages": [HumanMessage(content=text)]},
        "answer": lambda output: output,
    },
    "dict in, history key, message out": {
        "chain": lambda: runnable(
            lambda value: AIMessage(content=you_said(value["history"], value["input"]))
        ),
        "keys": {"input_messages_key": "input", "history_messages_key": "history"},
        "ask": lambda text: {"input": text},
        "answer": lambda output: output.content,
    },
    "dict in, history key, message list out": {
        "chain": lambda: runnable(
            lambda value: [AIMessage(content=you_said(value["history"], value["input"]))]
        ),
        "keys": {"input_messages_key": "input", "history_messages_key": "history"},
        "ask": lambda text: {"input": text},
        "answer": lambda output: output[0].content,
    },
    "dict in, dict out": {
        "chain": lambda: runnable(
            lambda value: {"output": [AIMessage(content=you_said(value["history"], value["input"]))]}
        ),
        "keys": {
            "input_messages_key": "input",
            "history_messages_key": "history",
            "output_messages_key": "output",
        },
        "ask": lambda text: {"input": text},
        "answer": lambda output: output["output"][0].content,
    },
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_factory_histories_serve_every_input_and_output_shape(shape: str) -> None:
    spec = SHAPES[shape]
    sessions = ConvMemChatMessageHistory.factory()
    chain = RunnableWithMessageHistory(spec["chain"](), sessions, **spec["keys"])
    config: RunnableConfig = {"configurable": {"session_id": "s"}}
    assert spec["answer"](chain.invoke(spec["ask"]("hello"), config)) == "you said: hello"
    assert spec["answer"](chain.invoke(spec["ask"]("good bye"), config)) == "you said: hello\ngood bye"
    assert sessions("s").messages == [
        HumanMessage(content="hello"),
        AIMessage(content="you said: hello"),
        HumanMessage(content="good bye"),
        AIMessage(content="you said: hello\ngood bye"),
    ]
    assert sessions("other").messages == []


def test_factory_keys_a_conversation_by_user_and_conversation_id() -> None:
    sessions = ConvMemSessions()
    chain = RunnableWithMessageHistory(
        runnable(lambda value: [AIMessage(content=you_said(value["messages"]))]),
        get_session_history=lambda user_id, conversation_id: sessions(conversation_id, user_id),
        input_messages_key="messages",
        history_messages_key="history",
        history_factory_config=[
            ConfigurableFieldSpec(id="user_id", annotation=str, default="", is_shared=True),
            ConfigurableFieldSpec(id="conversation_id", annotation=str, default=None, is_shared=True),
        ],
    )

    def say(text: str, user_id: str) -> None:
        chain.invoke(
            {"messages": [HumanMessage(content=text)]},
            {"configurable": {"user_id": user_id, "conversation_id": "1"}},
        )

    say("hello", "user1")
    say("goodbye", "user1")
    say("meow", "user2")
    assert [m.content for m in sessions("1", "user1").messages] == [
        "hello",
        "you said: hello",
        "goodbye",
        "you said: goodbye",
    ]
    assert [m.content for m in sessions("1", "user2").messages] == ["meow", "you said: meow"]
    assert sessions("1").messages == []  # the conversation id alone is a third conversation


# -- where ours deliberately differs ----------------------------------------------------------


def test_messages_equal_everything_added_only_while_it_fits_the_budget() -> None:
    """Upstream compares a session's history with every message added. Ours holds
    the managed context: once the conversation outgrows the budget, ``messages``
    is the newest turns (and a note of what was left out) while ``full_messages``
    keeps every message added."""
    sessions = ConvMemChatMessageHistory.factory(budget=120)
    chain = RunnableWithMessageHistory(runnable(lambda messages: you_said(messages[-1:])), sessions)
    config: RunnableConfig = {"configurable": {"session_id": "s"}}
    added: list[BaseMessage] = []
    for turn in range(12):
        question = f"question {turn}: " + "words to fill the budget " * 4
        chain.invoke([HumanMessage(content=question)], config)
        added += [HumanMessage(content=question), AIMessage(content=f"you said: {question}")]
        if turn == 0:
            assert sessions("s").messages == added
    history = sessions("s")
    assert history.full_messages == added
    assert history.messages != added
    assert history.messages[-2:] == added[-2:]
    assert history.context.token_count <= 120
