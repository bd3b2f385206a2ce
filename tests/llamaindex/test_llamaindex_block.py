"""ConvMemMemoryBlock inside llama_index.core.memory.Memory: facts, summary and recall, per session."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory

from convmem import ConfigError, MemoryConfig, TiktokenCounter
from llamaindex_convmem import ConvMemMemoryBlock

# Each LlamaIndex Memory opens an aiosqlite engine: closed on the loop that opened it.
pytestmark = pytest.mark.usefixtures("llamaindex_engines")


def exchange(name: str, city: str, index: int) -> list[ChatMessage]:
    return [
        ChatMessage(role="user", content=f"My name is {name} and I live in {city}. Note number {index}."),
        ChatMessage(role="assistant", content=f"Noted, {name}: entry {index}."),
    ]


def small_memory(session_id: str, block: ConvMemMemoryBlock) -> Memory:
    # A small queue so that Memory flushes older turns to its blocks.
    return Memory.from_defaults(session_id=session_id, token_limit=150, memory_blocks=[block])


def block_text(messages: list[ChatMessage]) -> str:
    return messages[0].content or "" if messages and messages[0].role.value == "system" else ""


async def test_turns_flushed_by_memory_come_back_through_the_block() -> None:
    block = ConvMemMemoryBlock(token_limit=400)
    memory = small_memory("alice", block)
    for index in range(8):
        await memory.aput_messages(exchange("Alice", "Paris", index))
    text = block_text(await memory.aget())
    assert "<conversation_memory>" in text
    assert "Alice" in text
    assert block.memory("alice").messages(), "flushed messages reach the block's session"


async def test_one_block_serving_two_sessions_never_mixes_them() -> None:
    block = ConvMemMemoryBlock(token_limit=400)
    alice, bob = small_memory("alice", block), small_memory("bob", block)
    for index in range(8):
        await alice.aput_messages(exchange("Alice", "Paris", index))
        await bob.aput_messages(exchange("Bob", "Oslo", index))
    alice_text, bob_text = block_text(await alice.aget()), block_text(await bob.aget())
    assert "Alice" in alice_text and "Paris" in alice_text
    assert "Bob" not in alice_text and "Oslo" not in alice_text
    assert "Bob" in bob_text and "Oslo" in bob_text
    assert "Alice" not in bob_text and "Paris" not in bob_text


async def test_reading_for_one_session_leaves_nothing_behind_for_the_next() -> None:
    block = ConvMemMemoryBlock(token_limit=400)
    alice = small_memory("alice", block)
    for index in range(8):
        await alice.aput_messages(exchange("Alice", "Paris", index))
    before = block.model_dump()
    await alice.aget(input="Where do I live?")
    assert block.model_dump() == before
    assert await block.aget([ChatMessage(role="user", content="hi")], session_id="carol") == ""


async def test_the_session_tag_memory_adds_is_not_stored() -> None:
    block = ConvMemMemoryBlock(token_limit=400)
    await block.aput(exchange("Alice", "Paris", 1), session_id="alice")
    stored = block.memory("alice").messages()
    assert [m.metadata for m in stored] == [{}, {}]


async def test_block_content_stays_within_its_token_limit() -> None:
    block = ConvMemMemoryBlock(token_limit=120)
    for index in range(30):
        await block.aput(exchange("Alice", "Paris", index), session_id="alice")
    text = await block.aget([ChatMessage(role="user", content="Where do I live?")], session_id="alice")
    assert text
    assert TiktokenCounter().count_text(text) <= 120


async def test_a_call_without_any_session_is_refused_clearly() -> None:
    block = ConvMemMemoryBlock()
    with pytest.raises(ConfigError, match="needs a session"):
        await block.aget([ChatMessage(role="user", content="hi")])


async def test_a_default_session_serves_direct_calls() -> None:
    block = ConvMemMemoryBlock(session_id="alice")
    await block.aput(exchange("Alice", "Paris", 1))
    assert "Alice" in await block.aget([ChatMessage(role="user", content="Who am I?")])


async def test_truncate_drops_whole_lines_from_the_end() -> None:
    block = ConvMemMemoryBlock()
    content = "Known facts about the user:\nname: Alice\ncity: Paris\nlikes: tea"
    truncated = await block.atruncate(content, 3)
    assert truncated is not None
    assert content.startswith(truncated)
    assert len(truncated) < len(content)
    assert await block.atruncate(content, 10_000) is None


async def test_truncate_takes_what_memory_passes_for_a_block_with_nothing_to_say() -> None:
    block = ConvMemMemoryBlock()
    assert await block.atruncate([], 5) is None


async def test_memory_over_its_limit_reads_through_a_truncatable_block_that_has_no_content() -> None:
    block = ConvMemMemoryBlock(token_limit=200, priority=1)
    memory = Memory.from_defaults(session_id="alice", token_limit=50, memory_blocks=[block])
    # Memory never flushes its newest message, so the history stays over the limit.
    question = ChatMessage(role="user", content="word " * 200)
    await memory.aput(question)
    assert await memory.aget() == [question]


async def test_a_legacy_function_result_flushed_apart_from_its_call_is_stored() -> None:
    block = ConvMemMemoryBlock()
    call = ChatMessage(role="assistant", content="", additional_kwargs={"function_call": {"name": "now"}})
    result = ChatMessage(role="function", content="noon", additional_kwargs={"name": "now"})
    await block.aput([ChatMessage(role="user", content="What time is it?"), call], session_id="alice")
    await block.aput([result], session_id="alice")
    stored_call, stored_result = block.memory("alice").messages()[1:]
    assert stored_result.tool_call_id == stored_call.tool_calls[0]["id"]


async def test_sessions_persist_in_a_sqlite_file(tmp_path: Path) -> None:
    path = tmp_path / "blocks.db"
    await ConvMemMemoryBlock(path=path).aput(exchange("Alice", "Paris", 1), session_id="alice")
    reopened = ConvMemMemoryBlock(path=path)
    assert "Alice" in await reopened.aget([ChatMessage(role="user", content="hi")], session_id="alice")


def test_the_sync_memory_api_works_with_the_block() -> None:
    block = ConvMemMemoryBlock(token_limit=400)
    memory = small_memory("alice", block)
    for index in range(8):
        memory.put_messages(exchange("Alice", "Paris", index))
    assert "Alice" in block_text(memory.get())


def test_the_block_defaults_to_a_short_bridging_window() -> None:
    assert ConvMemMemoryBlock(token_limit=500).memory_config == MemoryConfig(keep_recent_turns=2, budget=500)
    custom = ConvMemMemoryBlock.model_validate({"memory_config": {"keep_recent_turns": 4}})
    assert custom.memory_config.keep_recent_turns == 4


async def test_messages_memory_flushes_are_not_modified() -> None:
    block = ConvMemMemoryBlock()
    messages = exchange("Alice", "Paris", 1)
    await block.aput(messages, from_short_term_memory=True, session_id="alice")
    assert [m.additional_kwargs for m in messages] == [{}, {}]
    assert len(block.memory("alice").messages()) == 2


async def test_a_block_that_refuses_short_term_memory_stores_nothing_from_it() -> None:
    block = ConvMemMemoryBlock(accept_short_term_memory=False)
    await block.aput(exchange("Alice", "Paris", 1), from_short_term_memory=True, session_id="alice")
    assert block.memory("alice").messages() == []
