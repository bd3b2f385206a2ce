"""`ConvMemChatStore` deletes one message in place, atomically, through convmem's own delete."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage

from convmem import HashingEmbedder, MemoryConfig
from llamaindex_convmem import ConvMemChatMemoryBuffer

CARD = "My card number is 4111 1111 1111 1111."


def msg(role: str, content: str) -> ChatMessage:
    return ChatMessage(role=role, content=content)


def buffer(*contents: str, **options: object) -> ConvMemChatMemoryBuffer:
    history = [msg("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(contents)]
    return ConvMemChatMemoryBuffer.from_defaults(chat_store_key="k", chat_history=history, **options)


def test_deleting_one_message_keeps_the_others_in_place_with_their_seqs() -> None:
    memory = buffer("a", "b", "c", "d")
    before = {m.text: m.seq for m in memory.memory.messages()}
    memory.chat_store.delete_message("k", 1)
    assert {m.text: m.seq for m in memory.memory.messages()} == {t: before[t] for t in ("a", "c", "d")}


def test_deleting_by_a_negative_index_counts_from_the_newest() -> None:
    memory = buffer("a", "b", "c", "d")
    assert memory.chat_store.delete_message("k", -3) == msg("assistant", "b")
    assert [m.content for m in memory.get_all()] == ["a", "c", "d"]
    assert memory.chat_store.delete_message("k", -9) is None


def test_a_message_appended_meanwhile_by_another_buffer_survives_a_delete() -> None:
    memory = buffer("a", "b")
    other = ConvMemChatMemoryBuffer.from_defaults(chat_store_key="k", store=memory.memory.store)
    other.put(msg("user", "c"))
    memory.chat_store.delete_last_message("k")
    assert [m.content for m in memory.get_all()] == ["a", "b"]
    assert memory.memory.stats().last_seq == 3
    assert [m.content for m in other.get_all()] == ["a", "b"]


def test_a_deleted_message_is_no_longer_recalled() -> None:
    filler = [f"note {i} about the garden and the weather" for i in range(12)]
    memory = buffer(
        "hello",
        "hi",
        CARD,
        "noted",
        *filler,
        embedder=HashingEmbedder(64),
        config=MemoryConfig(keep_recent_turns=2, summary_trigger="never", extract_facts=False),
    )
    query = "what is my card number?"
    assert "4111" in "\n".join(str(m.content) for m in memory.get(input=query))
    memory.chat_store.delete_message("k", 2)
    assert "4111" not in "\n".join(str(m.content) for m in memory.get(input=query))
