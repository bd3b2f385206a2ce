"""Recall never serves forgotten or foreign text: log generations, stores kept apart, a bounded
number of session mirrors, and deleting or rewriting single messages."""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from shared_stores import SERVER_KINDS, Location, location_for

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    InvalidMessageError,
    MemoryConfig,
    Message,
    Recall,
    SQLiteStore,
    Store,
    forget_session,
)
from convmem._recall.units import SessionMirror
from convmem._stores.sqlite.migrations import SCHEMA_VERSION
from convmem._tokens import ApproximateCounter

CARD = "My card number is 4111 1111 1111 1111."
CARD_QUERY = "what is my card number?"
FILLER = [
    "The weather was lovely on the coast.",
    "I baked sourdough bread on Sunday.",
    "We watched a film about penguins.",
    "My sister visited from Lisbon.",
    "The train was late again this morning.",
    "I started learning the cello.",
]
QUIET = MemoryConfig(summary_trigger="never", extract_facts=False, keep_recent_turns=2)


def context_text(memory: ConversationMemory, query: str) -> str:
    return "\n".join(str(m["content"]) for m in memory.build_context(query=query, budget=3000).messages)


def tell_card_then_chat(memory: ConversationMemory) -> None:
    memory.add("user", "Hello, I need help with a payment.")
    memory.add("assistant", "Of course, how can I help?")
    memory.add("user", CARD)
    memory.add("assistant", "Thanks, I have noted it.")
    for line in FILLER:
        memory.add("user", line)
        memory.add("assistant", "I see.")


class CountingEmbedder:
    """A HashingEmbedder that counts the texts it embeds."""

    def __init__(self, dimension: int = 64) -> None:
        self.inner = HashingEmbedder(dimension)
        self.documents = 0

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed_documents(self, texts: list[str]) -> np.ndarray:
        self.documents += len(texts)
        return self.inner.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)

    async def aembed_documents(self, texts: list[str]) -> np.ndarray:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> np.ndarray:
        return self.embed_query(text)


# -- another process forgets the session and the id is used again ---------------------------------


NEW_CONVERSATION = [
    ("user", "Hi, my parcel never arrived."),
    ("assistant", "Sorry to hear that, let me check."),
] * 10  # longer than the forgotten one: a reader that only looks at last_seq sees it grow


def forget_and_start_again(db: str, session_id: str) -> None:
    """Runs in another process: forget the session (log and vectors), then reuse its id."""
    store = SQLiteStore(db)
    recall = Recall(HashingEmbedder(64), index_dir=Path(db + ".vectors"))
    forget_session(store, session_id, recall=recall)
    memory = ConversationMemory(session_id, store, QUIET, recall=recall)
    memory.add_messages([{"role": role, "content": text} for role, text in NEW_CONVERSATION])
    memory.flush()
    recall.close()
    store.close()


def in_another_process(target: Any, *args: Any) -> None:
    child = multiprocessing.get_context("spawn").Process(target=target, args=args)
    child.start()
    child.join(120)
    assert child.exitcode == 0


@pytest.fixture
def server(tmp_path: Path) -> ConversationMemory:
    """A server's memory of session support-7, on a real SQLite file with vector files next to it."""
    memory = ConversationMemory.open(
        "support-7", path=tmp_path / "support.db", config=QUIET, embedder=HashingEmbedder(64)
    )
    tell_card_then_chat(memory)
    assert "4111" in context_text(memory, CARD_QUERY)  # recalled from outside the window
    return memory


def test_a_session_forgotten_by_another_process_is_not_recalled_here(
    server: ConversationMemory, tmp_path: Path
) -> None:
    in_another_process(forget_and_start_again, str(tmp_path / "support.db"), "support-7")

    text = context_text(server, CARD_QUERY)
    assert "4111" not in text
    assert "parcel" in text


def test_the_next_add_after_another_process_forgot_the_session_writes_only_the_new_logs_vectors(
    server: ConversationMemory, tmp_path: Path
) -> None:
    in_another_process(forget_and_start_again, str(tmp_path / "support.db"), "support-7")

    server.add("user", "Any news about it?")
    assert server.recall is not None
    server.recall.save()
    current = server.recall.index_path("support-7", store=server.store)
    assert current is not None and current.exists()
    files = {p.name for p in (tmp_path / "support.db.vectors").iterdir()}
    assert files == {current.name, current.with_suffix(".json").name}
    assert server.recall.stats("support-7")["messages"] == len(NEW_CONVERSATION) + 1


def test_a_session_cleared_and_reused_in_this_process_through_another_store_object(tmp_path: Path) -> None:
    recall = Recall(HashingEmbedder(64))
    first = ConversationMemory("s", SQLiteStore(tmp_path / "m.db"), QUIET, recall=recall)
    tell_card_then_chat(first)
    other = SQLiteStore(tmp_path / "m.db")
    other.clear("s")
    other.append("s", [Message.create(role, text) for role, text in NEW_CONVERSATION])
    assert "4111" not in context_text(first, CARD_QUERY)


@pytest.fixture(params=["memory", "sqlite", *SERVER_KINDS])
def two_handles(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two store objects on the same data (one object for the in-memory store)."""
    if request.param == "memory":
        store = InMemoryStore()
        yield store, store
        return
    if request.param == "sqlite":
        location = Location("sqlite", str(tmp_path / "m.db"), "")
    else:
        location = location_for(request.param, request)
    first, second = location.open(), location.open()
    yield first, second
    first.close()
    second.close()
    if request.param != "sqlite":
        location.cleanup()


def test_on_every_store_a_session_cleared_and_started_again_elsewhere_is_not_recalled(
    two_handles: tuple[Store, Store],
) -> None:
    server, other = two_handles
    memory = ConversationMemory("support-7", server, QUIET, recall=Recall(HashingEmbedder(64)))
    tell_card_then_chat(memory)
    assert "4111" in context_text(memory, CARD_QUERY)
    other.clear("support-7")
    other.append("support-7", [Message.create(role, text) for role, text in NEW_CONVERSATION])
    assert "4111" not in context_text(memory, CARD_QUERY)


def test_on_every_store_a_message_deleted_elsewhere_is_not_recalled(two_handles: tuple[Store, Store]) -> None:
    server, other = two_handles
    memory = ConversationMemory("support-7", server, QUIET, recall=Recall(HashingEmbedder(64)))
    tell_card_then_chat(memory)
    assert "4111" in context_text(memory, CARD_QUERY)
    [seq] = [m.seq for m in other.messages("support-7") if "4111" in m.text]
    assert seq is not None
    other.delete_messages("support-7", [seq])
    assert "4111" not in context_text(memory, CARD_QUERY)


# -- stores kept apart -------------------------------------------------------------------------


def test_one_recall_shared_by_two_stores_never_recalls_one_stores_text_for_the_other() -> None:
    recall = Recall(HashingEmbedder(64))
    tenant_one = ConversationMemory("s1", InMemoryStore(), QUIET, recall=recall)
    tenant_two = ConversationMemory("s1", InMemoryStore(), QUIET, recall=recall)
    tell_card_then_chat(tenant_one)
    for line in FILLER:
        tenant_two.add("user", line)
    assert "4111" in context_text(tenant_one, CARD_QUERY)
    assert "4111" not in context_text(tenant_two, CARD_QUERY)


def test_two_stores_sharing_an_index_dir_write_different_files(tmp_path: Path) -> None:
    recall = Recall(HashingEmbedder(64), index_dir=tmp_path / "vectors")
    stores = [SQLiteStore(tmp_path / "a.db"), SQLiteStore(tmp_path / "b.db")]
    for store, text in zip(stores, [CARD, "I like tea."], strict=True):
        ConversationMemory("s1", store, QUIET, recall=recall).add("user", text)
    recall.save()
    paths = [recall.index_path("s1", store=store) for store in stores]
    assert paths[0] != paths[1]
    assert all(p is not None and p.exists() for p in paths)


def test_vectors_saved_for_one_store_are_not_adopted_for_another(tmp_path: Path) -> None:
    first = Recall(HashingEmbedder(64), index_dir=tmp_path / "vectors")
    ConversationMemory("s1", SQLiteStore(tmp_path / "a.db"), QUIET, recall=first).add("user", CARD)
    first.close()
    counting = CountingEmbedder()
    second = Recall(counting, index_dir=tmp_path / "vectors")
    other = ConversationMemory("s1", SQLiteStore(tmp_path / "b.db"), QUIET, recall=second)
    other.add("user", "I like tea.")
    assert counting.documents == 1
    assert "4111" not in context_text(other, CARD_QUERY)


def test_add_without_a_store_for_a_session_of_two_stores_asks_for_the_store() -> None:
    recall = Recall(HashingEmbedder(64))
    for store in (InMemoryStore(), InMemoryStore()):
        ConversationMemory("s1", store, QUIET, recall=recall).add("user", "hello")
    with pytest.raises(ConfigError, match="pass store="):
        recall.add("s1", [Message.create("user", "hi")])


# -- bounded ----------------------------------------------------------------------------------


def live_mirrors() -> int:
    gc.collect()
    return sum(type(o) is SessionMirror for o in gc.get_objects())


def test_a_shared_recall_keeps_at_most_max_sessions_mirrors() -> None:
    recall = Recall(HashingEmbedder(16), max_sessions=8)
    store = InMemoryStore()
    before = live_mirrors()
    for i in range(100):
        store.append(f"s{i}", [Message.create("user", f"note {i} about tulips")])
        recall.catch_up(f"s{i}", store)
    assert live_mirrors() - before <= 8


def test_an_evicted_session_is_read_again_from_its_file_without_embedding_again(tmp_path: Path) -> None:
    counting = CountingEmbedder()
    recall = Recall(counting, index_dir=tmp_path / "vectors", max_sessions=2)
    store = SQLiteStore(tmp_path / "m.db")
    memory = ConversationMemory("first", store, QUIET, recall=recall)
    tell_card_then_chat(memory)
    for i in range(3):
        ConversationMemory(f"other-{i}", store, QUIET, recall=recall).add("user", "hello")
    embedded = counting.documents
    assert "4111" in context_text(memory, CARD_QUERY)
    assert counting.documents == embedded


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "8", None])
def test_max_sessions_must_be_a_positive_int(bad: object) -> None:
    with pytest.raises(ConfigError, match=r"max_sessions must be a positive int.*" + repr(bad)[:3]):
        Recall(HashingEmbedder(16), max_sessions=bad)  # type: ignore[arg-type]


# -- deleting and replacing single messages -----------------------------------------------------


@pytest.fixture
def memory(tmp_path: Path) -> ConversationMemory:
    memory = ConversationMemory(
        "s",
        SQLiteStore(tmp_path / "m.db"),
        QUIET,
        recall=Recall(HashingEmbedder(64), index_dir=tmp_path / "v"),
    )
    tell_card_then_chat(memory)
    return memory


def card_seq(memory: ConversationMemory) -> int:
    [seq] = [m.seq for m in memory.messages() if "4111" in m.text]
    assert seq is not None
    return seq


def test_a_deleted_message_leaves_the_log_and_is_returned(memory: ConversationMemory) -> None:
    seq = card_seq(memory)
    [deleted] = memory.delete_messages([seq])
    assert deleted.text == CARD
    assert all("4111" not in m.text for m in memory.messages())


def test_a_deleted_message_is_not_recalled(memory: ConversationMemory) -> None:
    memory.delete_messages([card_seq(memory)])
    assert "4111" not in context_text(memory, CARD_QUERY)


def test_deleting_a_message_re_embeds_only_what_held_its_text(tmp_path: Path) -> None:
    counting = CountingEmbedder()
    memory = ConversationMemory("s", SQLiteStore(tmp_path / "m.db"), QUIET, recall=Recall(counting))
    tell_card_then_chat(memory)
    embedded = counting.documents
    memory.delete_messages([card_seq(memory)])
    context_text(memory, CARD_QUERY)
    assert counting.documents - embedded <= 2


def test_a_deleted_messages_vector_file_is_replaced_by_the_new_generations(
    memory: ConversationMemory, tmp_path: Path
) -> None:
    assert memory.recall is not None
    memory.recall.save()
    old = memory.recall.index_path("s", store=memory.store)
    assert old is not None and old.exists()
    memory.delete_messages([card_seq(memory)])
    memory.recall.save()
    new = memory.recall.index_path("s", store=memory.store)
    assert not old.exists()
    assert new is not None and new.exists()


def test_a_replaced_message_is_recalled_with_its_new_text_only(memory: ConversationMemory) -> None:
    stored = memory.replace_message(
        card_seq(memory), {"role": "user", "content": "My card number is [removed]."}
    )
    assert stored.text == "My card number is [removed]."
    text = context_text(memory, CARD_QUERY)
    assert "4111" not in text
    assert "[removed]" in text


def test_a_replacement_is_counted_like_an_append(memory: ConversationMemory) -> None:
    stored = memory.replace_message(card_seq(memory), {"role": "user", "content": "redacted"})
    assert stored.token_count == memory.counter.count_message(stored)


def test_replacing_an_unknown_seq_raises_and_changes_nothing(memory: ConversationMemory) -> None:
    before = memory.messages()
    with pytest.raises(InvalidMessageError, match="no message with seq 999"):
        memory.replace_message(999, {"role": "user", "content": "x"})
    assert memory.messages() == before


def test_deleting_an_unknown_seq_raises_and_deletes_nothing(memory: ConversationMemory) -> None:
    before = memory.messages()
    with pytest.raises(InvalidMessageError, match="no message with seq 999"):
        memory.delete_messages([card_seq(memory), 999])
    assert memory.messages() == before


@pytest.mark.parametrize("bad", [[0], ["3"], [None], "3"])
def test_delete_messages_refuses_what_is_not_seqs(memory: ConversationMemory, bad: Any) -> None:
    with pytest.raises(InvalidMessageError, match="seq"):
        memory.delete_messages(bad)


def test_a_replacement_too_long_for_the_config_is_refused(tmp_path: Path) -> None:
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(max_message_chars=20))
    memory.add("user", "short")
    with pytest.raises(InvalidMessageError):
        memory.replace_message(1, {"role": "user", "content": "x" * 50})
    assert memory.messages()[0].text == "short"


def summarizing_memory() -> ConversationMemory:
    config = MemoryConfig(
        summary_trigger="turns", summary_every_turns=1, keep_recent_turns=2, extract_facts=False
    )
    memory = ConversationMemory("s", InMemoryStore(), config, counter=ApproximateCounter())
    tell_card_then_chat(memory)
    memory.summarize_now()
    assert "4111" in memory.summary().text
    return memory


def test_deleting_a_summarized_message_takes_its_text_out_of_the_summary() -> None:
    memory = summarizing_memory()
    memory.delete_messages([card_seq(memory)])
    assert "4111" not in memory.summary().text
    memory.summarize_now()
    assert "4111" not in memory.summary().text
    assert "4111" not in context_text(memory, CARD_QUERY)


def test_deleting_a_message_after_the_summary_keeps_the_summary() -> None:
    memory = summarizing_memory()
    before = memory.summary()
    [newest] = memory.tail(1)
    assert newest.seq is not None
    memory.delete_messages([newest.seq])
    assert memory.summary() == before


def fact_memory() -> ConversationMemory:
    memory = ConversationMemory("s", InMemoryStore(), MemoryConfig(summary_trigger="never"))
    memory.add("user", "I live in Paris.")
    memory.add("user", "I live in Berlin now.")
    assert [f.value for f in memory.facts() if "live" in f.key or "city" in f.key] == ["Berlin"]
    return memory


def test_deleting_the_message_that_stated_a_fact_drops_it_and_the_older_value_returns() -> None:
    memory = fact_memory()
    memory.delete_messages([2])
    assert [f.value for f in memory.facts()] == ["Paris"]


def test_replacing_the_message_that_stated_a_fact_states_the_new_one() -> None:
    memory = fact_memory()
    memory.replace_message(2, {"role": "user", "content": "I live in Madrid now."})
    assert [f.value for f in memory.facts()] == ["Madrid"]


def test_async_delete_and_replace_do_what_the_sync_ones_do(memory: ConversationMemory) -> None:
    async def edit() -> None:
        seq = card_seq(memory)
        await memory.areplace_message(seq, {"role": "user", "content": "My card number is [removed]."})
        assert "4111" not in await asyncio.to_thread(context_text, memory, CARD_QUERY)
        [deleted] = await memory.adelete_messages([seq])
        assert deleted.text == "My card number is [removed]."

    asyncio.run(edit())
    assert all(m.seq != 3 for m in memory.messages())


def test_every_store_kind_supports_the_edit_calls() -> None:
    assert all(hasattr(Store, name) for name in ("delete_messages", "replace_message"))


# -- SQLite files written before generations ------------------------------------------------------

SCHEMA_1 = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, user_id TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0, total_tokens INTEGER NOT NULL DEFAULT 0);
CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, name TEXT, tool_calls TEXT, tool_call_id TEXT, metadata TEXT,
    status TEXT NOT NULL, ts REAL NOT NULL, token_count INTEGER, PRIMARY KEY (session_id, seq))
    WITHOUT ROWID;
CREATE TABLE state (session_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (session_id, key)) WITHOUT ROWID;
INSERT INTO sessions VALUES ('a', NULL, 1, 1, 1, 1, 0), ('b', NULL, 1, 1, 1, 1, 0);
INSERT INTO messages VALUES ('a', 1, 'user', '"hi a"', NULL, NULL, NULL, NULL, 'completed', 1, NULL),
    ('b', 1, 'user', '"hi b"', NULL, NULL, NULL, NULL, 'completed', 1, NULL);
PRAGMA user_version = 1;
"""


def test_a_sqlite_file_of_schema_1_is_migrated_and_its_sessions_get_distinct_generations(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(SCHEMA_1)
    store = SQLiteStore(path)
    generations = {store.stats(s).generation for s in ("a", "b")}
    assert None not in generations and len(generations) == 2
    assert [m.text for m in store.messages("a")] == ["hi a"]
    store.append("c", [Message.create("user", "new")])
    assert store.stats("c").generation not in (None, *generations)
    store.close()
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
