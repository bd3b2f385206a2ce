"""LangChain models as convmem's complete callable, token counter and embedder."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.language_models import FakeListLLM, GenericFakeChatModel
from langchain_core.messages import AIMessage

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    LLMFactExtractor,
    LLMSummarizer,
    MemoryConfig,
    Message,
    TiktokenCounter,
    TokenCounter,
)
from langchain_convmem import (
    ChatModelTokenCounter,
    ConvMemChatMessageHistory,
    ConvMemSessions,
    LangChainEmbedder,
    complete_fn_from_langchain,
)

TIKTOKEN = TiktokenCounter()


def chat_model(*answers: str | AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(
        messages=itertools.cycle(answers or ("ok",)), custom_get_token_ids=TIKTOKEN.encode
    )


def test_a_chat_model_becomes_a_complete_callable_returning_text() -> None:
    complete = complete_fn_from_langchain(chat_model("The summary."))
    assert complete("Summarize this.") == "The summary."


def test_only_text_blocks_of_the_reply_are_returned() -> None:
    reply = AIMessage(
        content=[{"type": "reasoning", "reasoning": "hmm"}, {"type": "text", "text": "Answer."}]
    )
    assert complete_fn_from_langchain(chat_model(reply))("q") == "Answer."


def test_an_llm_becomes_a_complete_callable() -> None:
    assert complete_fn_from_langchain(FakeListLLM(responses=["plain text"]))("q") == "plain text"


async def test_the_async_variant_awaits_the_model() -> None:
    complete = complete_fn_from_langchain(chat_model("async answer"), asynchronous=True)
    assert await complete("q") == "async answer"  # type: ignore[misc]


async def test_the_sync_callable_also_has_an_async_method() -> None:
    complete = complete_fn_from_langchain(chat_model("via acomplete"))
    assert await complete.acomplete("q") == "via acomplete"  # type: ignore[union-attr]


def test_complete_needs_a_langchain_model() -> None:
    with pytest.raises(ConfigError, match="BaseChatModel"):
        complete_fn_from_langchain(lambda prompt: prompt)  # type: ignore[arg-type]


def test_the_llm_summarizer_runs_on_a_chat_model() -> None:
    summary = "Ana lives in Lisbon and has a cat named Miso."
    summarizer = LLMSummarizer(complete_fn_from_langchain(chat_model(summary)))
    memory = ConversationMemory(
        "s",
        config=MemoryConfig(keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1),
        summarizer=summarizer,
    )
    for index in range(5):
        memory.add_turn(f"Tell me fact {index}.", f"Fact {index} is interesting.")
    assert memory.summary().text == summary


def test_the_llm_fact_extractor_runs_on_a_chat_model() -> None:
    extractor = LLMFactExtractor(
        complete_fn_from_langchain(chat_model('[{"key": "city", "value": "Lisbon", "seq": 1}]'))
    )
    memory = ConversationMemory("s", fact_extractor=extractor)
    memory.add_turn("I live in Lisbon.", "Nice city!")
    assert [(f.key, f.value) for f in memory.facts()] == [("city", "Lisbon")]


def test_the_token_counter_counts_text_with_the_models_tokenizer() -> None:
    counter = ChatModelTokenCounter(chat_model())
    text = "Token counting with the model's own tokenizer."
    assert counter.count_text(text) == TIKTOKEN.count_text(text)
    assert isinstance(counter, TokenCounter)
    assert counter.name.startswith("langchain:")


def test_a_message_costs_its_text_plus_the_models_framing() -> None:
    counter = ChatModelTokenCounter(chat_model())
    message = Message.create("user", "How many tokens is this?")
    assert counter.count_message(message) > counter.count_text("How many tokens is this?")


def test_media_parts_cost_a_fixed_amount() -> None:
    counter = ChatModelTokenCounter(chat_model(), media_part_tokens=85)
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "QUJD" * 50_000}}
    text_only = Message.create("user", [{"type": "text", "text": "What is this?"}])
    with_image = Message.create("user", [{"type": "text", "text": "What is this?"}, image])
    assert counter.count_message(with_image) == counter.count_message(text_only) + 85


def test_a_memory_counts_with_the_models_counter() -> None:
    counter = ChatModelTokenCounter(chat_model())
    memory = ConversationMemory("s", counter=counter)
    stored = memory.add("user", "Counted once, on write.")
    assert stored.token_count == counter.count_message(stored)
    assert memory.build_context(budget=200).token_count <= 200


def test_the_embedder_wraps_langchain_embeddings() -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=16))
    vectors = embedder.embed_documents(["one", "two", "three"])
    assert vectors.shape == (3, 16)
    assert embedder.embed_query("one").shape == (16,)
    assert embedder.dimension == 16
    assert embedder.name.startswith("langchain:DeterministicFakeEmbedding")


def test_the_embedder_returns_unit_length_rows() -> None:
    vectors = LangChainEmbedder(DeterministicFakeEmbedding(size=24)).embed_documents(["one", "two"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


async def test_the_embedder_has_async_twins() -> None:
    embedder = LangChainEmbedder(DeterministicFakeEmbedding(size=8))
    assert (await embedder.aembed_documents(["a", "b"])).shape == (2, 8)
    np.testing.assert_allclose(await embedder.aembed_query("a"), embedder.embed_query("a"), rtol=1e-6)


def test_the_embedder_refuses_an_object_without_embedding_methods() -> None:
    with pytest.raises(ConfigError, match="embed_documents"):
        LangChainEmbedder(object())


def test_sessions_take_a_langchain_embeddings_as_their_embedder() -> None:
    sessions = ConvMemSessions(embedder=DeterministicFakeEmbedding(size=8))
    memory = sessions.memory("s")
    memory.add("user", "My dog is called Duoduo.")
    assert memory.recall is not None and isinstance(memory.recall.embedder, LangChainEmbedder)
    assert memory.recall.embedder.embed_query("dog").shape == (8,)


def test_a_history_takes_a_langchain_embeddings_as_its_embedder() -> None:
    history = ConvMemChatMessageHistory("s", embedder=DeterministicFakeEmbedding(size=8))
    assert history.memory.recall is not None
    assert isinstance(history.memory.recall.embedder, LangChainEmbedder)


def test_an_embedder_of_no_known_kind_is_refused_where_memories_are_built() -> None:
    with pytest.raises(ConfigError, match=r"embedder must be a convmem Embedder .* got str"):
        ConvMemSessions(embedder="all-MiniLM-L6-v2")
    with pytest.raises(ConfigError, match=r"embedder must be a convmem Embedder .* got object"):
        ConvMemChatMessageHistory("s", embedder=object())


def test_an_embedder_that_forwards_its_methods_is_taken_where_memories_are_built() -> None:
    """A lazy-loading or instrumenting wrapper (``__getattr__``), as the core takes it."""

    class Forwarding:
        def __init__(self, inner: object) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> object:
            return getattr(self._inner, name)

    embedder = Forwarding(HashingEmbedder())
    history = ConvMemChatMessageHistory("s", embedder=embedder)  # type: ignore[arg-type]
    assert history.memory.recall is not None and history.memory.recall.embedder is embedder
    ConvMemSessions(embedder=embedder)  # type: ignore[arg-type]
