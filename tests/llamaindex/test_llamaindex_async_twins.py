"""Every LlamaIndex wrapper method that does I/O has an async twin, and each twin behaves as
its sync method does: the same scenarios, run once each way on fresh objects, give the
same results, the same errors and the same log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from async_twins import Pair, Scenario, aoutcome, expected_pairs, outcome
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.storage.chat_store import SimpleChatStore

from llamaindex_convmem import (
    ConvMemChatMemoryBuffer,
    ConvMemChatStore,
    ConvMemMemoryBlock,
    TokenizerFnCounter,
)

# Methods that wait for nothing: construction, copies, lookups, pure values.
NO_IO: dict[type, set[str]] = {
    ConvMemChatMemoryBuffer: {
        "class_name",
        "for_session",
        "from_defaults",
        "from_dict",
        "from_json",
        "from_string",
        "memory",
        "mirror",
        "model_post_init",
        "session_id",
        "to_dict",
        "to_json",
        "to_string",
        "token_counter",
        "validate_memory",
    },
    ConvMemChatStore: {"class_name", "memory", "model_post_init"},
    ConvMemMemoryBlock: {"memory", "model_post_init"},
    TokenizerFnCounter: {"count_fields", "count_text"},
}
RENAMED = {(ConvMemChatStore, "add_message"): "async_add_message"}


def pairs(owner: type, *names: str) -> tuple[Pair, ...]:
    return tuple(Pair(owner, name, RENAMED.get((owner, name), f"a{name}")) for name in names)


def said(messages: list[ChatMessage]) -> list[tuple[str, str | None]]:
    return [(m.role.value, m.content) for m in messages]


def msg(role: str, content: str) -> ChatMessage:
    return ChatMessage(role=role, content=content)


HISTORY = [
    msg("user", "When does the museum open?"),
    msg("assistant", "It opens at nine."),
    msg("user", "And on Sundays?"),
    msg("assistant", "At ten."),
]


# -- the buffer -------------------------------------------------------------------------------


def buffer_sync() -> Any:
    buffer = ConvMemChatMemoryBuffer.from_defaults(token_limit=60, chat_store_key="k", tokenizer_fn=str.split)
    buffer.put(msg("user", "Where is the museum?"))
    buffer.put_messages([msg("assistant", "On the main square.")])
    seen = said(buffer.get("museum")), said(buffer.get_all()), buffer.explain("museum"), buffer.transcript()
    built = buffer.context("museum").messages
    buffer.set(HISTORY)
    after_set = said(buffer.get_all())
    too_much = outcome(lambda: buffer.get(initial_token_count=61))
    refused = outcome(lambda: buffer.put("not a message"))  # type: ignore[arg-type]
    buffer.reset()
    buffer.close()
    return seen, built, after_set, too_much, refused, said(buffer.get_all())


async def buffer_async() -> Any:
    buffer = ConvMemChatMemoryBuffer.from_defaults(token_limit=60, chat_store_key="k", tokenizer_fn=str.split)
    await buffer.aput(msg("user", "Where is the museum?"))
    await buffer.aput_messages([msg("assistant", "On the main square.")])
    seen = (
        said(await buffer.aget("museum")),
        said(await buffer.aget_all()),
        await buffer.aexplain("museum"),
        await buffer.atranscript(),
    )
    built = (await buffer.acontext("museum")).messages
    await buffer.aset(HISTORY)
    after_set = said(await buffer.aget_all())
    too_much = await aoutcome(lambda: buffer.aget(initial_token_count=61))
    refused = await aoutcome(lambda: buffer.aput("not a message"))  # type: ignore[arg-type]
    await buffer.areset()
    await buffer.aclose()
    return seen, built, after_set, too_much, refused, said(await buffer.aget_all())


# -- the chat store view ------------------------------------------------------------------------


def chat_store() -> ConvMemChatStore:
    store = ConvMemChatMemoryBuffer.from_defaults().chat_store
    assert isinstance(store, ConvMemChatStore)
    return store


def persisted(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def chat_store_sync(tmp_path: Path) -> Any:
    store = chat_store()
    store.set_messages("a", HISTORY)
    store.add_message("a", msg("user", "Thanks."))
    store.add_message("b", msg("user", "Hi"))
    read = said(store.get_messages("a")), sorted(store.get_keys())
    store.persist(str(tmp_path / "sync.json"))
    snap = said(store.snapshot(["a"]).get_messages("a"))
    deleted = said([m for m in [store.delete_message("a", 0), store.delete_last_message("a")] if m])
    gone = said(store.delete_messages("b") or [])
    return read, persisted(tmp_path / "sync.json"), snap, deleted, gone, said(store.get_messages("a"))


async def chat_store_async(tmp_path: Path) -> Any:
    store = chat_store()
    await store.aset_messages("a", HISTORY)
    await store.async_add_message("a", msg("user", "Thanks."))
    await store.async_add_message("b", msg("user", "Hi"))
    read = said(await store.aget_messages("a")), sorted(await store.aget_keys())
    await store.apersist(str(tmp_path / "async.json"))
    snap = said((await store.asnapshot(["a"])).get_messages("a"))
    deleted = said(
        [m for m in [await store.adelete_message("a", 0), await store.adelete_last_message("a")] if m]
    )
    gone = said(await store.adelete_messages("b") or [])
    return read, persisted(tmp_path / "async.json"), snap, deleted, gone, said(await store.aget_messages("a"))


# -- the memory block ---------------------------------------------------------------------------


def block_sync() -> Any:
    block = ConvMemMemoryBlock(session_id="s")
    block.memory().add_turn("My dog is Rex.", "Nice.")
    block.close()
    return [m.text for m in block.memory().messages()]


async def block_async() -> Any:
    block = ConvMemMemoryBlock(session_id="s")
    block.memory().add_turn("My dog is Rex.", "Nice.")
    await block.aclose()
    return [m.text for m in block.memory().messages()]


def mirrored_sync() -> Any:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="k")
    buffer.put_messages(HISTORY)
    return said(theirs.get_messages("k"))


async def mirrored_async() -> Any:
    theirs = SimpleChatStore()
    buffer = ConvMemChatMemoryBuffer.from_defaults(chat_store=theirs, chat_store_key="k")
    await buffer.aput_messages(HISTORY)
    return said(theirs.get_messages("k"))


def scenarios(tmp_path: Path) -> list[Scenario]:
    return [
        Scenario(
            "a buffer written, read, replaced and reset",
            pairs(
                ConvMemChatMemoryBuffer,
                "put",
                "put_messages",
                "get",
                "get_all",
                "explain",
                "transcript",
                "context",
                "set",
                "reset",
                "close",
            ),
            buffer_sync,
            buffer_async,
        ),
        Scenario(
            "a buffer mirroring into a chat store",
            pairs(ConvMemChatMemoryBuffer, "put_messages"),
            mirrored_sync,
            mirrored_async,
        ),
        Scenario(
            "a chat store view read, written, persisted and deleted from",
            pairs(
                ConvMemChatStore,
                "set_messages",
                "add_message",
                "get_messages",
                "get_keys",
                "persist",
                "snapshot",
                "delete_message",
                "delete_last_message",
                "delete_messages",
            ),
            lambda: chat_store_sync(tmp_path),
            lambda: chat_store_async(tmp_path),
        ),
        Scenario("a memory block closed", pairs(ConvMemMemoryBlock, "close"), block_sync, block_async),
    ]


def test_every_method_that_does_io_has_an_async_twin() -> None:
    _, missing = expected_pairs(NO_IO, RENAMED)
    assert missing == []


def test_the_scenarios_run_every_pair(tmp_path: Path) -> None:
    expected, _ = expected_pairs(NO_IO, RENAMED)
    covered = {pair for scenario in scenarios(tmp_path) for pair in scenario.pairs}
    assert sorted(map(str, expected - covered)) == []
    assert sorted(map(str, covered - expected)) == []


NAMES = [scenario.name for scenario in scenarios(Path())]


@pytest.mark.parametrize("name", NAMES)
async def test_a_twin_gives_what_its_sync_method_gives(name: str, tmp_path: Path) -> None:
    [scenario] = [s for s in scenarios(tmp_path) if s.name == name]
    assert await scenario.run_async() == scenario.run_sync()
