"""The buffer's sessions and the memory block's come from convmem's bounded registry."""

from __future__ import annotations

import pytest

from convmem import ConfigError, ConversationMemory
from convmem._sessions import DEFAULT_MAX_CACHED_SESSIONS
from llamaindex_convmem import ConvMemChatMemoryBuffer, ConvMemMemoryBlock


def spy_on_close(memory: ConversationMemory) -> list[str]:
    closed: list[str] = []
    memory.close = lambda: closed.append(memory.session_id)  # type: ignore[method-assign]
    return closed


def test_buffers_for_other_sessions_share_one_bounded_set_of_memories() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="first")
    first = buffer.memory
    closed = spy_on_close(first)
    for index in range(DEFAULT_MAX_CACHED_SESSIONS):
        assert buffer.for_session(f"s{index}").memory is not None
    assert closed == ["first"]
    assert buffer.memory is not first


def test_a_memory_block_keeps_a_bounded_number_of_sessions() -> None:
    block = ConvMemMemoryBlock()
    first = block.memory("first")
    closed = spy_on_close(first)
    for index in range(DEFAULT_MAX_CACHED_SESSIONS):
        block.memory(f"s{index}")
    assert closed == ["first"]
    assert block.memory("first") is not first


def test_the_buffers_user_owns_every_session_it_serves() -> None:
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="a", user_id="ana")
    assert buffer.for_session("b").memory.user_id == "ana"


def test_a_memory_kwarg_that_the_core_sets_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"memory_kwargs may not set \['user_id'\]"):
        ConvMemChatMemoryBuffer.from_defaults(memory_kwargs={"user_id": "ana"})
