"""After an append, a recall mirror takes the messages the store returned instead of
reading them back, and recalls exactly what a mirror that read the log recalls."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from convmem import ApproximateCounter, InMemoryStore, Recall, SQLiteStore
from convmem._models import Message
from convmem._recall.kept_history import WRITE_EVERY
from convmem._stores.base import SessionStats

HISTORY = [
    ("user", "I adopted a corgi named Duoduo last spring."),
    ("assistant", "Corgis are lively; how is Duoduo settling in?"),
    ("user", "She chews every shoe she finds in the hallway."),
    ("assistant", "A puzzle feeder might keep her busy."),
    ("user", "My sister is visiting from Lisbon in June."),
    ("assistant", "You could show her the botanical garden."),
]


class CountingStore(InMemoryStore):
    """An in-memory store that records the seqs its log is read after."""

    def __init__(self) -> None:
        super().__init__()
        self.reads_after: list[int] = []

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        self.reads_after.append(after_seq)
        return super().messages(session_id, after_seq=after_seq, through_seq=through_seq)


def _append(store: InMemoryStore, history: Sequence[tuple[str, str]]) -> list[Message]:
    return store.append("s", [Message.create(role, text) for role, text in history])


def _followed(store: CountingStore, recall: Recall) -> None:
    """`recall` mirrors the session from its log, then follows each append as a memory does."""
    _append(store, HISTORY[:2])
    recall.catch_up("s", store)
    store.reads_after.clear()
    for start in range(2, len(HISTORY), 2):
        recall.catch_up("s", store, appended=_append(store, HISTORY[start : start + 2]))


def _search(recall: Recall, store: InMemoryStore, query: str) -> tuple[str, list[tuple[int, ...]]]:
    found = recall.search("s", query, store=store, max_tokens=400, counter=ApproximateCounter())
    return found.text, [item.seqs for item in found.items]


def test_appended_messages_are_not_read_back() -> None:
    store = CountingStore()
    _followed(store, Recall())
    assert store.reads_after == []


def test_a_message_another_writer_appended_is_read_from_the_log() -> None:
    store = CountingStore()
    recall = Recall()
    _followed(store, recall)
    _append(store, [("user", "Another writer asks about Lisbon trams.")])
    recall.catch_up("s", store, appended=_append(store, [("assistant", "Tram 28 is the famous one.")]))
    assert store.reads_after == [len(HISTORY)]
    assert "Another writer" in _search(recall, store, "Which Lisbon trams did I ask about?")[0]


def test_recall_matches_a_mirror_that_read_the_log() -> None:
    store = CountingStore()
    followed = Recall()
    _followed(store, followed)
    fresh = Recall()
    fresh.catch_up("s", store)
    for query in (
        "What is my corgi called?",
        "Where is my sister visiting from?",
        "What garden did you suggest?",
    ):
        ours = _search(followed, store, query)
        assert ours[1]
        assert ours == _search(fresh, store, query)


class StatsCountingSQLiteStore(SQLiteStore):
    """A SQLite store that counts its stats reads."""

    stats_reads = 0

    def stats(self, session_id: str) -> SessionStats:
        self.stats_reads += 1
        return super().stats(session_id)


def test_batched_appends_read_no_stats_until_a_batch_of_rows_is_due(tmp_path: Path) -> None:
    with StatsCountingSQLiteStore(tmp_path / "memory.db") as store:
        recall = Recall()
        for number in range(WRITE_EVERY - 2):
            stored = store.append("s", [Message.create("user", f"Note {number} about the garden.")])
            recall.catch_up("s", store, batched=True, appended=stored)
        assert store.stats_reads == 0
        stored = store.append("s", [Message.create("user", "The corgi Duoduo chews shoes.")])
        recall.catch_up("s", store, batched=True, appended=stored)
        assert store.stats_reads > 0
        assert "Duoduo" in _search(recall, store, "What is my corgi called?")[0]
