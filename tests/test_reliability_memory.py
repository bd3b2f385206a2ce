"""Reliability and safety of `ConversationMemory` on every store (in memory, a real SQLite file,
a real Redis server and Cluster, a real PostgreSQL server): concurrent writers, crashes, outages,
failing models, retention, isolation between sessions and hostile input."""

from __future__ import annotations

import asyncio
import json
import logging
import multiprocessing
import os
import re
import signal
import sqlite3
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
import redis.cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from postgres_server import drop_schema, new_schema
from redis_server import (
    RedisServer,
    delete_prefix,
    new_prefix,
    open_shared_store,
)
from shared_stores import SERVER_KINDS, Location, location_for

from convmem import (
    AsyncPostgresStore,
    AsyncRedisStore,
    ConfigError,
    ConversationMemory,
    HashingEmbedder,
    InMemoryStore,
    InvalidMessageError,
    InvalidSessionIdError,
    MemoryConfig,
    Message,
    PostgresStore,
    Recall,
    RedisStore,
    SQLiteStore,
    Store,
    StoreError,
    aexpire_idle,
    aforget_session,
    aforget_user,
    expire_idle,
    forget_session,
    forget_user,
)
from convmem._derived.facts import HISTORY_KEPT, FactBook
from convmem._derived.records import FACTS_KEY, SUMMARY_KEY
from convmem._stores.redis.store import _escape

KINDS = ["memory", "sqlite", *SERVER_KINDS]
SHARED_KINDS = ["sqlite", *SERVER_KINDS]


# -- stores ------------------------------------------------------------------------------------


class Backend:
    """One store of one kind, plus raw access to what it keeps underneath."""

    def __init__(self, kind: str, folder: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self.server: Location | None = None
        if kind in ("memory", "sqlite"):
            self.prefix = new_prefix()
            self.location = str(folder / "memory.db")
        else:
            self.server = location_for(kind, request)
            self.prefix, self.location = self.server.namespace, self.server.url
        self.store: Store = (
            InMemoryStore() if kind == "memory" else open_shared_store(kind, self.location, self.prefix)
        )

    def close(self) -> None:
        self.store.close()
        if self.server is not None:
            self.server.cleanup()

    def _redis(self, **options: Any) -> Any:
        if self.kind == "redis-cluster":
            return redis.cluster.RedisCluster.from_url(self.location, **options)
        return redis.Redis.from_url(self.location, **options)

    def corrupt_message(self, session_id: str, seq: int, raw: str) -> None:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.location)) as conn, conn:
                conn.execute(
                    "UPDATE messages SET content = ? WHERE session_id = ? AND seq = ?", (raw, session_id, seq)
                )
        elif self.kind == "postgres":
            with psycopg.connect(self.location, autocommit=True) as conn:
                conn.execute(
                    f'UPDATE "{self.prefix}".messages SET content = %s WHERE session_id = %s AND seq = %s',
                    (raw, session_id, seq),
                )
        elif self.kind.startswith("redis"):
            with closing(self._redis()) as client:
                client.hset(f"{self.prefix}:session:{{{_escape(session_id)}}}:log", str(seq), raw)
        else:
            raise ValueError("an in-memory store keeps objects, not text that could be damaged")

    def leftovers(self, session_id: str, markers: Sequence[str]) -> list[str]:
        """Whatever of `session_id` (or text containing `markers`) is still kept underneath the store."""
        if self.kind == "sqlite":
            return self._sqlite_leftovers(session_id, markers)
        if self.kind == "postgres":
            return self._postgres_leftovers(session_id, markers)
        if self.kind.startswith("redis"):
            return self._redis_leftovers(session_id, markers)
        return []

    def _sqlite_leftovers(self, session_id: str, markers: Sequence[str]) -> list[str]:
        found = []
        with closing(sqlite3.connect(self.location)) as conn:
            for table in ("sessions", "messages", "state"):
                (count,) = conn.execute(
                    f"SELECT count(*) FROM {table} WHERE session_id = ?", (session_id,)
                ).fetchone()
                if count:
                    found.append(f"{count} rows in {table}")
        # The bytes on disk, write-ahead log included: deleted text must not linger there either.
        for path in Path(self.location).parent.glob(Path(self.location).name + "*"):
            data = path.read_bytes()
            found.extend(f"{marker!r} in {path.name}" for marker in markers if marker.encode() in data)
        return found

    def _postgres_leftovers(self, session_id: str, markers: Sequence[str]) -> list[str]:
        found = []
        schema = f'"{self.prefix}"'
        with psycopg.connect(self.location, autocommit=True) as conn:
            for table in ("sessions", "messages", "state"):
                (count,) = conn.execute(
                    f"SELECT count(*) FROM {schema}.{table} WHERE session_id = %s", (session_id,)
                ).fetchone() or (0,)
                if count:
                    found.append(f"{count} rows in {table}")
            for marker in markers:
                pattern = f"%{marker}%"
                (count,) = conn.execute(
                    f"SELECT (SELECT count(*) FROM {schema}.messages WHERE content LIKE %s)"
                    f" + (SELECT count(*) FROM {schema}.state WHERE value LIKE %s)",
                    (pattern, pattern),
                ).fetchone() or (0,)
                if count:
                    found.append(f"{marker!r} in {count} rows")
        return found

    def _redis_leftovers(self, session_id: str, markers: Sequence[str]) -> list[str]:
        escaped = _escape(session_id)
        found = []
        with closing(self._redis(decode_responses=True)) as client:
            for key in map(str, client.scan_iter(match=f"{self.prefix}:*", count=1000)):
                if f":session:{{{escaped}}}:" in key:
                    found.append(f"key {key}")
                kind = str(client.type(key))
                if kind == "set":
                    if escaped in {str(m) for m in client.smembers(key)}:
                        found.append(f"{escaped} in set {key}")
                elif kind == "hash":
                    values = "\n".join(str(v) for v in client.hvals(key))
                    found.extend(f"{marker!r} in {key}" for marker in markers if marker in values)
        return found


@pytest.fixture(params=KINDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = Backend(request.param, tmp_path, request)
    yield chosen
    chosen.close()


@pytest.fixture(params=SHARED_KINDS)
def shared_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    chosen = Backend(request.param, tmp_path, request)
    yield chosen
    chosen.close()


# -- models that show what they were given -----------------------------------------------------------


class RangeSummarizer:
    """Appends "[first-last]" for every call, so the summary shows which seqs it folded in, in order."""

    def __init__(self) -> None:
        self.broken = threading.Event()
        self.hang = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Event()

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        self.entered.set()
        if self.hang.is_set():
            self.release.wait(30)
        if self.broken.is_set():
            raise RuntimeError("the summary model is unavailable")
        seqs = [m.seq or 0 for m in messages]
        return f"{previous_summary or ''} [{seqs[0]}-{seqs[-1]}]".strip()

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        return self.summarize(previous_summary, messages, max_tokens=max_tokens)


class StallingSummarizer(RangeSummarizer):
    """Summarizes normally, then on call `stall_on` records what it was given and sleeps (to be killed)."""

    def __init__(self, stall_on: int, marker: Path) -> None:
        super().__init__()
        self.stall_on = stall_on
        self.marker = marker
        self.calls = 0

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        self.calls += 1
        if self.calls == self.stall_on:
            seen = {"previous": previous_summary or "", "first_seq": messages[0].seq}
            partial = self.marker.with_suffix(".tmp")
            partial.write_text(json.dumps(seen))
            partial.replace(self.marker)  # the parent sees all of it or nothing
            time.sleep(600)
        return super().summarize(previous_summary, messages, max_tokens=max_tokens)


class SwitchableExtractor:
    """The default rule extractor, which a test can break or make hang."""

    def __init__(self) -> None:
        from convmem import RuleFactExtractor

        self.rules = RuleFactExtractor()
        self.broken = threading.Event()
        self.hang = threading.Event()
        self.release = threading.Event()

    def extract(self, messages: Sequence[Message]) -> list[Any]:
        if self.hang.is_set():
            self.release.wait(30)
        if self.broken.is_set():
            raise RuntimeError("the fact model is unavailable")
        return self.rules.extract(messages)

    async def aextract(self, messages: Sequence[Message]) -> list[Any]:
        return self.extract(messages)


class ForgetRecorder:
    """A recall engine stand-in: remembers which sessions it was told to forget."""

    def __init__(self, fail_for: str | None = None) -> None:
        self.forgotten: list[str] = []
        self.fail_for = fail_for

    def forget(self, session_id: str) -> None:
        if session_id == self.fail_for:
            raise OSError(f"index file of {session_id} is read-only")
        self.forgotten.append(session_id)


def summarizing(**changes: Any) -> MemoryConfig:
    """Summarize after every evicted turn, keep two turns raw: derived state changes on every add."""
    base = MemoryConfig(
        budget=1000, keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1, language="en"
    )
    return base.replace(**changes)


def covered_ranges(summary_text: str) -> list[tuple[int, int]]:
    return [(int(a), int(b)) for a, b in re.findall(r"\[(\d+)-(\d+)\]", summary_text)]


def assert_exact_cover(summary_text: str, through: int) -> None:
    """The summary folded in every seq 1..through exactly once, in order."""
    expected = 1
    for first, last in covered_ranges(summary_text):
        assert first == expected, summary_text
        expected = last + 1
    assert expected == through + 1, summary_text


def assert_summary_complete(memory: ConversationMemory) -> None:
    """After summarize_now the summary covers exactly everything before the recent window."""
    memory.summarize_now()
    summary = memory.summary()
    window_start = memory.recent_turns(memory.config.keep_recent_turns)[0].first_seq
    assert summary.covers_through_seq == window_start - 1
    assert_exact_cover(summary.text, summary.covers_through_seq)


def context_text(memory: ConversationMemory, query: str | None = None, budget: int = 2000) -> str:
    return "\n".join(str(m["content"]) for m in memory.build_context(query=query, budget=budget).messages)


# -- concurrency: processes x threads on one session ------------------------------------------------

SHARED_SESSION = "team:chat*"
WRITER_PROCESSES = 3
WRITER_THREADS = 3
TURNS_PER_WRITER = 6

Ack = tuple[str, int]  # writer tag, seq of the question


def name_for(tag: str) -> str:
    """A name only this writer step uses, in letters so that the fact rules accept it."""
    return "Zed" + "".join("abcdefghij"[int(d)] for d in re.sub(r"\D", "", tag))


def converse(store: Store, process: int, threads: int) -> list[Ack]:
    """`threads` threads, each with its own memory on `store`, add turns to the shared session."""
    acks: list[Ack] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def work(thread: int) -> None:
        memory = ConversationMemory(
            SHARED_SESSION, store, summarizing(), summarizer=RangeSummarizer(), user_id="ana"
        )
        try:
            for step in range(TURNS_PER_WRITER):
                tag = f"p{process}t{thread}n{step:02d}"
                turn = memory.add_turn(f"{tag} My name is {name_for(tag)}.", f"{tag} noted.")
                with lock:
                    acks.append((tag, turn.messages[0].seq or 0))
        except BaseException as exc:  # reported to the caller below
            failures.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return acks


_start_together: Any = None


def wait_for_each_other(barrier: Any) -> None:
    """Pool initializer: keep the barrier that lets every child start writing at the same moment."""
    global _start_together
    _start_together = barrier


def converse_in_child(kind: str, location: str, prefix: str, process: int) -> list[Ack]:
    store = open_shared_store(kind, location, prefix)
    # Children start one by one; without this the first would be done before the last began.
    _start_together.wait(timeout=60)
    try:
        return converse(store, process, WRITER_THREADS)
    finally:
        store.close()


def check_shared_conversation(store: Store, acks: list[Ack]) -> None:
    log = store.messages(SHARED_SESSION)
    assert [m.seq for m in log] == list(range(1, len(log) + 1))
    assert len(log) == 2 * len(acks)
    assert [text for text, count in Counter(m.text for m in log).items() if count > 1] == []
    by_seq = {m.seq: m.text for m in log}
    for tag, seq in acks:
        assert by_seq[seq] == f"{tag} My name is {name_for(tag)}."
        assert by_seq[seq + 1] == f"{tag} noted."
    by_writer: dict[str, list[int]] = defaultdict(list)
    for tag, seq in acks:
        by_writer[tag.split("n")[0]].append(seq)
    assert all(seqs == sorted(seqs) for seqs in by_writer.values())

    # One more message in a fresh memory brings the facts up to date; then fold in the evicted turns.
    memory = ConversationMemory(
        SHARED_SESSION, store, summarizing(), summarizer=RangeSummarizer(), user_id="ana"
    )
    memory.add("user", "That is all for today.")
    assert_summary_complete(memory)
    assert memory.summary().covers_through_seq == len(log) - 2

    record = store.get_state(SHARED_SESSION, FACTS_KEY)
    assert record is not None
    facts_state = json.loads(record.value)
    assert facts_state["covers_through_seq"] == len(log) + 1
    names_in_order = [
        text.split("My name is ")[1].rstrip(".") for _, text in sorted(by_seq.items()) if "My name" in text
    ]
    book = FactBook.from_json(facts_state["book"])
    # Every name, in order, as far as the book keeps them (the newest HISTORY_KEPT).
    assert [fact.value for fact in book.history("name")] == names_in_order[-HISTORY_KEPT:]
    assert {f.key: f.value for f in memory.facts()}["name"] == names_in_order[-1]


def test_threads_sharing_an_in_memory_session_keep_every_turn_and_exact_watermarks() -> None:
    store = InMemoryStore()
    acks = converse(store, 0, WRITER_PROCESSES * WRITER_THREADS)
    check_shared_conversation(store, acks)


def test_processes_and_threads_sharing_a_session_keep_every_turn_and_exact_watermarks(
    shared_backend: Backend,
) -> None:
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(WRITER_PROCESSES)
    with context.Pool(WRITER_PROCESSES, initializer=wait_for_each_other, initargs=(barrier,)) as pool:
        results = pool.starmap(
            converse_in_child,
            [
                (shared_backend.kind, shared_backend.location, shared_backend.prefix, p)
                for p in range(WRITER_PROCESSES)
            ],
        )
    acks = [ack for result in results for ack in result]
    assert len(acks) == WRITER_PROCESSES * WRITER_THREADS * TURNS_PER_WRITER
    check_shared_conversation(shared_backend.store, acks)


# -- crash safety -----------------------------------------------------------------------------------------


def talk_until_killed(kind: str, location: str, prefix: str, ack_path: str, marker: str) -> None:
    """Run in a child: add turns, logging each acknowledged one, until the summarizer stalls."""
    store = open_shared_store(kind, location, prefix)
    memory = ConversationMemory("crash", store, summarizing(), summarizer=StallingSummarizer(6, Path(marker)))
    acks = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    step = 0
    while True:
        turn = memory.add_turn(f"question {step}?", f"answer {step}.")
        # One write() per line: a line in the file means add_turn had returned.
        os.write(acks, f"{step} {turn.messages[0].seq}\n".encode())
        step += 1


def wait_for_file(path: Path, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path.name} did not appear within {timeout} s")
        time.sleep(0.01)


def test_a_writer_killed_while_summarizing_leaves_every_acknowledged_turn_and_a_resumable_summary(
    shared_backend: Backend, tmp_path: Path
) -> None:
    ack_path, marker = tmp_path / "acks.txt", tmp_path / "stalled.json"
    writer = multiprocessing.get_context("spawn").Process(
        target=talk_until_killed,
        args=(
            shared_backend.kind,
            shared_backend.location,
            shared_backend.prefix,
            str(ack_path),
            str(marker),
        ),
    )
    writer.start()
    try:
        wait_for_file(marker)
    finally:
        os.kill(writer.pid or 0, signal.SIGKILL)
        writer.join()
    assert writer.exitcode == -signal.SIGKILL
    stalled = json.loads(marker.read_text())

    shared_backend.store.close()
    store = open_shared_store(shared_backend.kind, shared_backend.location, shared_backend.prefix)
    shared_backend.store = store
    log = store.messages("crash")
    by_seq = {m.seq: m.text for m in log}
    acks = [line.split() for line in ack_path.read_text().splitlines()]
    assert acks, "the writer acknowledged turns before it stalled"
    for step, seq in acks:
        assert (by_seq[int(seq)], by_seq[int(seq) + 1]) == (f"question {step}?", f"answer {step}.")
    assert [m.seq for m in log] == list(range(1, len(log) + 1))
    assert len(log) % 2 == 0, "half of a turn was stored"

    memory = ConversationMemory("crash", store, summarizing(), summarizer=RangeSummarizer())
    # The summary is the last one committed: exactly what the stalled call had started from.
    assert memory.summary().text == stalled["previous"]
    assert memory.summary().covers_through_seq == stalled["first_seq"] - 1
    assert_summary_complete(memory)


# -- faults ------------------------------------------------------------------------------------------------


@pytest.mark.redis
def test_redis_stopped_mid_conversation_gives_store_errors_and_the_memory_recovers(
    private_redis: RedisServer,
) -> None:
    store = RedisStore(private_redis.url, prefix="outage", socket_timeout=2)
    memory = ConversationMemory("chat", store, summarizing(), summarizer=RangeSummarizer(), user_id="ana")
    for step in range(5):
        memory.add_turn(f"question {step}?", f"answer {step}.")
    private_redis.kill()

    with pytest.raises(StoreError, match="check that Redis is running"):
        memory.add_turn("lost question?", "lost answer.")
    with pytest.raises(StoreError, match="check that Redis is running"):
        memory.build_context(query="anything?")
    with pytest.raises(StoreError, match=rf"127\.0\.0\.1:{private_redis.port}"):
        memory.add("user", "also lost")

    private_redis.start()
    texts = [m.text for m in memory.messages()]
    assert texts == [t for step in range(5) for t in (f"question {step}?", f"answer {step}.")]
    turn = memory.add_turn("back again?", "yes.")
    assert [m.seq for m in turn.messages] == [11, 12]
    assert "back again?" in context_text(memory, "and now?")
    assert_summary_complete(memory)
    store.close()


def test_a_failing_summarizer_and_extractor_lose_no_turn_and_catch_up_later(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    summarizer, extractor = RangeSummarizer(), SwitchableExtractor()
    summarizer.broken.set()
    extractor.broken.set()
    config = summarizing(background=True, background_timeout=5.0)
    memory = ConversationMemory("s", backend.store, config, summarizer=summarizer, fact_extractor=extractor)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        memory.add_turn("My name is Quill.", "Hello Quill.")
        for step in range(5):
            memory.add_turn(f"question {step}?", f"answer {step}.")
        assert memory.flush(timeout=30)
    assert "unavailable" in caplog.text
    assert len(memory.messages()) == 12
    assert memory.summary().covers_through_seq == 0 and memory.facts() == []
    assert "question 4?" in context_text(memory, "what now?")
    memory.close()

    summarizer.broken.clear()
    extractor.broken.clear()
    # A process that starts later (no backoff left) folds in everything that was missed.
    later = ConversationMemory(
        "s", backend.store, summarizing(), summarizer=summarizer, fact_extractor=extractor
    )
    later.add("user", "ok.")
    assert {f.key: f.value for f in later.facts()} == {"name": "Quill"}
    assert_summary_complete(later)


def test_a_hanging_summarizer_and_extractor_time_out_and_lose_no_turn(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    threads_before = set(threading.enumerate())
    summarizer, extractor = RangeSummarizer(), SwitchableExtractor()
    summarizer.hang.set()
    extractor.hang.set()
    config = summarizing(background=True, background_timeout=0.2)
    memory = ConversationMemory("s", backend.store, config, summarizer=summarizer, fact_extractor=extractor)
    try:
        with caplog.at_level(logging.WARNING, logger="convmem"):
            memory.add_turn("My name is Quill.", "Hello Quill.")
            for step in range(5):
                memory.add_turn(f"question {step}?", f"answer {step}.")
            assert memory.flush(timeout=30)
        assert "timed out" in caplog.text
        assert len(memory.messages()) == 12
        assert "question 4?" in context_text(memory, "what now?")
    finally:
        summarizer.hang.clear()
        extractor.hang.clear()
        summarizer.release.set()
        extractor.release.set()
        memory.close()
        # Abandoned jobs go on in their threads and still use the store: let them end before it closes.
        for thread in set(threading.enumerate()) - threads_before:
            thread.join(timeout=30)
    later = ConversationMemory(
        "s", backend.store, summarizing(), summarizer=summarizer, fact_extractor=extractor
    )
    later.add("user", "ok.")
    assert {f.key: f.value for f in later.facts()} == {"name": "Quill"}
    assert_summary_complete(later)


# -- forget and retention ------------------------------------------------------------------------------------


def marker_for(session_id: str) -> str:
    """A word that only this session's messages contain."""
    return "mark" + uuid.uuid5(uuid.NAMESPACE_OID, session_id).hex[:10]


def populate(store: Store, session_id: str, user_id: str | None, recall: Any = None) -> ConversationMemory:
    """A session with a log, a summary and facts (and vectors, given a recall engine)."""
    marker = marker_for(session_id)
    memory = ConversationMemory(session_id, store, summarizing(), user_id=user_id, recall=recall)
    memory.add_turn(f"My name is Quill. I live in Oslo. My code word is {marker}.", f"Noted {marker}.")
    for step in range(4):
        memory.add_turn(f"question {step} about {marker}?", f"answer {step} about {marker}.")
    assert memory.summary().covers_through_seq > 0 and memory.facts()
    return memory


def snapshot(memory: ConversationMemory) -> tuple[Any, ...]:
    """What a session holds. Its user's facts are compared by key and value: a fact the
    user stated in two sessions survives the loss of one with the other's provenance."""
    return (
        memory.messages(),
        memory.summary(),
        memory.store.get_state(memory.session_id, FACTS_KEY),
        [(fact.key, fact.value) for fact in memory.facts()],
        context_text(memory, "hello?"),
    )


def assert_forgotten(backend: Backend, session_id: str, user_id: str | None = None) -> None:
    store, marker = backend.store, marker_for(session_id)
    assert store.messages(session_id) == [] and store.tail(session_id, 10) == []
    stats = store.stats(session_id)
    assert (stats.message_count, stats.last_seq, stats.user_id) == (0, 0, None)
    assert store.get_state(session_id, SUMMARY_KEY) is None and store.get_state(session_id, FACTS_KEY) is None
    assert session_id not in store.sessions()
    if user_id is not None:
        assert session_id not in store.sessions(user_id=user_id)
    fresh = ConversationMemory(session_id, store, summarizing())
    assert fresh.summary().text == "" and fresh.facts() == []
    assert marker not in context_text(fresh, "what is my code word?")
    assert backend.leftovers(session_id, [marker]) == []


@pytest.fixture
def recall(tmp_path: Path) -> Recall:
    """A real recall engine with vectors persisted to files, and no model to download."""
    return Recall(HashingEmbedder(64), index_dir=tmp_path / "vectors")


def test_forget_session_deletes_log_summary_facts_and_vectors_and_spares_other_sessions(
    backend: Backend, recall: Recall
) -> None:
    doomed = populate(backend.store, "a:*", "ana", recall)
    kept = populate(backend.store, "a", "ana", recall)
    before = snapshot(kept)
    doomed_vectors, kept_vectors = recall.index_path("a:*"), recall.index_path("a")
    assert doomed_vectors is not None and doomed_vectors.exists()

    forget_session(backend.store, "a:*", recall=recall)

    assert_forgotten(backend, "a:*", "ana")
    assert not doomed_vectors.exists()
    assert snapshot(kept) == before
    assert {fact.session_id for fact in kept.facts()} == {"a"}
    assert kept_vectors is not None and kept_vectors.exists()
    assert backend.store.sessions(user_id="ana") == ["a"]
    assert doomed.messages() == []


def test_forget_user_deletes_every_session_of_that_user_and_nothing_else(backend: Backend) -> None:
    for session_id, user_id in [("s1", "ana"), ("s2", "bob"), ("s3", "ana"), ("s4", None), ("ana", "ana*")]:
        populate(backend.store, session_id, user_id)
    kept = {s: snapshot(ConversationMemory(s, backend.store, summarizing())) for s in ("s2", "s4", "ana")}
    engine = ForgetRecorder()

    assert forget_user(backend.store, "ana", recall=engine) == ["s1", "s3"]

    assert engine.forgotten == ["s1", "s3"]
    for session_id in ("s1", "s3"):
        assert_forgotten(backend, session_id, "ana")
    assert backend.store.sessions() == ["ana", "s2", "s4"]
    for session_id, before in kept.items():
        assert snapshot(ConversationMemory(session_id, backend.store, summarizing())) == before
    assert forget_user(backend.store, "ana", recall=engine) == []


def test_expire_idle_deletes_only_sessions_idle_for_longer_than_the_age(backend: Backend) -> None:
    populate(backend.store, "old", "ana")
    time.sleep(0.3)
    boundary = time.time()
    time.sleep(0.3)
    fresh = populate(backend.store, "fresh", "ana")
    before = snapshot(fresh)
    engine = ForgetRecorder()

    assert expire_idle(backend.store, time.time() - boundary, recall=[engine]) == ["old"]

    assert engine.forgotten == ["old"]
    assert_forgotten(backend, "old", "ana")
    assert snapshot(fresh) == before
    assert expire_idle(backend.store, 3600) == []


def test_vectors_that_cannot_be_deleted_give_a_store_error_naming_the_session_and_a_retry_works(
    backend: Backend,
) -> None:
    populate(backend.store, "s1", "ana")
    populate(backend.store, "s2", "ana")
    failing = ForgetRecorder(fail_for="s1")
    with pytest.raises(
        StoreError, match=r"vectors of session\(s\) 's1' could not be deleted.*retry"
    ) as caught:
        forget_user(backend.store, "ana", recall=failing)
    assert isinstance(caught.value.__cause__, OSError)
    assert failing.forgotten == ["s2"]  # the other session's vectors were still deleted
    assert backend.store.sessions() == []
    working = ForgetRecorder()
    forget_session(backend.store, "s1", recall=working)
    assert working.forgotten == ["s1"]


def test_retention_rejects_bad_arguments_before_deleting_anything(backend: Backend) -> None:
    memory = populate(backend.store, "s", "ana")
    with pytest.raises(InvalidSessionIdError, match="control character"):
        forget_session(backend.store, "s\x00")
    with pytest.raises(InvalidSessionIdError, match="limit is 256"):
        forget_user(backend.store, "a" * 10_000)
    with pytest.raises(ConfigError, match=r"forget\(session_id\)"):
        forget_session(backend.store, "s", recall=object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"pass memory\.store"):
        forget_session(memory, "s")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="older_than_seconds"):
        expire_idle(backend.store, -1)
    assert backend.store.sessions() == ["s"]
    assert len(memory.messages()) == 10


@pytest.mark.redis
def test_async_retention_works_on_an_async_redis_store(redis_url: str) -> None:
    prefix = new_prefix()
    sync_store = RedisStore(redis_url, prefix=prefix)
    populate(sync_store, "s1", "ana")
    populate(sync_store, "s2", "ana")
    populate(sync_store, "s3", None)
    engine = ForgetRecorder()

    async def scenario() -> tuple[list[str], list[str]]:
        store = AsyncRedisStore(redis_url, prefix=prefix)
        try:
            await aforget_session(store, "s3", recall=engine)
            deleted = await aforget_user(store, "ana", recall=engine)
            expired = await aexpire_idle(store, 3600, recall=engine)
            return deleted, expired
        finally:
            await store.close()

    try:
        assert asyncio.run(scenario()) == (["s1", "s2"], [])
        assert engine.forgotten == ["s3", "s1", "s2"]
        assert sync_store.sessions() == []
        with pytest.raises(ConfigError, match="asyncio store"):
            forget_session(AsyncRedisStore(redis_url, prefix=prefix), "s1")  # type: ignore[arg-type]
    finally:
        sync_store.close()
        delete_prefix(redis_url, prefix)


@pytest.mark.postgres
def test_async_retention_works_on_an_async_postgres_store(postgres_url: str) -> None:
    schema = new_schema()
    sync_store = PostgresStore(postgres_url, schema=schema)
    populate(sync_store, "s1", "ana")
    populate(sync_store, "s2", "ana")
    populate(sync_store, "s3", None)
    engine = ForgetRecorder()

    async def scenario() -> tuple[list[str], list[str], list[str]]:
        async with AsyncPostgresStore(postgres_url, schema=schema) as store:
            await aforget_session(store, "s3", recall=engine)
            deleted = await aforget_user(store, "ana", recall=engine)
            expired = await aexpire_idle(store, 3600, recall=engine)
            return deleted, expired, await store.sessions()

    try:
        assert asyncio.run(scenario()) == (["s1", "s2"], [], [])
        assert engine.forgotten == ["s3", "s1", "s2"]
        assert sync_store.sessions() == []
        with pytest.raises(ConfigError, match="asyncio store"):
            forget_session(AsyncPostgresStore(postgres_url, schema=schema), "s1")  # type: ignore[arg-type]
    finally:
        sync_store.close()
        drop_schema(postgres_url, schema)


def test_async_retention_works_on_a_sync_store(backend: Backend) -> None:
    populate(backend.store, "s1", "ana")
    assert asyncio.run(aforget_user(backend.store, "ana")) == ["s1"]
    assert_forgotten(backend, "s1", "ana")


def test_a_summary_in_flight_while_a_session_is_forgotten_is_not_written_back() -> None:
    store = InMemoryStore()
    summarizer = RangeSummarizer()
    summarizer.hang.set()
    memory = ConversationMemory("s", store, summarizing(background=True), summarizer=summarizer)
    for step in range(4):
        memory.add_turn(f"secret {step}?", f"answer {step}.")
    assert summarizer.entered.wait(10)
    forget_session(store, "s")
    summarizer.release.set()
    assert memory.flush(timeout=30)
    memory.close()
    assert store.get_state("s", SUMMARY_KEY) is None
    assert store.sessions() == []


# -- isolation between sessions (property) ----------------------------------------------------------------------

ISOLATION_SESSIONS = ["a", "a*", "a:log", "../a"]
WORDS_PER_SESSION = 5


def session_words(index: int) -> list[str]:
    """Marker words of one session: no other session's text contains them."""
    return [f"mk{index}{k}x" for k in range(WORDS_PER_SESSION)]


def session_name(index: int, word: int) -> str:
    return "Zed" + "abcd"[index] + "abcde"[word]


Write = tuple[int, list[int], bool]  # session index, word indices, whether the user states a name

writes_strategy = st.lists(
    st.tuples(
        st.integers(0, len(ISOLATION_SESSIONS) - 1),
        st.lists(st.integers(0, WORDS_PER_SESSION - 1), min_size=1, max_size=4),
        st.booleans(),
    ),
    min_size=1,
    max_size=10,
)


def fresh_store(kind: str, folder: Path, request: pytest.FixtureRequest) -> tuple[Store, Any]:
    if kind == "memory":
        return InMemoryStore(), lambda: None
    if kind == "sqlite":
        sqlite_store = SQLiteStore(folder / f"{uuid.uuid4().hex}.db")
        return sqlite_store, sqlite_store.close
    location = location_for(kind, request)
    server_store = location.open()

    def cleanup() -> None:
        server_store.close()
        location.cleanup()

    return server_store, cleanup


@pytest.mark.parametrize("kind", KINDS)
def test_no_context_summary_or_fact_of_a_session_holds_text_written_only_to_another(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    all_markers = {
        i: session_words(i) + [session_name(i, k) for k in range(WORDS_PER_SESSION)] for i in range(4)
    }

    @settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(writes=writes_strategy, budget=st.sampled_from([150, 400, 2000]))
    def check(writes: list[Write], budget: int) -> None:
        store, cleanup = fresh_store(kind, tmp_path, request)
        try:
            memories = [ConversationMemory(s, store, summarizing()) for s in ISOLATION_SESSIONS]
            last_word: dict[int, str] = {}
            for index, words, states_name in writes:
                text = " ".join(session_words(index)[w] for w in words)
                if states_name:
                    text += f". My name is {session_name(index, words[0])}"
                memories[index].add_turn(f"{text}.", f"ok {session_words(index)[words[-1]]}.")
                last_word[index] = session_words(index)[words[-1]]
            for index, memory in enumerate(memories):
                foreign = [m for other, markers in all_markers.items() if other != index for m in markers]
                query = f"what about {session_words(index)[0]}?"
                seen = context_text(memory, query, budget)
                seen += "\n" + memory.summary().text + "\n" + " ".join(f.value for f in memory.facts())
                assert [m for m in foreign if m in seen] == [], ISOLATION_SESSIONS[index]
                if budget == 2000 and index in last_word:
                    assert last_word[index] in seen  # the check looks at real contexts
        finally:
            cleanup()

    check()


# -- bad input at the facade ---------------------------------------------------------------------------------------------

HOSTILE_IDS = [
    "../x",
    "../../etc/passwd",
    "*",
    "?",
    "a:b",
    "a:b:log",
    "x:session:y:meta",
    "[ab]",
    "{t}",
    "%2A",
    "会话",
]


def test_hostile_session_ids_are_kept_apart_and_forgotten_one_by_one(backend: Backend) -> None:
    memories = {s: ConversationMemory(s, backend.store, summarizing(), user_id=s) for s in HOSTILE_IDS}
    for session_id, memory in memories.items():
        memory.add_turn(f"my code word is {marker_for(session_id)}.", "noted.")
    for session_id, memory in memories.items():
        seen = context_text(memory, "what is my code word?")
        assert [s for s in HOSTILE_IDS if marker_for(s) in seen] == [session_id]
    forget_session(backend.store, "*")
    assert forget_user(backend.store, "?") == ["?"]
    assert_forgotten(backend, "*")
    assert backend.store.sessions() == sorted(set(HOSTILE_IDS) - {"*", "?"})
    for session_id in set(HOSTILE_IDS) - {"*", "?"}:
        assert marker_for(session_id) in context_text(memories[session_id])


@pytest.mark.parametrize("bad_id", ["a\x00b", "x" * 10_000, "", "line\nbreak"])
def test_unusable_session_and_user_ids_are_rejected_and_nothing_is_stored(
    backend: Backend, bad_id: str
) -> None:
    with pytest.raises(InvalidSessionIdError, match="session_id"):
        ConversationMemory(bad_id, backend.store)
    with pytest.raises(InvalidSessionIdError, match="user_id"):
        ConversationMemory("s", backend.store, user_id=bad_id)
    assert backend.store.sessions() == []


def huge_text(size: int) -> str:
    """Exactly `size` characters of varied words (tokenizers crawl over one repeated character)."""
    chunk = " ".join(f"{word}{i}" for i, word in enumerate(["river", "stone", "cloud", "maple"] * 250))
    return (chunk * (size // len(chunk) + 1))[:size]


def test_a_10_mb_message_is_rejected_by_default_and_nothing_is_stored(backend: Backend) -> None:
    memory = ConversationMemory("s", backend.store)
    with pytest.raises(InvalidMessageError, match="max_message_chars=1000000"):
        memory.add("user", huge_text(10_000_000))
    assert memory.messages() == [] and backend.store.sessions() == []


def test_a_10_mb_message_is_stored_once_when_the_limit_is_raised(backend: Backend) -> None:
    huge = huge_text(10_000_000)
    # Fact rules and summaries are off: this test is about the log, not about the rules' speed.
    config = MemoryConfig(
        max_message_chars=10_000_000,
        max_message_bytes=20_000_000,
        extract_facts=False,
        summary_trigger="never",
    )
    memory = ConversationMemory("s", backend.store, config)
    memory.add("user", "before")
    memory.add("user", huge)
    memory.add("assistant", "that is long")
    assert [len(m.text) for m in memory.messages()] == [6, 10_000_000, 12]
    assert memory.messages()[1].text == huge
    assert memory.build_context(query="and?", budget=300).token_count <= 300


@pytest.mark.parametrize("damage", ["{broken", "null"])
def test_a_malformed_stored_message_fails_only_its_own_session(shared_backend: Backend, damage: str) -> None:
    bad = ConversationMemory("bad", shared_backend.store, summarizing())
    good = ConversationMemory("good", shared_backend.store, summarizing())
    for memory in (bad, good):
        memory.add_turn("question?", "answer.")
    shared_backend.corrupt_message("bad", 2, damage)
    with pytest.raises(
        StoreError, match=r"seq=2 of session 'bad' is malformed.*other sessions are unaffected"
    ):
        bad.build_context(query="hi?")
    assert "answer." in context_text(good, "hi?")
    good.add_turn("more?", "yes.")
    assert len(good.messages()) == 4


def test_a_malformed_stored_summary_fails_only_its_own_session(backend: Backend) -> None:
    bad = ConversationMemory("bad", backend.store, summarizing())
    good = ConversationMemory("good", backend.store, summarizing())
    for memory in (bad, good):
        for step in range(4):
            memory.add_turn(f"question {step}?", f"answer {step}.")
    backend.store.put_state("bad", SUMMARY_KEY, "{not json")
    with pytest.raises(StoreError, match="stored summary of session 'bad' is malformed"):
        bad.build_context(query="hi?")
    assert "answer 3." in context_text(good, "hi?")
    bad.store.delete_state("bad", SUMMARY_KEY)  # the summary is derived: deleting it repairs the session
    assert_summary_complete(
        ConversationMemory("bad", backend.store, summarizing(), summarizer=RangeSummarizer())
    )
