"""The behaviours LlamaIndex's condensing chat engines expect of their memory, checked on
ChatMemoryBuffer and on ConvMemChatMemoryBuffer side by side.

Each test states one contract from llama-index-core's tests/chat_engine/
test_condense_question.py and test_condense_plus_context.py, in our own words and
code, with real engines, a real query engine and retriever, and MockLLM where a
model is called. ``kind`` picks the memory as in test_llamaindex_upstream_contracts.py.
"""

from __future__ import annotations

import re
import threading
from collections.abc import AsyncGenerator, Generator
from typing import Any

import pytest
from llama_index.core import MockEmbedding
from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.llms.types import ChatMessage, CompletionResponseGen, MessageRole
from llama_index.core.base.response.schema import (
    RESPONSE_TYPE,
    AsyncStreamingResponse,
    Response,
    StreamingResponse,
)
from llama_index.core.chat_engine import CondensePlusContextChatEngine, CondenseQuestionChatEngine
from llama_index.core.chat_engine.types import StreamingAgentChatResponse
from llama_index.core.indices import VectorStoreIndex
from llama_index.core.llms.mock import MockLLM
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.prompts.mixin import PromptDictType, PromptMixinType
from llama_index.core.schema import Document, QueryBundle
from llama_index.core.utils import get_tokenizer
from llamaindex_upstream import Deviation, mark_deviation, seen_on
from pydantic import PrivateAttr

from llamaindex_convmem import ConvMemChatMemoryBuffer, ConvMemCondensePlusContextChatEngine

KINDS = ["native", "convmem", "convmem+tokenizer_fn"]

EXPLICIT_EMPTY_HISTORY = (
    "llama-index-core 0.14.25's CondenseQuestionChatEngine treats chat_history=[] like no "
    "argument and condenses with the memory's history, whatever the memory; the upstream "
    "contract targets a later release"
)
EVERY_KIND = tuple(KINDS)
# Seen on 0.14.25 (strict there); on another release the contract may hold.
DEVIATIONS: dict[str, Deviation] = {
    "test_condense_question_an_explicit_empty_history_sends_the_message_alone": Deviation(
        EVERY_KIND, EXPLICIT_EMPTY_HISTORY, certain=seen_on("0.14.25")
    ),
}


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    mark_deviation(request, DEVIATIONS, request.param)
    return str(request.param)


def make(kind: str, **kwargs: Any) -> Any:
    if kind == "native":
        return ChatMemoryBuffer.from_defaults(**kwargs)
    if kind == "convmem+tokenizer_fn":
        kwargs.setdefault("tokenizer_fn", get_tokenizer())
    return ConvMemChatMemoryBuffer.from_defaults(**kwargs)


def roles(messages: list[ChatMessage]) -> list[MessageRole]:
    return [m.role for m in messages]


class EchoQueryEngine(BaseQueryEngine):
    """Answers with the question it was asked (streamed word by word when asked to)
    and remembers every question."""

    def __init__(self, streaming: bool = False) -> None:
        super().__init__(callback_manager=None)
        self.streaming = streaming
        self.questions: list[str] = []

    def _query(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        self.questions.append(query_bundle.query_str)
        if not self.streaming:
            return Response(response=query_bundle.query_str)

        def words() -> Generator[str, None, None]:
            yield from re.findall(r"\S+\s*", query_bundle.query_str)

        return StreamingResponse(response_gen=words())

    async def _aquery(self, query_bundle: QueryBundle) -> RESPONSE_TYPE:
        self.questions.append(query_bundle.query_str)
        if not self.streaming:
            return Response(response=query_bundle.query_str)

        async def words() -> AsyncGenerator[str, None]:
            for word in re.findall(r"\S+\s*", query_bundle.query_str):
                yield word

        return AsyncStreamingResponse(response_gen=words())

    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts_dict: PromptDictType) -> None:
        pass

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}


def old_exchange() -> list[ChatMessage]:
    # A new list each time: ChatMemoryBuffer keeps (and appends to) the list it is given.
    return [
        ChatMessage(role=MessageRole.USER, content="old question"),
        ChatMessage(role=MessageRole.ASSISTANT, content="old answer"),
    ]


def condense_question(kind: str, streaming: bool = False, **memory: Any) -> CondenseQuestionChatEngine:
    return CondenseQuestionChatEngine.from_defaults(
        query_engine=EchoQueryEngine(streaming), llm=MockLLM(), memory=make(kind, **memory)
    )


def questions(engine: CondenseQuestionChatEngine) -> list[str]:
    query_engine = engine._query_engine
    assert isinstance(query_engine, EchoQueryEngine)
    return query_engine.questions


# -- tests/chat_engine/test_condense_question.py -----------------------------------------------


def test_condense_question_asks_the_first_message_as_is_then_condenses_and_reset_forgets(kind: str) -> None:
    engine = condense_question(kind)
    assert str(engine.chat("Test message 1")) == "Test message 1"
    engine.chat("Test message 2")
    condensed = questions(engine)[-1]
    assert "user: Test message 1\nassistant: Test message 1" in condensed
    assert "Test message 2" in condensed
    engine.reset()
    assert str(engine.chat("Test message 3")) == "Test message 3"
    assert [m.content for m in engine.chat_history] == ["Test message 3", "Test message 3"]


def test_condense_question_condenses_with_an_initial_history(kind: str) -> None:
    engine = condense_question(kind, chat_history=old_exchange())
    engine.chat("new question")
    assert "user: old question\nassistant: old answer" in questions(engine)[-1]
    assert "new question" in questions(engine)[-1]


async def test_condense_question_achat_condenses_with_the_memory(kind: str) -> None:
    engine = condense_question(kind, chat_history=old_exchange())
    await engine.achat("fresh question")
    assert "old question" in questions(engine)[-1]
    assert roles(await engine._memory.aget_all()) == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]


def test_condense_question_an_explicit_empty_history_sends_the_message_alone(kind: str) -> None:
    engine = condense_question(kind, chat_history=old_exchange())
    engine.chat("fresh question", chat_history=[])
    assert questions(engine)[-1] == "fresh question"


def test_condense_question_stream_closed_early_still_writes_the_whole_turn(kind: str) -> None:
    engine = condense_question(kind, streaming=True)
    response = engine.stream_chat("Hello there wide World!")
    tokens = response.response_gen
    for index, _ in enumerate(tokens):
        if index >= 1:
            break
    tokens.close()
    assert roles(engine.chat_history) == [MessageRole.USER, MessageRole.ASSISTANT]
    assert engine.chat_history[1].content == "Hello there wide World!"


async def test_condense_question_astream_writes_the_turn(kind: str) -> None:
    engine = condense_question(kind, streaming=True)
    response = await engine.astream_chat("Hello there World!")
    answer = "".join([token async for token in response.async_response_gen()])
    assert answer == "Hello there World!"
    assert roles(await engine._memory.aget_all()) == [MessageRole.USER, MessageRole.ASSISTANT]


# -- tests/chat_engine/test_condense_plus_context.py ----------------------------------------

SYSTEM_PROMPT = "Talk like a pirate."
ENGINES = {"stock": CondensePlusContextChatEngine, "convmem": ConvMemCondensePlusContextChatEngine}


class GatedMockLLM(MockLLM):
    """MockLLM whose streamed answer waits until the test opens the gate, so what the
    memory holds before the answer arrives can be checked without racing the engine's
    writer thread."""

    _gate: threading.Event = PrivateAttr(default_factory=threading.Event)

    def open_gate(self) -> None:
        self._gate.set()

    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        tokens = super().stream_complete(prompt, formatted=formatted, **kwargs)

        def gated() -> CompletionResponseGen:
            # Bounded, so a failing test cannot leave the writer thread waiting forever.
            self._gate.wait(timeout=30)
            yield from tokens

        return gated()


def condense_plus_context(
    kind: str, engine: str = "stock", llm: MockLLM | None = None
) -> CondensePlusContextChatEngine:
    index = VectorStoreIndex.from_documents([Document.example()], embed_model=MockEmbedding(embed_dim=3))
    return ENGINES[engine].from_defaults(
        index.as_retriever(), llm=llm or MockLLM(), memory=make(kind), system_prompt=SYSTEM_PROMPT
    )


@pytest.mark.parametrize("engine", list(ENGINES))
def test_condense_plus_context_chat_sends_system_prompt_history_and_message(kind: str, engine: str) -> None:
    chat = condense_plus_context(kind, engine)
    first = str(chat.chat("Hello World!"))
    assert SYSTEM_PROMPT in first
    assert "Hello World!" in first
    assert len(chat.chat_history) == 2
    second = str(chat.chat("What is the capital of the moon?"))
    assert SYSTEM_PROMPT in second
    assert "Hello World!" in second
    assert "What is the capital of the moon?" in second
    assert len(chat.chat_history) == 4


@pytest.mark.parametrize("engine", list(ENGINES))
async def test_condense_plus_context_achat_sends_the_history(kind: str, engine: str) -> None:
    chat = condense_plus_context(kind, engine)
    await chat.achat("Hello World!")
    second = str(await chat.achat("What is the capital of the moon?"))
    assert "Hello World!" in second
    assert SYSTEM_PROMPT in second
    assert len(chat.chat_history) == 4


def read_stream(response: StreamingAgentChatResponse) -> tuple[int, str]:
    chunks = list(response.response_gen)
    return len(chunks), "".join(chunks)


def test_condense_plus_context_stream_chat_streams_the_answer_it_stores(kind: str) -> None:
    chat = condense_plus_context(kind)
    count, text = read_stream(chat.stream_chat("Hello World!"))
    assert count > 1
    assert text.rstrip() == chat.chat_history[-1].content
    response = chat.stream_chat("What is the capital of the moon?")
    count, text = read_stream(response)
    assert count > 1
    assert text.rstrip() == str(response)
    assert "Hello World!" in text
    assert len(chat.chat_history) == 4


async def test_condense_plus_context_astream_chat_streams_the_answer_it_stores(kind: str) -> None:
    chat = condense_plus_context(kind)
    await (await chat.astream_chat("Hello World!")).aprint_response_stream()
    response = await chat.astream_chat("What is the capital of the moon?")
    chunks = [chunk async for chunk in response.async_response_gen()]
    assert len(chunks) > 1
    assert "".join(chunks).rstrip() == str(response)
    assert "Hello World!" in str(response)
    assert len(chat.chat_history) == 4


def test_condense_plus_context_stream_read_partly_keeps_the_question_and_then_the_answer(kind: str) -> None:
    llm = GatedMockLLM()
    chat = condense_plus_context(kind, llm=llm)
    response = chat.stream_chat("Hello World!")
    assert roles(chat.chat_history) == [MessageRole.USER]
    assert "Hello World!" in str(chat.chat_history[0].content)
    llm.open_gate()
    tokens = response.response_gen
    next(tokens)
    tokens.close()  # waits for the thread that writes the answer
    writer = response.write_response_to_history_thread
    if writer is not None:
        writer.join()
    assert response.is_done
    assert roles(chat.chat_history) == [MessageRole.USER, MessageRole.ASSISTANT]


async def test_condense_plus_context_astream_read_partly_keeps_the_question_and_then_the_answer(
    kind: str,
) -> None:
    chat = condense_plus_context(kind)
    response = await chat.astream_chat("Hello World!")
    assert roles(chat.chat_history) == [MessageRole.USER]
    async for _ in response.async_response_gen():
        break
    assert response.awrite_response_to_history_task is not None
    await response.awrite_response_to_history_task
    assert roles(chat.chat_history) == [MessageRole.USER, MessageRole.ASSISTANT]
