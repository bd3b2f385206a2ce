"""The buffer's sessions and the memory block's come from convmem's bounded registry."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore

from convmem import ConfigError, ConversationMemory, InMemoryStore, SQLiteStore
from convmem._errors import SessionOwnerError
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


def test_a_buffer_of_another_user_on_the_same_key_is_refused(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "chat.db")
    alice = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="1", store=store, user_id="alice")
    alice.put(ChatMessage(role="user", content="alice's secret"))
    bob = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="1", store=store, user_id="bob")
    with pytest.raises(SessionOwnerError, match="'1' belongs to another user; user 'bob'"):
        bob.get_all()
    with pytest.raises(SessionOwnerError):
        bob.put(ChatMessage(role="user", content="bob's question"))
    assert [m.content for m in alice.get_all()] == ["alice's secret"]
    assert store.forget_user("bob") == []
    assert store.forget_user("alice") == ["1"]


async def test_an_async_put_as_another_user_is_refused_and_stores_nothing() -> None:
    store = InMemoryStore()
    alice = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="1", store=store, user_id="alice")
    await alice.aput(ChatMessage(role="user", content="alice's secret"))
    bob = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="1", store=store, user_id="bob")
    with pytest.raises(SessionOwnerError):
        await bob.aput(ChatMessage(role="user", content="bob's question"))
    assert [m.text for m in store.messages("1")] == ["alice's secret"]


def test_a_memory_block_of_another_user_is_refused() -> None:
    store = InMemoryStore()
    ConvMemMemoryBlock(store=store, user_id="alice").memory("1").add("user", "alice's secret")
    with pytest.raises(SessionOwnerError):
        ConvMemMemoryBlock(store=store, user_id="bob").memory("1")


def users_on_one_file(path: Path) -> tuple[ConvMemChatMemoryBuffer, ConvMemChatMemoryBuffer]:
    bob = ConvMemChatMemoryBuffer.from_defaults(path=path, chat_store_key="bob-1", user_id="bob")
    bob.put(ChatMessage(role="user", content="Bob: my PIN is 4321"))
    ana = ConvMemChatMemoryBuffer.from_defaults(path=path, chat_store_key="ana-1", user_id="ana")
    ana.put(ChatMessage(role="user", content="hi from ana"))
    return ana, bob


def test_a_users_chat_store_lists_only_that_users_sessions(tmp_path: Path) -> None:
    ana, bob = users_on_one_file(tmp_path / "chat.db")
    assert ana.chat_store.get_keys() == ["ana-1"]
    assert bob.chat_store.get_keys() == ["bob-1"]


def test_a_users_chat_store_persists_that_users_sessions_alone(tmp_path: Path) -> None:
    ana, _ = users_on_one_file(tmp_path / "chat.db")
    ana.chat_store.persist(str(tmp_path / "ana.json"))
    saved = SimpleChatStore.from_persist_path(str(tmp_path / "ana.json"))
    assert saved.get_keys() == ["ana-1"]
    assert ana.chat_store.snapshot().get_keys() == ["ana-1"]


def test_a_chat_store_without_a_user_lists_every_session_as_the_store_does(tmp_path: Path) -> None:
    users_on_one_file(tmp_path / "chat.db")
    maintenance = ConvMemChatMemoryBuffer.from_defaults(path=tmp_path / "chat.db", chat_store_key="ops")
    assert maintenance.chat_store.get_keys() == ["ana-1", "bob-1"]
