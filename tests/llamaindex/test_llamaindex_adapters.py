"""LlamaIndex models as convmem's summarizer, fact extractor, embedder and token counter."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from llama_index.core.base.llms.types import (
    ChatMessage,
    CompletionResponse,
    CompletionResponseGen,
    LLMMetadata,
)
from llama_index.core.bridge.pydantic import Field
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import CustomLLM, MockLLM
from llama_index.core.llms.callbacks import llm_completion_callback

from convmem import (
    ConfigError,
    ExtractiveSummarizer,
    HashingEmbedder,
    LLMFactExtractor,
    LLMSummarizer,
    MemoryConfig,
    Recall,
    RuleFactExtractor,
)
from convmem.integration import BaseEmbedder
from llamaindex_convmem import (
    ConvMemChatMemoryBuffer,
    ConvMemMemoryBlock,
    LlamaIndexEmbedder,
    TokenizerFnCounter,
    acomplete_fn_from_llamaindex,
    complete_fn_from_llamaindex,
)


class ScriptedLLM(CustomLLM):
    """Answers every prompt with `answer`; keeps the prompts."""

    answer: str = "Alice lives in Paris and is planning a trip to Rome."
    prompts: list[str] = Field(default_factory=list)

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata()

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        self.prompts.append(prompt)
        return CompletionResponse(text=self.answer)

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        raise NotImplementedError


def test_complete_fn_returns_the_llm_text() -> None:
    complete = complete_fn_from_llamaindex(MockLLM())
    assert complete("echo me") == "echo me"


async def test_acomplete_fn_awaits_the_llm() -> None:
    complete = acomplete_fn_from_llamaindex(MockLLM())
    assert await complete("echo me") == "echo me"


def test_complete_fn_refuses_something_that_is_not_an_llm() -> None:
    with pytest.raises(ConfigError, match="llama_index LLM"):
        complete_fn_from_llamaindex("gpt-4o")  # type: ignore[arg-type]


def test_an_llm_given_as_summarizer_and_fact_extractor_drives_convmem() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(summarizer=MockLLM(), fact_extractor=MockLLM())
    assert isinstance(buffer.memory.summarizer, LLMSummarizer)
    assert isinstance(buffer.memory.fact_extractor, LLMFactExtractor)


def test_the_llm_summary_of_evicted_turns_reaches_get() -> None:
    llm = ScriptedLLM()
    buffer = ConvMemChatMemoryBuffer.from_defaults(
        token_limit=1000, summarizer=llm, config=MemoryConfig(keep_recent_turns=1, summary_trigger="never")
    )
    buffer.put_messages(
        [
            ChatMessage(role="user", content="I am planning a trip to Rome next month."),
            ChatMessage(role="assistant", content="Rome is lovely in spring."),
            ChatMessage(role="user", content="What should I pack?"),
            ChatMessage(role="assistant", content="Light clothes and good shoes."),
        ]
    )
    assert buffer.memory.summarize_now()
    assert "trip to Rome" in llm.prompts[-1]
    memory_message = buffer.get()[0]
    assert memory_message.role.value == "user"
    assert (memory_message.content or "").startswith("<memory>")
    assert llm.answer in (memory_message.content or "")


async def test_the_memory_block_takes_an_llm_summarizer_too() -> None:
    block = ConvMemMemoryBlock(summarizer=ScriptedLLM(), session_id="s")
    assert isinstance(block.memory().summarizer, LLMSummarizer)


def test_an_embedding_model_turns_on_recall_with_the_core_adapter() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(embedder=MockEmbedding(embed_dim=8))
    recall = buffer.memory.recall
    assert recall is not None
    assert isinstance(recall.embedder, LlamaIndexEmbedder)


def test_embedder_vectors_are_normalized_rows() -> None:
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=8))
    vectors = embedder.embed_documents(["a", "b"])
    assert vectors.shape == (2, 8)
    assert embedder.dimension == 8
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0)
    assert embedder.name.startswith("llamaindex:MockEmbedding")


async def test_embedder_uses_the_async_api() -> None:
    embedder = LlamaIndexEmbedder(MockEmbedding(embed_dim=16))
    assert (await embedder.aembed_query("x")).shape == (16,)
    assert (await embedder.aembed_documents(["x", "y"])).shape == (2, 16)


def test_embedder_refuses_an_object_without_embedding_methods() -> None:
    with pytest.raises(ConfigError, match="BaseEmbedding"):
        LlamaIndexEmbedder(object())


def test_embedder_and_recall_together_are_refused() -> None:
    with pytest.raises(ConfigError, match="not both"):
        ConvMemChatMemoryBuffer.from_defaults(embedder=MockEmbedding(embed_dim=8), recall=object())


def test_llamaindex_models_and_convmem_components_are_taken() -> None:
    summarized = ConvMemChatMemoryBuffer.from_defaults(
        summarizer=MockLLM(), fact_extractor=RuleFactExtractor()
    )
    assert isinstance(summarized.memory.summarizer, LLMSummarizer)
    counted = ConvMemChatMemoryBuffer.from_defaults(summarizer=ExtractiveSummarizer(summarized.token_counter))
    assert isinstance(counted.memory.summarizer, ExtractiveSummarizer)
    recall = Recall(HashingEmbedder())
    assert ConvMemChatMemoryBuffer.from_defaults(recall=recall).memory.recall is recall
    assert ConvMemChatMemoryBuffer.from_defaults(embedder=HashingEmbedder()).memory.recall is not None


def test_a_completion_function_as_summarizer_is_refused_pointing_to_the_llm_or_llm_summarizer() -> None:
    complete = complete_fn_from_llamaindex(MockLLM())
    with pytest.raises(ConfigError, match=r"summarizer=llm\), or .*LLMSummarizer\(complete\)"):
        ConvMemChatMemoryBuffer.from_defaults(summarizer=complete)
    with pytest.raises(ConfigError, match=r"LLMFactExtractor\(complete\)"):
        ConvMemChatMemoryBuffer.from_defaults(fact_extractor=complete)


def test_an_embedding_model_as_summarizer_is_refused_pointing_to_embedder() -> None:
    with pytest.raises(ConfigError, match=r"got MockEmbedding.*embedder="):
        ConvMemChatMemoryBuffer.from_defaults(summarizer=MockEmbedding(embed_dim=8))


def test_a_model_name_as_fact_extractor_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"fact_extractor must be a llama_index LLM.*'gpt-4o-mini'"):
        ConvMemChatMemoryBuffer.from_defaults(fact_extractor="gpt-4o-mini")


def test_an_llm_as_embedder_is_refused_pointing_to_summarizer() -> None:
    with pytest.raises(ConfigError, match=r"embedder must be .*got MockLLM.*summarizer="):
        ConvMemChatMemoryBuffer.from_defaults(embedder=MockLLM())


def test_something_other_than_a_recall_as_recall_is_refused() -> None:
    with pytest.raises(ConfigError, match="recall must be a convmem Recall, got str 'x'"):
        ConvMemChatMemoryBuffer.from_defaults(recall="x")
    with pytest.raises(ConfigError, match="pass it as embedder="):
        ConvMemChatMemoryBuffer.from_defaults(recall=MockEmbedding(embed_dim=8))


def test_something_other_than_an_llm_as_from_defaults_llm_is_refused() -> None:
    with pytest.raises(ConfigError, match="llm must be a llama_index LLM"):
        ConvMemChatMemoryBuffer.from_defaults(llm="gpt-4o-mini")  # type: ignore[arg-type]


def test_the_memory_block_refuses_what_the_buffer_refuses() -> None:
    with pytest.raises(ValueError, match="LLMSummarizer"):
        ConvMemMemoryBlock(summarizer=complete_fn_from_llamaindex(MockLLM()))
    with pytest.raises(ValueError, match="token_limit must be an int"):
        ConvMemMemoryBlock(token_limit=True)


def test_memory_kwargs_the_core_does_not_know_are_refused() -> None:
    with pytest.raises(ConfigError, match="does not accept"):
        ConvMemChatMemoryBuffer.from_defaults(memory_kwargs={"turbo": True})


def test_tokenizer_fn_counter_charges_a_message_its_text_alone_as_chat_memory_buffer_does() -> None:
    counter = TokenizerFnCounter(list)
    assert counter.count_text("abc") == 3
    assert counter.name.startswith("tokenizer_fn:")
    buffer = ConvMemChatMemoryBuffer.from_defaults(counter=counter)
    stored = buffer.memory.add("user", "abcd")
    assert stored.token_count == 4


def test_tokenizer_fn_counter_counts_tool_calls_with_the_function() -> None:
    counter = TokenizerFnCounter(str.split)
    buffer = ConvMemChatMemoryBuffer.from_defaults(counter=counter)
    stored = buffer.memory.add(
        "assistant", "looking it up", tool_calls=[{"id": "c1", "name": "search", "args": {"q": "x"}}]
    )
    assert stored.token_count is not None and stored.token_count > 3


def test_tokenizer_fn_counter_refuses_a_non_callable() -> None:
    with pytest.raises(ConfigError, match="tokenizer_fn must be a callable"):
        TokenizerFnCounter("cl100k")  # type: ignore[arg-type]


def test_an_embedder_is_not_asked_for_its_dimension_when_a_buffer_is_made() -> None:
    """A remote model learns its dimension by embedding: making the buffer calls nothing."""
    calls: list[list[str]] = []

    class Remote(BaseEmbedder):
        @property
        def name(self) -> str:
            return "remote-v1"

        def _embed(self, texts: Sequence[str], *, query: bool) -> np.ndarray:
            calls.append(list(texts))
            return np.ones((len(texts), 8), dtype=np.float32)

    ConvMemChatMemoryBuffer.from_defaults(embedder=Remote(), token_limit=1000)
    assert calls == []
