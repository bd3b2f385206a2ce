"""ConvMemChatMemoryBuffer as the memory of FunctionAgent and ReActAgent workflows, with scripted LLMs."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool, ToolSelection
from llama_index.core.workflow import Context, JsonSerializer

from llamaindex_convmem import ConvMemChatMemoryBuffer

# Workflows list their steps with inspect.getmembers, touching deprecated pydantic attributes.
pytestmark = pytest.mark.filterwarnings("ignore::pydantic.warnings.PydanticDeprecationWarning")


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny, 21 C in {city}"


class ScriptedToolCaller:
    """An LLM script: call `weather` for the city in the question, then answer from its result.

    Every request it receives is kept in `requests`, to check what the memory sent.
    """

    def __init__(self, *, openai_style: bool = False) -> None:
        self.requests: list[list[ChatMessage]] = []
        self.openai_style = openai_style

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append(list(messages))
        last = messages[-1]
        if last.role is MessageRole.TOOL:
            return ChatMessage(role="assistant", content=f"The weather: {last.content}.")
        city = (last.content or "").rsplit(" ", 1)[-1].strip("?")
        call_id = f"call-{len(self.requests)}"
        if self.openai_style:
            selection = ToolSelection(tool_id=call_id, tool_name="weather", tool_kwargs={"city": city})
            return ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [selection]})
        return ChatMessage(
            role="assistant",
            blocks=[ToolCallBlock(tool_call_id=call_id, tool_name="weather", tool_kwargs={"city": city})],
        )


def function_agent(script: ScriptedToolCaller) -> FunctionAgent:
    return FunctionAgent(
        tools=[FunctionTool.from_defaults(weather)],
        llm=MockFunctionCallingLLM(response_generator=script),
        system_prompt="You report the weather.",
    )


def call_ids(message: ChatMessage) -> list[str | None]:
    ids = [b.tool_call_id for b in message.blocks if isinstance(b, ToolCallBlock)]
    for call in message.additional_kwargs.get("tool_calls") or []:
        ids.append(call.tool_id if isinstance(call, ToolSelection) else call.get("tool_id"))
    return ids


def assert_well_formed(request: Sequence[ChatMessage]) -> None:
    """No leading assistant/tool message, and every tool result follows its call."""
    conversation = [m for m in request if m.role is not MessageRole.SYSTEM]
    assert conversation[0].role is MessageRole.USER
    for index, message in enumerate(conversation):
        if message.role is MessageRole.TOOL:
            earlier = [i for m in conversation[:index] for i in call_ids(m)]
            assert message.additional_kwargs["tool_call_id"] in earlier


async def test_function_agent_stores_every_tool_exchange() -> None:
    script = ScriptedToolCaller()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=2000)
    agent = function_agent(script)
    for city in ("Paris", "Oslo", "Rome"):
        result = await agent.run(f"What is the weather in {city}?", memory=memory)
        assert city in str(result)
    stored = await memory.aget_all()
    assert [m.role.value for m in stored] == ["user", "assistant", "tool", "assistant"] * 3
    call = stored[1].blocks[0]
    assert isinstance(call, ToolCallBlock)
    assert call.tool_kwargs == {"city": "Paris"}


async def test_function_agent_history_is_trimmed_without_splitting_tool_exchanges() -> None:
    script = ScriptedToolCaller()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=150)
    agent = function_agent(script)
    for city in ("Paris", "Oslo", "Rome", "Lima", "Kyiv", "Bern"):
        await agent.run(f"What is the weather in {city}?", memory=memory)
    assert len(await memory.aget_all()) == 24
    for request in script.requests:
        assert_well_formed(request)
    final_history = await memory.aget()
    assert len(final_history) < 24
    assert [m.role.value for m in final_history if m.role is not MessageRole.SYSTEM][-4:] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


async def test_openai_style_tool_calls_survive_the_memory_too() -> None:
    script = ScriptedToolCaller(openai_style=True)
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=130)
    agent = function_agent(script)
    for city in ("Paris", "Oslo", "Rome", "Lima"):
        await agent.run(f"What is the weather in {city}?", memory=memory)
    stored = await memory.aget_all()
    assert stored[1].additional_kwargs["tool_calls"][0]["tool_name"] == "weather"
    assert memory.memory.messages()[1].tool_calls[0]["args"] == {"city": "Paris"}
    for request in script.requests:
        assert_well_formed(request)


async def test_chat_history_given_to_the_agent_replaces_the_session() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=2000, chat_history=[ChatMessage(role="user", content="forgotten")]
    )
    history = [ChatMessage(role="user", content="Hi"), ChatMessage(role="assistant", content="Hello!")]
    await function_agent(ScriptedToolCaller()).run("Weather in Oslo?", chat_history=history, memory=memory)
    assert [m.content for m in (await memory.aget_all())[:3]] == ["Hi", "Hello!", "Weather in Oslo?"]


async def test_concurrent_agents_on_sessions_of_one_store_do_not_mix() -> None:
    shared = ConvMemChatMemoryBuffer.from_defaults(token_limit=2000, chat_store_key="alice")
    sessions = {"alice": shared, "bob": shared.for_session("bob")}
    cities = {"alice": ["Paris", "Rome"], "bob": ["Oslo", "Bern"]}

    async def conversation(name: str) -> None:
        agent = function_agent(ScriptedToolCaller())
        for city in cities[name]:
            await agent.run(f"What is the weather in {city}?", memory=sessions[name])

    await asyncio.gather(conversation("alice"), conversation("bob"))
    for name, memory in sessions.items():
        text = " ".join(m.content or "" for m in await memory.aget_all())
        other = "bob" if name == "alice" else "alice"
        assert all(city in text for city in cities[name])
        assert not any(city in text for city in cities[other])


async def test_an_agent_context_saved_to_json_reloads_the_sqlite_memory(tmp_path: Path) -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=2000, path=tmp_path / "agent.db", chat_store_key="s1"
    )
    agent = function_agent(ScriptedToolCaller())
    ctx = Context(agent)
    await agent.run("What is the weather in Paris?", memory=memory, ctx=ctx)
    serializer = JsonSerializer(allowed_types=[ConvMemChatMemoryBuffer])
    saved = ctx.to_dict(serializer=serializer)
    restored_ctx = Context.from_dict(agent, saved, serializer=serializer)
    restored = await restored_ctx.store.get("memory")
    assert isinstance(restored, ConvMemChatMemoryBuffer)
    assert restored.get_all() == memory.get_all()
    await agent.run("What is the weather in Oslo?", ctx=restored_ctx)
    assert len(memory.get_all()) == 8


async def test_an_agent_context_reloaded_from_json_says_which_models_it_lost(tmp_path: Path) -> None:
    """A JSON context keeps no model, and `Context.from_dict` passes none: the reloaded
    buffer would summarize offline and recall by words alone, so it says so."""
    from llama_index.core.llms import MockLLM

    memory = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=2000, path=tmp_path / "agent.db", chat_store_key="s1", summarizer=MockLLM()
    )
    agent = function_agent(ScriptedToolCaller())
    ctx = Context(agent)
    await agent.run("What is the weather in Paris?", memory=memory, ctx=ctx)
    serializer = JsonSerializer(allowed_types=[ConvMemChatMemoryBuffer])
    saved = ctx.to_dict(serializer=serializer)
    with pytest.warns(RuntimeWarning, match=r"saved with summarizer.*from_dict\(data, summarizer=\.\.\.\)"):
        restored = await Context.from_dict(agent, saved, serializer=serializer).store.get("memory")
    assert restored.get_all() == memory.get_all()
    again = ConvMemChatMemoryBuffer.from_dict(memory.to_dict(), summarizer=MockLLM())  # given: no warning
    assert again.get_all() == memory.get_all()


class ScriptedReasoner:
    """A ReAct script: one Action on `weather`, then an Answer."""

    def __init__(self) -> None:
        self.requests: list[list[ChatMessage]] = []

    def __call__(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
        self.requests.append(list(messages))
        if "Observation:" in (messages[-1].content or ""):
            return ChatMessage(role="assistant", content="Thought: I can answer.\nAnswer: It is sunny.")
        return ChatMessage(
            role="assistant",
            content='Thought: I need the weather.\nAction: weather\nAction Input: {"city": "Paris"}',
        )


async def test_react_agent_keeps_its_turns_in_the_buffer() -> None:
    script = ScriptedReasoner()
    agent = ReActAgent(
        tools=[FunctionTool.from_defaults(weather)], llm=MockFunctionCallingLLM(response_generator=script)
    )
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=3000)
    for _ in range(2):
        result = await agent.run("What is the weather in Paris?", memory=memory)
        assert "sunny" in str(result)
    stored = await memory.aget_all()
    assert [m.role.value for m in stored] == ["user", "assistant", "user", "assistant"]
    assert "Observation: sunny, 21 C in Paris" in (stored[1].content or "")
    earlier_turn = stored[1].content or ""
    assert any(m.content == earlier_turn for m in script.requests[-1])
