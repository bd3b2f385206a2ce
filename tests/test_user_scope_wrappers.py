"""Through every wrapper, a user's new chat knows what they said in an earlier one; other users do not.

LangChain takes the user from ``config["configurable"]["user_id"]`` (as
LangGraph's examples do); LlamaIndex's buffer and memory block take ``user_id``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain.agents import create_agent
from langchain_core.language_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig
from llama_index.core.llms import ChatMessage
from pydantic import Field

from convmem import SQLiteStore
from langchain_convmem import ConvMemMiddleware, ConvMemSessions, with_convmem
from llamaindex_convmem import ConvMemChatMemoryBuffer, ConvMemMemoryBlock

PROMPT = ChatPromptTemplate.from_messages(
    [("system", "Answer briefly."), MessagesPlaceholder("history"), ("human", "{question}")]
)


def user_config(session: str, user: str | None) -> RunnableConfig:
    configurable: dict[str, Any] = {"session_id": session, "thread_id": session}
    if user is not None:
        configurable["user_id"] = user
    return {"configurable": configurable}


class Recorder(GenericFakeChatModel):
    """A fake chat model that records what each call was shown and accepts tools."""

    calls: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Recorder:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> Any:
        self.calls.append(list(messages))
        return super()._generate(messages, stop, run_manager, **kwargs)


def shown(messages: Sequence[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


def test_with_convmem_takes_the_user_from_the_configurable(tmp_path: Path) -> None:
    model = Recorder(messages=itertools.cycle(["Noted."]), calls=[])
    sessions = ConvMemSessions(store=SQLiteStore(tmp_path / "chat.db"))
    chain = with_convmem(
        PROMPT | model, sessions, input_messages_key="question", history_messages_key="history"
    )
    chain.invoke({"question": "I'm allergic to peanuts."}, user_config("monday", "alice"))
    chain.invoke({"question": "Suggest a snack for the trip."}, user_config("tuesday", "alice"))
    assert "peanut" in shown(model.calls[-1])
    chain.invoke({"question": "Suggest a snack for the trip."}, user_config("tuesday", "bob"))
    assert "peanut" not in shown(model.calls[-1])
    chain.invoke({"question": "Suggest a snack for the trip."}, user_config("wednesday", None))
    assert "peanut" not in shown(model.calls[-1])


def test_the_agent_middleware_shares_a_users_facts_across_threads() -> None:
    model = Recorder(messages=itertools.cycle(["Noted.", "Here you go."]), calls=[])
    agent = create_agent(model, [], middleware=[ConvMemMiddleware(ConvMemSessions())])
    agent.invoke({"messages": [HumanMessage("My dog is called Rex.")]}, user_config("thread-1", "alice"))
    agent.invoke({"messages": [HumanMessage("Name a good toy for him.")]}, user_config("thread-2", "alice"))
    assert "Rex" in shown(model.calls[-1])
    agent.invoke({"messages": [HumanMessage("Name a good toy for him.")]}, user_config("thread-3", "bob"))
    assert "Rex" not in shown(model.calls[-1])


def test_the_llamaindex_buffer_takes_user_id(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "chat.db")
    first = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="monday", store=store, user_id="alice")
    first.put(ChatMessage(role="user", content="我对花生过敏。"))
    first.put(ChatMessage(role="assistant", content="记住了。"))
    second = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="tuesday", store=store, user_id="alice")
    assert "花生" in "\n".join(str(m.content) for m in second.get(input="推荐一个零食"))
    other = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="tuesday-bob", store=store, user_id="bob")
    assert "花生" not in "\n".join(str(m.content) for m in other.get(input="推荐一个零食 花生"))


async def test_the_llamaindex_memory_block_takes_user_id(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "chat.db")
    block = ConvMemMemoryBlock(store=store, user_id="alice", session_id="monday")
    await block.aput([ChatMessage(role="user", content="My favourite colour is teal.")])
    later = ConvMemMemoryBlock(store=store, user_id="alice", session_id="tuesday")
    assert "teal" in str(await later.aget([ChatMessage(role="user", content="Pick a colour for my room.")]))
    bob = ConvMemMemoryBlock(store=store, user_id="bob", session_id="bob-1")
    assert "teal" not in str(await bob.aget([ChatMessage(role="user", content="Pick a colour, teal?")]))
