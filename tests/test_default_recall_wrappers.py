"""The framework wrappers' defaults recall by words too: no embedder, no model, no option."""

from __future__ import annotations

import pytest

from convmem import ConversationMemory, MemoryConfig, Recall

pytest.importorskip("langchain_core")
pytest.importorskip("llama_index.core")

from langchain_convmem import ConvMemChatMessageHistory, ConvMemSessions
from llamaindex_convmem import ConvMemChatMemoryBuffer, ConvMemMemoryBlock


def is_lexical(memory: ConversationMemory) -> bool:
    return isinstance(memory.recall, Recall) and memory.recall.embedder is None


def test_a_langchain_history_with_no_options_recalls_by_words() -> None:
    history = ConvMemChatMessageHistory(config=MemoryConfig(keep_recent_turns=2))
    memory = history.memory
    memory.add_turn("My corgi is called Duoduo.", "Lovely name!")
    for i in range(6):
        memory.add_turn(f"Question {i} about the database migration.", f"Answer {i}: it runs.")
    assert is_lexical(memory)
    context = history.build_context("What is my corgi called?")
    assert any("Duoduo" in item.text for item in context.recalled)


def test_langchain_sessions_with_no_options_recall_by_words() -> None:
    assert is_lexical(ConvMemSessions().memory("s1"))


def test_a_llamaindex_buffer_from_defaults_recalls_by_words() -> None:
    from llama_index.core.llms import ChatMessage

    buffer = ConvMemChatMemoryBuffer.from_defaults(token_limit=400, config=MemoryConfig(keep_recent_turns=2))
    buffer.put(ChatMessage(role="user", content="My corgi is called Duoduo."))
    buffer.put(ChatMessage(role="assistant", content="Lovely name!"))
    for i in range(6):
        buffer.put(ChatMessage(role="user", content=f"Question {i} about the database migration."))
        buffer.put(ChatMessage(role="assistant", content=f"Answer {i}: it runs."))
    assert is_lexical(buffer.memory)
    messages = buffer.get(input="What is my corgi called?")
    assert "Duoduo" in str(messages[0].content)


def test_a_llamaindex_memory_block_with_no_options_recalls_by_words() -> None:
    assert is_lexical(ConvMemMemoryBlock().memory("s1"))


def test_recall_switched_off_in_the_config_reaches_the_wrappers() -> None:
    config = MemoryConfig(recall_earlier_turns=False)
    assert ConvMemChatMessageHistory(config=config).memory.recall is None
    assert ConvMemChatMemoryBuffer.from_defaults(config=config).memory.recall is None
