"""Ingest embeds in batches: a history import is a few embedder calls, each text once.

A scripted embedder records every call; `EMBED_BATCH_UNITS` is made small so that
an import of a few messages spans several batches."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np
import pytest

from convmem import ConversationMemory, HashingEmbedder, InMemoryStore, MemoryConfig
from convmem._recall import embed_queue

# Alternating user and assistant: every message is a unit, and so is every (user, assistant) pair.
HISTORY = [
    ("user", "I adopted a corgi named Duoduo last spring."),
    ("assistant", "Corgis are lively; how is Duoduo settling in?"),
    ("user", "She chews every shoe she finds in the hallway."),
    ("assistant", "A puzzle feeder might keep her busy."),
    ("user", "My sister is visiting from Lisbon in June."),
    ("assistant", "You could show her the botanical garden."),
    ("user", "Work has been busy with the quarterly report."),
    ("assistant", "Deadlines always pile up at the end of a quarter."),
    ("user", "I tried a new ramen place downtown."),
    ("assistant", "Was the broth any good?"),
]
UNITS = len(HISTORY) + len(HISTORY) // 2


class ScriptedEmbedder(HashingEmbedder):
    """Hashing vectors; records each call's texts and fails the calls it is told to."""

    def __init__(self, fail_calls: Sequence[int] = ()) -> None:
        super().__init__(64)
        self.calls: list[list[str]] = []
        self.fail_calls = set(fail_calls)

    def _record(self, texts: Sequence[str]) -> None:
        self.calls.append(list(texts))
        if len(self.calls) in self.fail_calls:
            raise RuntimeError(f"embedding service unavailable (call {len(self.calls)})")

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self._record(texts)
        return super().embed_documents(texts)

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self._record(texts)
        return await super().aembed_documents(texts)

    @property
    def texts(self) -> list[str]:
        return [text for call in self.calls for text in call]


def records(history: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    return [{"role": role, "content": text} for role, text in history]


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(embed_queue, "EMBED_BATCH_UNITS", 4)
    return 4


def test_a_history_import_embeds_every_unit_once_in_one_call() -> None:
    embedder = ScriptedEmbedder()
    memory = ConversationMemory("s", embedder=embedder)
    memory.add_messages(records(HISTORY))
    assert len(embedder.calls) == 1
    # Each message and each whole exchange, and no exchange as it stood before its reply.
    assert len(embedder.texts) == UNITS == len(set(embedder.texts))
    assert HISTORY[0][1] in embedder.texts
    assert f"{HISTORY[0][1]}\n{HISTORY[1][1]}" in embedder.texts
    assert memory.recall is not None and memory.recall.stats("s")["vectors"] == UNITS


def test_a_lone_messages_exchange_gets_no_vector_of_its_own() -> None:
    embedder = ScriptedEmbedder()
    memory = ConversationMemory("s", embedder=embedder)
    memory.add_messages(records([("user", "Remind me to water the ferns on Sunday.")]))
    assert embedder.calls == [["Remind me to water the ferns on Sunday."]]


def test_a_large_import_is_embedded_in_bounded_batches(small_batches: int) -> None:
    embedder = ScriptedEmbedder()
    memory = ConversationMemory("s", embedder=embedder)
    memory.add_messages(records(HISTORY))
    assert [len(call) for call in embedder.calls] == [4, 4, 4, 3]
    assert sorted(embedder.texts) == sorted(set(embedder.texts))
    assert memory.recall is not None and memory.recall.stats("s")["vectors"] == UNITS


def test_a_text_several_units_share_is_embedded_once() -> None:
    embedder = ScriptedEmbedder()
    memory = ConversationMemory("s", embedder=embedder)
    said_twice = "I prefer green tea to coffee in the afternoon."
    memory.add_messages(
        records([("user", said_twice), ("user", "My train to Porto leaves at nine."), ("user", said_twice)])
    )
    assert embedder.texts.count(said_twice) == 1
    assert memory.recall is not None and memory.recall.stats("s")["vectors"] == 3
    mirror = memory.recall._mirrors.find("s")
    assert mirror is not None and mirror.index is not None
    held = mirror.index.vectors([1, 2, 3])
    np.testing.assert_array_equal(held[1], held[3])
    assert not np.array_equal(held[1], held[2])


def test_a_failure_midway_keeps_the_batches_embedded_before_it(
    small_batches: int, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = ScriptedEmbedder(fail_calls=[2])
    store = InMemoryStore()
    memory = ConversationMemory("s", store, embedder=embedder)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        memory.add_messages(records(HISTORY))
    assert f"embedding {UNITS - small_batches} recall units" in caplog.text
    recall = memory.recall
    assert recall is not None
    assert recall.stats("s") | {"kind": None, "bytes_per_vector": None} == {
        "messages": len(HISTORY),
        "vectors": small_batches,
        "pending": UNITS - small_batches,
        "kind": None,
        "bytes_per_vector": None,
    }
    assert [m.text for m in store.messages("s")] == [text for _, text in HISTORY]
    first_batch = embedder.calls[0]
    recall.catch_up("s", store)
    assert recall.stats("s")["vectors"] == UNITS and recall.stats("s")["pending"] == 0
    # The retry embeds what was left, and nothing the first batch embedded.
    retried = [text for call in embedder.calls[2:] for text in call]
    assert len(retried) == UNITS - small_batches
    assert not set(retried) & set(first_batch)


async def test_the_async_import_embeds_as_the_sync_one_does(small_batches: int) -> None:
    sync_embedder, async_embedder = ScriptedEmbedder(), ScriptedEmbedder()
    ConversationMemory("s", embedder=sync_embedder).add_messages(records(HISTORY))
    memory = ConversationMemory("s", embedder=async_embedder)
    await memory.aadd_messages(records(HISTORY))
    assert async_embedder.calls == sync_embedder.calls
    assert memory.recall is not None and memory.recall.stats("s")["vectors"] == UNITS


async def test_an_async_failure_midway_keeps_the_batches_embedded_before_it(small_batches: int) -> None:
    embedder = ScriptedEmbedder(fail_calls=[3])
    memory = ConversationMemory("s", embedder=embedder)
    await memory.aadd_messages(records(HISTORY))
    assert memory.recall is not None
    stats = memory.recall.stats("s")
    assert (stats["vectors"], stats["pending"]) == (2 * small_batches, UNITS - 2 * small_batches)


def test_background_ingest_ends_with_every_unit_embedded_once() -> None:
    embedder = ScriptedEmbedder()
    memory = ConversationMemory("s", config=MemoryConfig(background=True), embedder=embedder)
    for role, text in HISTORY:
        memory.add(role, text)
    assert memory.flush(timeout=30)
    assert memory.recall is not None
    stats = memory.recall.stats("s")
    assert (stats["vectors"], stats["pending"]) == (UNITS, 0)
    # Each message is embedded once, however the adds fell into background jobs.
    assert all(embedder.texts.count(text) == 1 for _, text in HISTORY)
    memory.close()
