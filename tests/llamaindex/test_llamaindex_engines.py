"""ConvMemChatMemoryBuffer inside LlamaIndex's chat engines, sync and async, with offline LLMs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.chat_engine import (
    CondensePlusContextChatEngine,
    ContextChatEngine,
    SimpleChatEngine,
)
from llama_index.core.llms import CustomLLM
from llama_index.core.llms.callbacks import llm_completion_callback
from llama_index.core.llms.mock import MockLLMWithChatMemoryOfLastCall
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from convmem import MemoryConfig
from llamaindex_convmem import ConvMemChatMemoryBuffer, ConvMemCondensePlusContextChatEngine


class RecordingLLM(CustomLLM):
    """Answers every prompt with `answer` and remembers the prompts."""

    answer: str = "Paris is the capital of France."
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(context_window=4096, num_output=64)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        self.prompts.append(prompt)

        def gen() -> CompletionResponseGen:
            yield CompletionResponse(text=self.answer, delta=self.answer)

        return gen()

    def condense_prompts(self) -> list[str]:
        return [p for p in self.prompts if "Standalone question" in p]


class FixedRetriever(BaseRetriever):
    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return [NodeWithScore(node=TextNode(text="Paris is the capital of France."), score=1.0)]


def roles(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.role.value for m in messages]


# -- SimpleChatEngine ----------------------------------------------------------------------


def test_simple_chat_engine_stores_every_turn_and_sends_a_trimmed_history() -> None:
    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=20)
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=120)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    for turn in range(8):
        engine.chat(f"Question number {turn} about the weather in Paris?")
    assert len(engine.chat_history) == 16
    sent = list(llm.last_chat_messages or [])
    conversation = [m for m in sent if m.role is not MessageRole.SYSTEM]
    assert conversation[0].role is MessageRole.USER
    assert conversation[-1].content == "Question number 7 about the weather in Paris?"
    assert len(conversation) < 16


async def test_simple_chat_engine_achat_uses_the_async_twins() -> None:
    llm = MockLLMWithChatMemoryOfLastCall(max_tokens=5)
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=500)
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    await engine.achat("Hello")
    await engine.achat("How are you?")
    assert roles(await memory.aget_all()) == ["user", "assistant", "user", "assistant"]
    assert roles(llm.last_chat_messages or []) == ["user", "assistant", "user"]


def test_simple_chat_engine_streaming_writes_the_answer_to_memory() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=500)
    engine = SimpleChatEngine.from_defaults(llm=RecordingLLM(answer="Streamed answer."), memory=memory)
    response = engine.stream_chat("Tell me something")
    assert "".join(response.response_gen) == "Streamed answer."
    assert [m.content for m in memory.get_all()] == ["Tell me something", "Streamed answer."]


async def test_simple_chat_engine_async_streaming_writes_the_answer_to_memory() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=500)
    engine = SimpleChatEngine.from_defaults(llm=RecordingLLM(answer="Streamed answer."), memory=memory)
    response = await engine.astream_chat("Tell me something")
    chunks = [chunk async for chunk in response.async_response_gen()]
    assert "".join(chunks) == "Streamed answer."
    assert [m.content for m in await memory.aget_all()] == ["Tell me something", "Streamed answer."]


def test_chat_history_passed_to_chat_replaces_the_session_history() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=500, chat_history=[ChatMessage(role="user", content="old")]
    )
    engine = SimpleChatEngine.from_defaults(llm=RecordingLLM(answer="ok"), memory=memory)
    engine.chat(
        "new",
        chat_history=[
            ChatMessage(role="user", content="given"),
            ChatMessage(role="assistant", content="sure"),
        ],
    )
    assert [m.content for m in memory.get_all()] == ["given", "sure", "new", "ok"]


def test_engine_reset_clears_the_session() -> None:
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=500)
    engine = SimpleChatEngine.from_defaults(llm=RecordingLLM(), memory=memory)
    engine.chat("Hello")
    engine.reset()
    assert memory.get_all() == []


# -- ContextChatEngine ---------------------------------------------------------------------


def test_context_chat_engine_answers_with_retrieved_context_and_memory() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    engine = ContextChatEngine.from_defaults(retriever=FixedRetriever(), llm=llm, memory=memory)
    engine.chat("My name is Alice.")
    response = engine.chat("What is the capital of France?")
    assert str(response) == llm.answer
    assert [m.content for m in memory.get_all()][-2:] == ["What is the capital of France?", llm.answer]
    assert "My name is Alice." in llm.prompts[-1]


async def test_context_chat_engine_achat_stores_both_sides() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    engine = ContextChatEngine.from_defaults(retriever=FixedRetriever(), llm=llm, memory=memory)
    await engine.achat("What is the capital of France?")
    assert roles(await memory.aget_all()) == ["user", "assistant"]


# -- CondensePlusContextChatEngine ---------------------------------------------------------


def seed_history(memory: ConvMemChatMemoryBuffer) -> None:
    memory.put_messages(
        [
            ChatMessage(role="user", content="I am planning a trip to France."),
            ChatMessage(role="assistant", content="Lovely! Where would you like to go?"),
            ChatMessage(role="user", content="What is the weather in Paris?"),
            ChatMessage(
                role="assistant",
                blocks=[
                    ToolCallBlock(
                        tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "PARIS_TOOL_ARGS"}
                    )
                ],
            ),
            ChatMessage(role="tool", content="sunny", additional_kwargs={"tool_call_id": "c1"}),
            ChatMessage(role="assistant", content="It is sunny in Paris."),
        ]
    )
    memory.memory.add_turn(
        "Book me a hotel there.", "FAILED_ANSWER could not reach the hotel.", status="failed"
    )


def test_stock_condense_plus_context_engine_works_with_the_buffer() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    seed_history(memory)
    engine = CondensePlusContextChatEngine.from_defaults(retriever=FixedRetriever(), llm=llm, memory=memory)
    engine.chat("And what is its capital?")
    (condense,) = llm.condense_prompts()
    assert "It is sunny in Paris." in condense
    assert memory.get_all()[-1].content == llm.answer


def test_convmem_condense_engine_rewrites_from_the_orchestration_view() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    seed_history(memory)
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory
    )
    engine.chat("And what is its capital?")
    (condense,) = llm.condense_prompts()
    assert "It is sunny in Paris." in condense
    assert "Book me a hotel there." in condense
    assert "FAILED_ANSWER" not in condense
    assert "PARIS_TOOL_ARGS" not in condense


async def test_convmem_condense_engine_rewrites_from_the_orchestration_view_async() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    seed_history(memory)
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory
    )
    await engine.achat("And what is its capital?")
    (condense,) = llm.condense_prompts()
    assert "It is sunny in Paris." in condense
    assert "FAILED_ANSWER" not in condense
    assert roles(await memory.aget_all())[-2:] == ["user", "assistant"]


def test_convmem_condense_engine_passes_facts_and_summary_to_the_rewrite() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    memory.put_messages(
        [
            ChatMessage(role="user", content="My name is Alice and I live in Lyon."),
            ChatMessage(role="assistant", content="Hello Alice."),
        ]
    )
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory
    )
    engine.chat("Which city do I live in?")
    (condense,) = llm.condense_prompts()
    memory_message = memory.get()[0]
    assert memory_message.role is MessageRole.USER
    assert (memory_message.content or "").startswith("<memory>")
    assert (memory_message.content or "") in condense


def test_convmem_condense_engine_skips_the_rewrite_on_an_empty_session() -> None:
    llm = RecordingLLM()
    memory = ConvMemChatMemoryBuffer.from_defaults(token_limit=800)
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory
    )
    engine.chat("What is the capital of France?")
    assert llm.condense_prompts() == []


@pytest.mark.parametrize(
    "engine_class", [CondensePlusContextChatEngine, ConvMemCondensePlusContextChatEngine]
)
def test_convmem_condense_engine_with_another_memory_behaves_like_the_stock_one(engine_class: Any) -> None:
    llm = RecordingLLM()
    memory = ChatMemoryBuffer.from_defaults(
        token_limit=800,
        chat_history=[
            ChatMessage(role="user", content="Hi"),
            ChatMessage(role="assistant", content="Hello!"),
        ],
    )
    engine = engine_class.from_defaults(retriever=FixedRetriever(), llm=llm, memory=memory)
    engine.chat("Capital of France?")
    (condense,) = llm.condense_prompts()
    assert "user: Hi\nassistant: Hello!" in condense


def memory_too_small_for_its_system_prompt() -> ConvMemChatMemoryBuffer:
    return ConvMemChatMemoryBuffer.from_defaults(
        token_limit=30,
        config=MemoryConfig(system_prompt="You are a helpful travel assistant. " * 10),
        chat_history=[
            ChatMessage(role="user", content="I am planning a trip to France."),
            ChatMessage(role="assistant", content="Lovely!"),
        ],
    )


def test_convmem_condense_engine_answers_when_the_limit_cannot_hold_the_system_prompt() -> None:
    llm = RecordingLLM()
    memory = memory_too_small_for_its_system_prompt()
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory
    )
    assert engine.chat("What is its capital?").response == llm.answer
    (condense,) = llm.condense_prompts()
    assert "I am planning a trip to France." in condense


async def test_convmem_condense_engine_achat_answers_when_the_limit_cannot_hold_the_system_prompt() -> None:
    llm = RecordingLLM()
    engine = ConvMemCondensePlusContextChatEngine.from_defaults(
        retriever=FixedRetriever(), llm=llm, memory=memory_too_small_for_its_system_prompt()
    )
    assert (await engine.achat("What is its capital?")).response == llm.answer
    (condense,) = llm.condense_prompts()
    assert "I am planning a trip to France." in condense
