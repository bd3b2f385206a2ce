"""Which searches go through the keyword index a store keeps, and which mirror the logs.

A `Recall` without an embedder, with the unit rules the stored rows were derived
by, searches a store's kept index (`HostsHistoryIndex`) and mirrors no log;
anything else (an embedder, other indexed roles, neighbours, a store opened with
``lexical_index="process"``, a store that keeps no index) mirrors the logs in
the process. Replacing `Recall.config` takes effect at the next call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from real_chat_facts import data_dir

from convmem import (
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    Message,
    Recall,
    SQLiteStore,
    TiktokenCounter,
)
from convmem._recall.index_rows import IndexCursor
from convmem._recall.kept_history import WRITE_EVERY
from convmem._recall.kept_postings import PostingsCache
from convmem._recall.scoring import TermPostings
from convmem._stores.base import Store

COUNTER = TiktokenCounter()
QUESTION = "What is the name of my corgi?"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "memory.db")
    yield store
    store.close()


def _history(recall: Recall, store: Store) -> None:
    """One session of a user: the dog in the user's message, the assistant's answer after."""
    stored = store.append(
        "old",
        [
            Message.create("user", "I adopted a corgi named Duoduo last spring."),
            Message.create("assistant", "Duoduo is a lovely name for a corgi, a herding breed."),
            Message.create("user", "The weather in Lyon was grey all week."),
        ],
        user_id="u",
    )
    recall.add("old", stored, store=store)


def _search(recall: Recall, store: Store) -> str:
    result = recall.search(
        "new", QUESTION, store=store, counter=COUNTER, max_tokens=400, other_sessions=["old"]
    )
    return "\n".join(item.text for item in result.items)


def test_a_lexical_recall_searches_the_index_the_store_keeps_and_mirrors_no_log(store: SQLiteStore) -> None:
    recall = Recall()
    _history(recall, store)
    store.append("new", [Message.create("user", "hello")], user_id="u")
    assert "Duoduo" in _search(recall, store)
    assert recall._mirrors.all() == []
    indexed = store.history_tables()
    assert indexed is not None and indexed.indexed_session("old") is not None


@pytest.mark.parametrize(
    "change",
    [{"indexed_roles": ("user",)}, {"neighbour_radius": 1}],
    ids=["other roles", "neighbours"],
)
def test_a_config_the_rows_were_not_derived_by_mirrors_the_logs(
    store: SQLiteStore, change: dict[str, object]
) -> None:
    recall = Recall()
    _history(recall, store)
    store.append("new", [Message.create("user", "hello")], user_id="u")
    assert "Duoduo" in _search(recall, store)
    assert recall._mirrors.all() == []
    recall.config = recall.config.replace(**change)  # takes effect at the next call
    found = _search(recall, store)
    assert "Duoduo" in found
    assert {mirror.session_id for mirror in recall._mirrors.all()} >= {"old"}
    if change == {"indexed_roles": ("user",)}:
        assert "herding breed" not in found  # the assistant's line is not indexed under these rules


@pytest.mark.parametrize("kind", ["embedder", "process", "in-memory"])
def test_recall_mirrors_the_logs_where_no_kept_index_applies(tmp_path: Path, kind: str) -> None:
    store: Store
    if kind == "in-memory":
        store = InMemoryStore()
    else:
        store = SQLiteStore(tmp_path / "m.db", lexical_index="process" if kind == "process" else "store")
    recall = Recall(HashingEmbedder()) if kind == "embedder" else Recall()
    _history(recall, store)
    store.append("new", [Message.create("user", "hello")], user_id="u")
    assert "Duoduo" in _search(recall, store)
    assert {mirror.session_id for mirror in recall._mirrors.all()} >= {"old"}
    if isinstance(store, SQLiteStore):
        tables = SQLiteStore(tmp_path / "m.db").history_tables()
        assert tables is not None and tables.indexed_session("old") is None  # no rows written
        store.close()


def test_batched_catch_up_writes_once_enough_messages_are_due(store: SQLiteStore) -> None:
    recall = Recall()
    tables = store.history_tables()
    assert tables is not None

    def indexed_through() -> int:
        row = tables.indexed_session("s")
        return 0 if row is None or not row.cursor else IndexCursor.from_json(row.cursor).seq

    store.append("s", [Message.create("user", "a first message about corgis")], user_id="u")
    recall.catch_up("s", store)  # unbatched: written at once
    assert indexed_through() == 1
    for number in range(2, WRITE_EVERY + 1):
        store.append(
            "s", [Message.create("user", f"message number {number} about herding dogs")], user_id="u"
        )
        recall.catch_up("s", store, batched=True)
    assert indexed_through() == 1  # 31 due: left for later
    store.append("s", [Message.create("user", "the thirty-third message")], user_id="u")
    recall.catch_up("s", store, batched=True)
    assert indexed_through() == WRITE_EVERY + 1  # 32 due: written in one go
    store.append("s", [Message.create("user", "Duoduo chased a pigeon today")], user_id="u")
    recall.catch_up("s", store, batched=True)
    assert indexed_through() == WRITE_EVERY + 1
    # A search indexes what the rows lack before it reads them.
    result = recall.search("s", "Who chased a pigeon?", store=store, counter=COUNTER, max_tokens=400)
    assert any("pigeon" in item.text for item in result.items)
    assert indexed_through() == WRITE_EVERY + 2


def test_postings_kept_between_searches_never_hide_rows_written_since(store: SQLiteStore) -> None:
    recall = Recall()
    store.append("s", [Message.create("user", "Our corgi Duoduo likes the beach.")], user_id="u")

    def found(query: str) -> str:
        result = recall.search("s", query, store=store, counter=COUNTER, max_tokens=400)
        return "\n".join(item.text for item in result.items)

    assert "pigeon" not in found("Who chased a pigeon at the beach?")  # "pigeon" read: no postings
    store.append("s", [Message.create("user", "Duoduo chased a pigeon along the beach today.")], user_id="u")
    assert "pigeon" in found("Who chased a pigeon at the beach?")
    store.delete_messages("s", [2])
    assert "pigeon" not in found("Who chased a pigeon at the beach?")


def test_postings_of_a_history_are_kept_for_its_newest_rows_only(store: SQLiteStore) -> None:
    # A chat that goes on writes new rows between searches: postings of the older rows
    # are never read again and must not pile up in a server that runs for months.
    recall = Recall()
    postings = recall._kept.histories.postings
    for turn in range(5):
        store.append(
            "s", [Message.create("user", f"Duoduo chased pigeon number {turn} on the beach.")], user_id="u"
        )
        recall.search("s", "Who chased a pigeon at the beach?", store=store, counter=COUNTER, max_tokens=400)
        versions = {key[:-1] for key in postings.kept()}
        assert len(versions) == 1, f"after search {turn + 1}: postings of {len(versions)} versions kept"
    store.append("t", [Message.create("user", "A pigeon sat on my balcony.")], user_id="v")
    recall.search("t", "Where did the pigeon sit?", store=store, counter=COUNTER, max_tokens=400)
    assert len({key[:-2] for key in postings.kept()}) == 2  # another user's history is its own


def test_the_kept_index_recalls_what_the_mirrors_recall_on_a_long_chat_of_named_speakers(
    tmp_path: Path,
) -> None:
    # One LoCoMo conversation (two named friends, ~20 sessions): every question's recalled
    # items are the same whichever way recall searches (the store's rows or the mirrors).
    path = data_dir()
    if path is None:
        pytest.skip("../shared/data is not here")
    sample = json.loads((path / "locomo-dev.json").read_text(encoding="utf-8"))[0]
    conversation = sample["conversation"]
    turns = [
        (turn["speaker"], turn["text"])
        for number in range(1, 40)
        for turn in conversation.get(f"session_{number}", [])
    ]
    questions = [qa["question"] for qa in sample["qa"][:60]]
    recalled: dict[str, list[object]] = {}
    for mode in ("store", "process"):
        store = SQLiteStore(tmp_path / f"{mode}.db", lexical_index=mode)
        memory = ConversationMemory("chat", store)
        memory.add_messages(
            {
                "role": "user" if speaker == conversation["speaker_a"] else "assistant",
                "content": text,
                "name": speaker,
            }
            for speaker, text in turns
        )
        recalled[mode] = [
            [item.seqs for item in memory.build_context(query=question, budget=1024).recalled]
            for question in questions
        ]
        memory.close()
        store.close()
    assert sum(1 for items in recalled["store"] if items) > 30  # most questions recall something
    assert recalled["store"] == recalled["process"]


def test_the_postings_kept_stay_within_their_bound_in_bytes() -> None:
    ids = np.arange(40, dtype=np.int64)
    ones = np.ones(40, dtype=np.float64)
    cache = PostingsCache(bytes_kept=9000)
    for history in range(10):
        cache.put(("store", history, b"v1"), {"pigeon": {0: TermPostings(ids, ones, ones)}})
    assert len(cache) == 4  # 960 bytes of arrays and 1,100 around them: four fit, the oldest went first
    assert [key[1] for key in cache.kept()] == [6, 7, 8, 9]
    assert cache.get(("store", 9, b"v1"), ["pigeon", "corgi"]).keys() == {"pigeon"}
    cache.put(("store", 9, b"v2"), {"beach": {0: TermPostings(ids[:5], ones[:5], ones[:5])}})
    assert cache.get(("store", 9, b"v1"), ["pigeon"]) == {}  # an older version went with the new one
    assert sorted(key[1:] for key in cache.kept()) == [
        (6, b"v1", "pigeon"),
        (7, b"v1", "pigeon"),
        (8, b"v1", "pigeon"),
        (9, b"v2", "beach"),
    ]
    cache.put(
        ("store", 1, b"v1"), {"most": {0: TermPostings(ids, ones, ones), 1: TermPostings(ids, ones, ones)}}
    )
    assert cache.get(("store", 1, b"v1"), ["most"]) == {}  # over a quarter of the room: not kept
