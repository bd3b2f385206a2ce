"""`Recall`: indexing, hybrid search, rendering within a token cap, persistence and walls."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stored_messages import COUNTER, store_messages

from convmem import (
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    Message,
    Recall,
    RecallConfig,
    SentenceTransformerEmbedder,
    SQLiteStore,
    Store,
)
from convmem._recall.engine import RecallFilters, RecallResult, choose_recall_share
from convmem._recall.intent import asks_for_several

pytest.importorskip("faiss")

DAY = 86400.0
MAY_8_2023 = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc).timestamp()

FILLER = [
    ("user", "How was your weekend?"),
    ("assistant", "Pretty quiet, I mostly read a novel about sailors."),
    ("user", "I tried a new ramen place downtown."),
    ("assistant", "Was the broth any good?"),
    ("user", "Rich and salty, I will go back next month."),
    ("assistant", "Sounds like a plan for a rainy day."),
    ("user", "My sister is visiting from Lisbon in June."),
    ("assistant", "You could show her the botanical garden."),
    ("user", "Work has been busy with the quarterly report."),
    ("assistant", "Deadlines always pile up at the end of a quarter."),
]


def search(recall: Recall, store: Store, session_id: str, query: str, **kwargs: Any) -> RecallResult:
    kwargs.setdefault("max_tokens", 400)
    kwargs.setdefault("exclude_seqs", ())
    return recall.search(session_id, query, store=store, counter=COUNTER, **kwargs)


def texts(result: RecallResult) -> str:
    return "\n".join(item.text for item in result.items)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "memory.db")
    yield store
    store.close()


@pytest.fixture
def index_dir(tmp_path: Path) -> Path:
    return tmp_path / "memory.db.vectors"


def dog_session(recall: Recall, store: Store, session_id: str = "s1") -> list[Message]:
    stored = store_messages(store, session_id, [("user", "I adopted a corgi named Duoduo last spring.")])
    stored += store_messages(store, session_id, FILLER)
    recall.add(session_id, stored, store=store)
    return stored


# -- finding things ------------------------------------------------------------------


def test_recall_finds_an_old_message_by_its_words(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    result = search(recall, store, "s1", "what is the name of my corgi?")
    assert "Duoduo" in result.items[0].text


def test_recall_never_returns_what_the_window_holds(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = dog_session(recall, store)
    result = search(recall, store, "s1", "corgi Duoduo", exclude_seqs=[stored[0].seq])
    assert stored[0].seq not in result.seqs
    assert "Duoduo" not in result.text


def test_items_render_the_date_and_the_speaker(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(
        store, "s1", [("user", "I went to a support group yesterday.")], name="Caroline", timestamp=MAY_8_2023
    )
    recall.add("s1", stored)
    result = search(recall, store, "s1", "When did Caroline go to the support group?")
    assert result.items[0].text == "[8 May 2023]\nCaroline: I went to a support group yesterday."
    assert result.items[0].time_label == "[8 May 2023]"


def test_unnamed_messages_are_rendered_with_their_role(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    result = search(recall, store, "s1", "corgi Duoduo")
    assert "User: I adopted a corgi named Duoduo last spring." in result.text


def test_chinese_sections_use_the_chinese_header_and_date(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(store, "s1", [("user", "我养了一只狗，名字叫多多。")], timestamp=MAY_8_2023)
    recall.add("s1", stored)
    result = search(recall, store, "s1", "我的狗叫什么名字？")
    assert result.header == "【相关背景信息】"
    assert result.items[0].text == "[2023年5月8日]\n用户：我养了一只狗，名字叫多多。"
    assert result.section_text.startswith("【相关背景信息】\n")


def test_a_query_sharing_nothing_with_the_log_recalls_nothing(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(min_score=0.3))
    dog_session(recall, store)
    result = search(recall, store, "s1", "quantum chromodynamics lattice")
    assert result.items == ()
    assert result.text == ""


def test_messages_of_a_named_speaker_rank_first_when_the_query_names_them(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(store, "s1", [("user", "I painted a sunrise over the lake.")], name="Melanie")
    stored += store_messages(
        store, "s1", [("assistant", "I painted a sunrise over the lake.")], name="Caroline"
    )
    recall.add("s1", stored)
    result = search(recall, store, "s1", "What did Caroline paint?", max_tokens=25)
    assert [item.seqs for item in result.items] == [(stored[1].seq,)]


class QueryRecordingEmbedder(HashingEmbedder):
    """A `HashingEmbedder` that keeps the queries it embedded."""

    def __init__(self) -> None:
        super().__init__()
        self.queries: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return super().embed_query(text)

    async def aembed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return await super().aembed_query(text)


@pytest.mark.parametrize("asynchronous", [False, True])
def test_the_query_vector_leaves_named_speakers_to_the_speaker_boost(
    store: SQLiteStore, asynchronous: bool
) -> None:
    embedder = QueryRecordingEmbedder()
    recall = Recall(embedder)
    stored = store_messages(store, "s1", [("user", "I painted a sunrise.")], name="Melanie")
    stored += store_messages(store, "s2", [("user", "I went hiking.")], name="Caroline")
    recall.add("s1", stored[:1])
    recall.add("s2", stored[1:])
    query = "What did Melanie and Caroline's sister paint?"
    kwargs: dict[str, Any] = {"store": store, "max_tokens": 50, "counter": COUNTER, "other_sessions": ["s2"]}
    if asynchronous:
        result = asyncio.run(recall.asearch("s1", query, **kwargs))
    else:
        result = recall.search("s1", query, **kwargs)
    # The names of both sessions' speakers are left out of what is embedded...
    assert embedder.queries == ["What did they and their sister paint?"]
    # ...and still lift what the named speakers said.
    assert "sunrise" in result.text

    unboosted = QueryRecordingEmbedder()
    plain = Recall(unboosted, config=RecallConfig(speaker_weight=0.0))
    plain.add("s1", stored[:1])
    plain.search("s1", query, store=store, max_tokens=50, counter=COUNTER)
    assert unboosted.queries == [query]


def test_near_duplicate_messages_are_recalled_once(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(store, "s1", [("user", "My corgi is called Duoduo.")] * 3 + FILLER)
    recall.add("s1", stored)
    result = search(recall, store, "s1", "corgi called Duoduo")
    assert result.text.count("Duoduo") == 1
    assert any("near-duplicate" in d.reason for d in result.dropped)


def test_exchange_granularity_recalls_the_question_with_its_answer(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(granularity="exchange"))
    stored = store_messages(
        store, "s1", [("user", "Which breed should I adopt?"), ("assistant", "A corgi suits a small flat.")]
    )
    stored += store_messages(store, "s1", FILLER)
    recall.add("s1", stored)
    result = search(recall, store, "s1", "which corgi breed did I ask about?")
    assert result.items[0].seqs == (stored[0].seq, stored[1].seq)


def test_a_long_run_without_questions_is_split_into_bounded_exchanges(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(granularity="exchange"))
    notes = [("assistant", f"Log line {i} about the deployment.") for i in range(40)]
    recall.add("s1", store_messages(store, "s1", notes))
    result = search(recall, store, "s1", "log line 39 deployment", max_tokens=4000)
    assert result.items
    assert max(len(item.seqs) for item in result.items) <= 16


def test_rebuild_indexes_the_log_again(store: SQLiteStore) -> None:
    counting = CountingEmbedder(HashingEmbedder())
    recall = Recall(counting)
    dog_session(recall, store)
    before = counting.documents
    recall.rebuild("s1", store)
    assert counting.documents == 2 * before
    assert "Duoduo" in search(recall, store, "s1", "corgi Duoduo").text


def test_neighbour_radius_brings_the_surrounding_messages(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(neighbour_radius=1))
    stored = store_messages(store, "s1", FILLER)
    recall.add("s1", stored)
    result = search(recall, store, "s1", "botanical garden")
    target = next(m.seq or 0 for m in stored if "botanical" in m.text)
    item = next(i for i in result.items if target in i.seqs)
    assert item.seqs == (target - 1, target, target + 1)


def test_filters_restrict_recall_to_matching_messages(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(store, "s1", [("user", "Duoduo loves the park.")], name="Ann", timestamp=1000.0)
    stored += store_messages(
        store, "s1", [("assistant", "Duoduo chased a ball.")], name="Bob", timestamp=5000.0
    )
    recall.add("s1", stored)
    by_speaker = search(recall, store, "s1", "Duoduo", filters=RecallFilters(speakers=["Bob"]))
    by_role = search(recall, store, "s1", "Duoduo", filters=RecallFilters(roles=["user"]))
    by_time = search(recall, store, "s1", "Duoduo", filters=RecallFilters(until=2000.0))
    assert by_speaker.seqs == {stored[1].seq}
    assert by_role.seqs == {stored[0].seq}
    assert by_time.seqs == {stored[0].seq}


# -- the token cap -------------------------------------------------------------------


@pytest.mark.parametrize("max_tokens", [0, 1, 5, 12, 20, 37, 64, 100, 250, 1000])
def test_items_never_exceed_max_tokens(store: SQLiteStore, max_tokens: int) -> None:
    recall = Recall(HashingEmbedder())
    stored = store_messages(store, "s1", FILLER * 3, timestamp=MAY_8_2023)
    stored += store_messages(store, "s1", FILLER, timestamp=MAY_8_2023 + 40 * DAY)
    recall.add("s1", stored)
    result = search(recall, store, "s1", "ramen broth weekend sister garden report", max_tokens=max_tokens)
    assert sum(item.token_count + 1 for item in result.items) <= max_tokens
    assert COUNTER.count_text(result.text) == result.tokens <= max_tokens
    for item in result.items:
        assert item.token_count == COUNTER.count_text(item.text)


def test_joined_items_are_the_result_text(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(min_coverage=None))
    recall.add("s1", store_messages(store, "s1", FILLER))
    result = search(recall, store, "s1", "ramen sister report")
    assert len(result.items) > 1
    assert result.text == "\n".join(item.text for item in result.items)
    assert [item.seqs for item in result.items] == sorted(item.seqs for item in result.items)


# -- sessions are walls ------------------------------------------------------------------


def test_recall_never_returns_another_sessions_messages(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    recall.add("alice", store_messages(store, "alice", [("user", "My corgi Duoduo loves carrots. [alice]")]))
    recall.add("alice", store_messages(store, "alice", FILLER))
    recall.add("bob", store_messages(store, "bob", [("user", "My corgi Duoduo loves carrots! [bob]")]))
    recall.add("bob", store_messages(store, "bob", FILLER))
    for session, other in (("alice", "[bob]"), ("bob", "[alice]")):
        result = search(recall, store, session, "What does my corgi Duoduo love?", max_tokens=2000)
        assert result.items
        assert other not in result.text


def test_a_session_with_nothing_indexed_recalls_nothing(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store, "s1")
    assert search(recall, store, "empty", "corgi Duoduo").items == ()


# -- persistence and rebuilds --------------------------------------------------------


def test_index_files_are_written_next_to_the_store(store: SQLiteStore, index_dir: Path) -> None:
    recall = Recall(HashingEmbedder(), index_dir=index_dir)
    dog_session(recall, store)
    recall.save()
    path = recall.index_path("s1")
    assert path is not None and path.exists()
    assert path.with_suffix(".json").exists()


def test_session_ids_become_safe_distinct_file_names(index_dir: Path) -> None:
    recall = Recall(HashingEmbedder(), index_dir=index_dir)
    paths = {recall.index_path(s) for s in ("../etc/passwd", "A", "a", "会话/1")}
    assert len(paths) == 4
    assert all(p is not None and p.parent == index_dir for p in paths)


def test_a_new_engine_loads_the_saved_vectors_without_embedding_again(
    store: SQLiteStore, index_dir: Path
) -> None:
    first = Recall(HashingEmbedder(), index_dir=index_dir)
    dog_session(first, store)
    first.close()
    counting = CountingEmbedder(HashingEmbedder())
    second = Recall(counting, index_dir=index_dir)
    search(second, store, "s1", "corgi")
    assert counting.documents == 0


@pytest.mark.parametrize("damage", ["delete", "corrupt", "truncate", "stale-manifest"])
def test_a_damaged_index_is_rebuilt_with_identical_recall(
    store: SQLiteStore, index_dir: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    first = Recall(HashingEmbedder(), index_dir=index_dir)
    dog_session(first, store)
    first.close()
    before = search(first, store, "s1", "what is my corgi called?")
    path = first.index_path("s1")
    assert path is not None
    if damage == "delete":
        path.unlink()
    elif damage == "corrupt":
        path.write_bytes(b"\x00garbage" * 50)
    elif damage == "truncate":
        path.write_bytes(path.read_bytes()[:200])
    else:
        manifest = path.with_suffix(".json")
        manifest.write_text(manifest.read_text().replace('"hashing-v1-512"', '"another-model"'))
    with caplog.at_level(logging.WARNING, logger="convmem"):
        after = search(
            Recall(HashingEmbedder(), index_dir=index_dir), store, "s1", "what is my corgi called?"
        )
    assert after.items == before.items
    if damage != "delete":
        assert "rebuilding" in caplog.text


def test_catch_up_after_add_embeds_nothing_again(store: SQLiteStore) -> None:
    counting = CountingEmbedder(HashingEmbedder())
    recall = Recall(counting)
    dog_session(recall, store)
    embedded = counting.documents
    recall.catch_up("s1", store)
    assert counting.documents == embedded


def test_catch_up_indexes_messages_it_was_never_given(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    store_messages(store, "s1", [("user", "My corgi is called Duoduo."), *FILLER])
    recall.catch_up("s1", store)
    assert recall.stats("s1")["vectors"] > 0
    assert "Duoduo" in search(recall, store, "s1", "what is my corgi's name?").text


def test_search_finds_messages_another_writer_appended(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    store_messages(store, "s1", [("user", "We repainted the kitchen teal."), *FILLER[:4]])
    assert "teal" in search(recall, store, "s1", "what colour is my kitchen? teal").text


def test_forget_removes_vectors_and_files(store: SQLiteStore, index_dir: Path) -> None:
    recall = Recall(HashingEmbedder(), index_dir=index_dir)
    dog_session(recall, store)
    recall.save()
    path = recall.index_path("s1")
    assert path is not None and path.exists()
    recall.forget("s1")
    assert not path.exists()
    assert not path.with_suffix(".json").exists()
    assert recall.stats("s1")["vectors"] == 0
    store.clear("s1")
    assert search(recall, store, "s1", "corgi Duoduo").items == ()


def test_forget_leaves_other_sessions_alone(store: SQLiteStore, index_dir: Path) -> None:
    recall = Recall(HashingEmbedder(), index_dir=index_dir)
    dog_session(recall, store, "s1")
    dog_session(recall, store, "s2")
    recall.forget("s1")
    assert "Duoduo" in search(recall, store, "s2", "corgi Duoduo").text


def test_stats_report_memory_per_vector(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(64))
    dog_session(recall, store)
    stats = recall.stats("s1")
    assert stats["vectors"] >= len(FILLER) + 1
    assert stats["bytes_per_vector"] >= 64 * 4 + 8
    assert stats["kind"] == "flat"


def test_large_sessions_switch_to_hnsw_and_still_recall(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(hnsw_threshold=20))
    dog_session(recall, store)
    recall.add("s1", store_messages(store, "s1", FILLER * 2))
    assert recall.stats("s1")["kind"] == "hnsw"
    assert "Duoduo" in search(recall, store, "s1", "what is my corgi's name?").text


# -- failures degrade ----------------------------------------------------------------


class CountingEmbedder:
    """Wraps an embedder, counting documents embedded; can be told to fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.documents = 0
        self.fail = False

    @property
    def name(self) -> str:
        return str(self.inner.name)

    @property
    def dimension(self) -> int:
        return int(self.inner.dimension)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail:
            raise RuntimeError("embedding service unavailable")
        self.documents += len(texts)
        return np.asarray(self.inner.embed_documents(texts))

    def embed_query(self, text: str) -> np.ndarray:
        if self.fail:
            raise RuntimeError("embedding service unavailable")
        return np.asarray(self.inner.embed_query(text))

    async def aembed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)

    async def aembed_query(self, text: str) -> np.ndarray:
        return self.embed_query(text)


def test_a_failing_embedder_degrades_search_to_keywords_with_a_warning(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = CountingEmbedder(HashingEmbedder())
    recall = Recall(embedder)
    dog_session(recall, store)
    embedder.fail = True
    with caplog.at_level(logging.WARNING, logger="convmem"):
        result = search(recall, store, "s1", "what is my corgi called?")
    assert "Duoduo" in result.text
    assert result.degraded is not None and "keywords only" in result.degraded
    assert result.best_score is None
    assert "embedder failed" in caplog.text


def test_a_failing_embedder_on_add_keeps_the_turn_and_retries_later(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = CountingEmbedder(HashingEmbedder())
    embedder.fail = True
    recall = Recall(embedder)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        dog_session(recall, store)
    assert "stay queued" in caplog.text
    assert "Duoduo" in search(recall, store, "s1", "corgi Duoduo").text  # by keywords meanwhile
    embedder.fail = False
    recall.add("s1", store_messages(store, "s1", [("user", "One more thing.")]))
    assert recall.stats("s1")["pending"] == 0
    assert recall.stats("s1")["vectors"] >= len(FILLER) + 2


async def test_a_failing_embedder_on_async_add_warns_as_the_sync_add_does(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    embedder = CountingEmbedder(HashingEmbedder())
    embedder.fail = True
    recall = Recall(embedder)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        await recall.aadd("s1", store_messages(store, "s1", FILLER))
    assert "stay queued and are found by keywords" in caplog.text
    assert recall.stats("s1")["pending"] > 0


def test_an_embedder_that_never_worked_gives_keyword_results(store: SQLiteStore) -> None:
    embedder = CountingEmbedder(HashingEmbedder())
    embedder.fail = True
    recall = Recall(embedder)
    dog_session(recall, store)
    result = search(recall, store, "s1", "corgi Duoduo")
    assert "Duoduo" in result.text


def test_a_store_that_fails_does_not_break_search(caplog: pytest.LogCaptureFixture) -> None:
    class BrokenStore(InMemoryStore):
        def messages(self, *args: Any, **kwargs: Any) -> list[Message]:
            raise OSError("disk on fire")

    recall = Recall(HashingEmbedder())
    with caplog.at_level(logging.WARNING, logger="convmem"):
        result = recall.search("s1", "anything", store=BrokenStore(), max_tokens=100, counter=COUNTER)
    assert result.items == ()
    assert "disk on fire" in caplog.text


# -- threads and async -----------------------------------------------------------------


def test_adding_from_a_thread_while_searching_is_safe(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    errors: list[BaseException] = []

    def writer() -> None:
        try:
            for i in range(30):
                recall.add("s1", store_messages(store, "s1", [("user", f"Note number {i} about tulips.")]))
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    for _ in range(30):
        search(recall, store, "s1", "corgi tulips")
    thread.join()
    assert errors == []
    assert recall.stats("s1")["pending"] == 0
    assert "Note number 29" in search(recall, store, "s1", "note number 29 tulips", max_tokens=2000).text


def test_two_threads_reading_an_edited_log_never_leave_the_mirror_on_the_older_one() -> None:
    # One thread reads the log of generation 2 and is slow to adopt it; the log is edited
    # again (generation 3) and another thread reads it. The slow thread must not adopt its
    # older log over the newer one: an index that keeps vectors per generation would then
    # store vectors of the older text under the newer generation.
    inner = InMemoryStore()
    stored = store_messages(inner, "s1", [("user", "I keep a red bicycle."), ("user", "I drink green tea.")])
    slow_thread_read = threading.Event()
    newer_read_done = threading.Event()

    class SlowReader(InMemoryStore):
        def __getattr__(self, name: str) -> Any:
            return getattr(inner, name)

        def stats(self, session_id: str) -> Any:
            return inner.stats(session_id)

        def messages(self, session_id: str, **kwargs: Any) -> list[Message]:
            log = inner.messages(session_id, **kwargs)
            if threading.current_thread().name == "slow" and not kwargs:
                slow_thread_read.set()
                newer_read_done.wait(1.0)  # with full reads serialized, the wait times out
            return log

    store = SlowReader()
    recall = Recall(None)
    recall.catch_up("s1", store)
    inner.replace_message("s1", stored[0].seq or 0, Message.create("user", "I keep a blue bicycle."))
    slow = threading.Thread(target=recall.catch_up, args=("s1", store), name="slow")
    slow.start()
    assert slow_thread_read.wait(5.0)
    inner.replace_message("s1", stored[0].seq or 0, Message.create("user", "I keep a yellow bicycle."))
    recall.catch_up("s1", store)
    newer_read_done.set()
    slow.join()
    state = recall._mirrors.find("s1")
    assert state.generation == inner.stats("s1").generation
    assert state.lines[stored[0].seq or 0] == "I keep a yellow bicycle."


def test_vectors_loaded_while_the_log_is_edited_are_embedded_again(
    store: SQLiteStore, index_dir: Path
) -> None:
    # A new server loads the vectors saved for the log, and the log is edited before it
    # reads the log: the loaded vector of the edited message was made from the old text.
    stored = store_messages(store, "s1", [("user", "I keep a red bicycle."), ("user", "I drink green tea.")])
    first = Recall(HashingEmbedder(), index_dir=index_dir)
    first.catch_up("s1", store)
    first.close()

    class EditedMidRead:
        def __getattr__(self, name: str) -> Any:
            return getattr(store, name)

        def stats(self, session_id: str) -> Any:
            return store.stats(session_id)

        def messages(self, session_id: str, **kwargs: Any) -> list[Message]:
            if not edited:
                edited.append(
                    store.replace_message("s1", stored[0].seq or 0, Message.create("user", "I own a kayak."))
                )
            return store.messages(session_id, **kwargs)

    edited: list[Message] = []
    second = Recall(HashingEmbedder(), index_dir=index_dir)
    second.catch_up("s1", EditedMidRead())  # type: ignore[arg-type]
    assert edited
    state = second._mirrors.find("s1")
    assert state.index is not None
    for seq, vector in state.index.vectors(state.index.ids()).items():
        np.testing.assert_allclose(
            vector, HashingEmbedder().embed_documents([state.lines[seq]])[0], atol=1e-6
        )
    assert set(state.index.ids()) == {m.seq for m in store.messages("s1")}


async def test_async_add_and_search_match_the_sync_ones(tmp_path: Path) -> None:
    sync_store, async_store = InMemoryStore(), InMemoryStore()
    sync_recall, async_recall = Recall(HashingEmbedder()), Recall(HashingEmbedder())
    sync_recall.add("s1", store_messages(sync_store, "s1", FILLER))
    await async_recall.aadd("s1", store_messages(async_store, "s1", FILLER))
    expected = search(sync_recall, sync_store, "s1", "ramen sister")
    got = await async_recall.asearch("s1", "ramen sister", store=async_store, max_tokens=400, counter=COUNTER)
    assert [(i.seqs, i.score) for i in got.items] == [(i.seqs, i.score) for i in expected.items]


def test_add_needs_stored_messages() -> None:
    with pytest.raises(ConfigError, match="seq"):
        Recall(HashingEmbedder()).add("s1", [Message.create("user", "not stored yet")])


# -- configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("granularity", "sentence"),
        ("fusion", "max"),
        ("dense_weight", 1.5),
        ("neighbour_radius", -1),
        ("candidates", 0),
        ("recency_half_life_days", 0),
        ("indexed_roles", ("robot",)),
        ("neighbour_min_score", 1.5),
        ("neighbour_min_score", "0.3"),
    ],
)
def test_recall_config_rejects_bad_values(field: str, value: Any) -> None:
    with pytest.raises((ConfigError, ValueError)):
        RecallConfig(**{field: value})


def test_rrf_fusion_and_recency_still_find_the_message(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder(), config=RecallConfig(fusion="rrf", recency_weight=0.3, mmr_lambda=0.7))
    dog_session(recall, store)
    assert "Duoduo" in search(recall, store, "s1", "corgi name Duoduo").text


# -- budget allocation ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "When did I adopt the dog?",
        "What was the name of that restaurant?",
        "Do you remember my sister's city?",
        "What did Caroline research?",
        "What happened in May 2023?",
        "我之前说过我的狗叫什么？",
        "上次我们聊到哪里了？",
        "你还记得我的生日吗？",
    ],
)
def test_queries_pointing_to_the_past_give_recall_the_past_share(query: str) -> None:
    share, reason = choose_recall_share(query, base_share=0.25)
    assert share == RecallConfig().past_share
    assert "past" in reason


@pytest.mark.parametrize("query", ["and why?", "Why?", "what about tomorrow?", "为什么？", "然后呢？"])
def test_short_follow_ups_give_the_window_more(query: str) -> None:
    share, reason = choose_recall_share(query, base_share=0.25)
    assert share == RecallConfig().followup_share
    assert "follow-up" in reason


def test_an_ordinary_query_keeps_the_base_share() -> None:
    assert choose_recall_share("write a haiku about autumn", base_share=0.3)[0] == 0.3


@pytest.mark.parametrize(
    "query",
    [
        "My car makes a squeaking noise when I brake, is that serious?",
        "The rash is red and itchy. Is that bad?",
        "It sleeps twenty hours a day, so is that normal?",
    ],
)
def test_that_as_the_subject_of_a_yes_no_question_is_what_was_just_said(query: str) -> None:
    # "is that serious?" asks about the sentence before it, not about "that serious" thing of
    # an earlier conversation.
    assert choose_recall_share(query, base_share=0.25)[0] == 0.25


@pytest.mark.parametrize(
    ("query", "past"),
    [
        ("I'm baking bread for the first time, why didn't my dough rise?", False),
        ("Why is my laptop so slow?", False),
        ("Why did I quit my old job?", True),
        ("What did my dog eat for breakfast?", True),
        # a piece of writing asked for: its first person is in the brief
        ("Can you draft a toast for my sister's wedding?", False),
        ("Can you write down what I told you about my diet?", True),
    ],
)
def test_the_cause_of_a_thing_of_the_users_or_a_brief_does_not_point_to_the_past(
    query: str, past: bool
) -> None:
    share, reason = choose_recall_share(query, base_share=0.25)
    assert (share == RecallConfig().past_share) is past, reason


@pytest.mark.parametrize("query", ["Where is that restaurant?", "Tell me, where was that bakery?"])
def test_that_before_a_known_thing_still_points_to_the_past(query: str) -> None:
    share, reason = choose_recall_share(query, base_share=0.25)
    assert share == RecallConfig().past_share, reason


@pytest.mark.parametrize(
    "query",
    [
        "What books has Tim read?",
        "Which cities have Jon and Gina visited?",
        "What LGBTQ+ events has Caroline participated in?",
        "How many children does Melanie have?",
        "What do Jon and Gina both have in common?",
        "What are my plans for the summer?",
        "我去过哪些城市？",
        "我养过几只狗？",
        "我们都有什么爱好？",
    ],
)
def test_questions_asking_for_several_things_are_told_apart(query: str) -> None:
    assert asks_for_several(query)


@pytest.mark.parametrize("other_sessions", [(), ("s2",)], ids=["one session", "a user's sessions"])
def test_a_search_ranks_with_the_floor_for_what_the_query_asks(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, other_sessions: tuple[str, ...]
) -> None:
    import convmem._recall.conclude as recall_search

    asked: list[bool] = []
    real_rank = recall_search.rank

    def spy(evidence: Any, config: RecallConfig, *, several: bool = False, **asks: bool) -> Any:
        asked.append(several)
        return real_rank(evidence, config, several=several, **asks)

    monkeypatch.setattr(recall_search, "rank", spy)
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    dog_session(recall, store, "s2")
    assert "Duoduo" in texts(
        search(recall, store, "s1", "Which dogs have I adopted?", other_sessions=other_sessions)
    )
    assert "Duoduo" in texts(
        search(recall, store, "s1", "What is my corgi's name?", other_sessions=other_sessions)
    )
    assert asked == [True, False]


@pytest.mark.parametrize(
    "query",
    [
        "What is my dog's name?",
        "What was Caroline's favourite book?",
        "What does Melanie do to destress?",
        "When did Jon lose his job?",
        "Explain quicksort.",
        "Where has Maria made friends?",
        "我的狗叫什么名字？我现在住在哪个城市？",
        "我住在哪里？",
    ],
)
def test_questions_asking_for_one_thing_are_not_taken_for_lists(query: str) -> None:
    assert not asks_for_several(query)


# -- the real model ------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> SentenceTransformerEmbedder:
    pytest.importorskip("sentence_transformers")
    return SentenceTransformerEmbedder(device="cpu", show_progress=False)


def test_chinese_dog_name_is_recalled_ten_turns_later(minilm: SentenceTransformerEmbedder) -> None:
    store = InMemoryStore()
    recall = Recall(minilm)
    turns = [
        ("user", "我养了一只狗，品种是柯基，名字叫多多。"),
        ("assistant", "柯基很可爱！多多几岁了？"),
        ("user", "今天天气怎么样？"),
        ("assistant", "今天晴天，气温二十度左右。"),
        ("user", "推荐一本科幻小说吧。"),
        ("assistant", "可以读《三体》。"),
        ("user", "周末想去爬山。"),
        ("assistant", "记得带水和防晒。"),
        ("user", "晚饭吃什么好？"),
        ("assistant", "试试番茄炒蛋。"),
        ("user", "明天要开会，有点紧张。"),
        ("assistant", "提前准备好要点就不怕了。"),
    ]
    stored = store_messages(store, "zh", turns)
    recall.add("zh", stored)
    window = [m.seq or 0 for m in stored[-4:]]
    result = recall.search(
        "zh", "我的狗叫什么名字？", store=store, exclude_seqs=window, max_tokens=120, counter=COUNTER
    )
    assert "名字叫多多" in result.text
    assert result.best_score is not None


def test_minilm_recall_finds_a_paraphrased_question(
    minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    recall = Recall(minilm, index_dir=tmp_path / "m.db.vectors")
    stored = store_messages(
        store, "en", [("user", "My favourite dish is my grandmother's lasagna."), *FILLER]
    )
    recall.add("en", stored)
    result = recall.search(
        "en", "What food do I like best?", store=store, exclude_seqs=(), max_tokens=30, counter=COUNTER
    )
    assert "lasagna" in result.text
    store.close()


def test_minilm_recall_is_identical_after_the_index_file_is_deleted(
    minilm: SentenceTransformerEmbedder, tmp_path: Path
) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    first = Recall(minilm, index_dir=tmp_path / "v")
    first.add(
        "en", store_messages(store, "en", [("user", "My favourite dish is lasagna."), *FILLER]), store=store
    )
    first.close()
    before = first.search("en", "What food do I like?", store=store, max_tokens=200, counter=COUNTER)
    path = first.index_path("en")
    assert path is not None
    path.unlink()
    second = Recall(minilm, index_dir=tmp_path / "v")
    after = second.search("en", "What food do I like?", store=store, max_tokens=200, counter=COUNTER)
    assert [i.seqs for i in after.items] == [i.seqs for i in before.items]
    assert [i.score for i in after.items] == pytest.approx([i.score for i in before.items], abs=1e-5)
    store.close()


def test_asyncio_run_of_search_uses_the_async_embedder(store: SQLiteStore) -> None:
    recall = Recall(HashingEmbedder())
    dog_session(recall, store)
    result = asyncio.run(recall.asearch("s1", "corgi Duoduo", store=store, max_tokens=100, counter=COUNTER))
    assert "Duoduo" in result.text


# -- inside ConversationMemory --------------------------------------------------------


def test_memory_indexes_each_appended_message(store: SQLiteStore) -> None:
    from convmem import ConversationMemory, MemoryConfig

    recall = Recall(HashingEmbedder())
    memory = ConversationMemory(
        "s1", store, MemoryConfig(summary_trigger="never", extract_facts=False), recall=recall
    )
    memory.add("user", "My corgi is called Duoduo.")
    memory.add("assistant", "What a lovely name!")
    assert recall.stats("s1")["vectors"] >= 2
    assert recall.stats("s1")["pending"] == 0


def test_clearing_a_memory_forgets_its_vectors(store: SQLiteStore, index_dir: Path) -> None:
    from convmem import ConversationMemory, MemoryConfig

    recall = Recall(HashingEmbedder(), index_dir=index_dir)
    memory = ConversationMemory(
        "s1", store, MemoryConfig(summary_trigger="never", extract_facts=False), recall=recall
    )
    memory.add("user", "My corgi is called Duoduo.")
    recall.save()
    memory.clear()
    assert recall.stats("s1")["vectors"] == 0
    path = recall.index_path("s1")
    assert path is not None and not path.exists()


class StatsCountingStore(InMemoryStore):
    """Counts reads of a session's stats."""

    def __init__(self) -> None:
        super().__init__()
        self.stats_reads = 0

    def stats(self, session_id: str) -> Any:
        self.stats_reads += 1
        return super().stats(session_id)


def test_a_search_given_the_sessions_stats_reads_them_no_more_and_still_sees_newer_messages() -> None:
    store = StatsCountingStore()
    store_messages(store, "s1", FILLER)
    recall = Recall(None)
    recall.catch_up("s1", store)
    store_messages(store, "s1", [("user", "My sister opened a ramen shop in Osaka.")])
    stats = store.stats("s1")
    reads = store.stats_reads
    found = recall.search(
        "s1", "ramen sister", store=store, max_tokens=400, counter=COUNTER, session_stats=stats
    )
    assert store.stats_reads == reads
    assert any("ramen shop in Osaka" in item.text for item in found.items)
    # Stats older than what the mirror holds are read again, not trusted.
    store_messages(store, "s1", [("user", "The ramen shop is called Menya Sora.")])
    recall.search("s1", "ramen", store=store, max_tokens=400, counter=COUNTER)
    reads = store.stats_reads
    found = recall.search("s1", "ramen", store=store, max_tokens=400, counter=COUNTER, session_stats=stats)
    assert store.stats_reads == reads + 1
    assert any("Menya Sora" in item.text for item in found.items)


@pytest.mark.parametrize("wrong", ["s1", "other session"])
def test_session_stats_of_another_session_or_not_stats_at_all_are_refused(wrong: str) -> None:
    store = InMemoryStore()
    store_messages(store, "s1", FILLER)
    store_messages(store, "other session", FILLER)
    given = store.stats(wrong) if wrong != "s1" else {"session_id": "s1"}
    with pytest.raises(ConfigError, match=r"session_stats must be the SessionStats of session 's1'"):
        Recall(None).search(
            "s1",
            "ramen",
            store=store,
            max_tokens=400,
            counter=COUNTER,
            session_stats=given,  # type: ignore[arg-type]
        )


def test_a_build_with_a_question_reads_the_sessions_stats_once() -> None:
    store = StatsCountingStore()
    memory = ConversationMemory("s1", store)
    memory.add_turn("My sister opened a ramen shop in Osaka.", "How exciting!")
    for i in range(30):
        memory.add_turn(f"Question {i}: how do I sort a list in Python?", f"Use sorted(). ({i})")
    memory.build_context(query="Where is my sister's shop?")
    memory.add_turn("Thanks, and what about tuples?", "tuple(sorted(t)).")
    reads = store.stats_reads
    context = memory.build_context(query="Where is my sister's shop?", budget=300)
    assert store.stats_reads == reads + 1
    assert "Osaka" in context.memory_text
