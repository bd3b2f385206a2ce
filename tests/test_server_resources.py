"""A server that runs for months keeps its file descriptors and threads flat.

Threads come and go in a server (a thread per request, executors that grow
and shrink); nothing convmem holds per thread may outlive the thread.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from convmem import ConversationMemory, MemoryConfig, Message, SQLiteStore, TiktokenCounter, TokenCounter
from convmem._context.costs import MESSAGES_KEPT, TEXTS_KEPT
from convmem._derived.background import DEFAULT_WORKERS, WorkerPool, model_calls, shared_pool

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def run_in_new_threads(count: int, work: object) -> None:
    for index in range(count):
        thread = threading.Thread(target=work, args=(index,))  # type: ignore[arg-type]
        thread.start()
        thread.join()


# -- SQLite connections ---------------------------------------------------------------------------------


def test_short_lived_threads_leave_no_sqlite_connections_open(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    store.append("warm-up", [Message.create("user", "hi")])
    before = open_fds()

    def append_and_read(index: int) -> None:
        session = f"s{index % 50}"
        store.append(session, [Message.create("user", f"message {index}")])
        assert store.tail(session, 1)[0].text == f"message {index}"

    run_in_new_threads(5_000, append_and_read)
    assert abs(open_fds() - before) <= 10
    assert sum(store.stats(f"s{n}").message_count for n in range(50)) == 5_000
    store.close()


def test_bursts_of_concurrent_threads_do_not_accumulate_connections(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db", pool_size=2)

    def burst() -> None:
        barrier = threading.Barrier(16)

        def append_together(index: int) -> None:
            barrier.wait()
            store.append("s", [Message.create("user", f"message {index}")])

        threads = [threading.Thread(target=append_together, args=(n,)) for n in range(16)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Up to 16 connections (two descriptors each: the database and its -wal) are open
    # during a burst. Afterwards the pool keeps two; SQLite keeps the descriptors of the
    # others for its next opens of the file. So the count follows the peak number of
    # threads inside the store at once, never the number of threads there ever were.
    before = open_fds()
    for _ in range(33):
        burst()
    assert open_fds() - before <= 16 * 2 + 10
    assert store.stats("s").message_count == 33 * 16
    assert store._pool.idle_count <= 2
    store.close()


def test_close_releases_every_pooled_connection(tmp_path: Path) -> None:
    before = open_fds()
    store = SQLiteStore(tmp_path / "memory.db")
    run_in_new_threads(20, lambda n: store.append("s", [Message.create("user", f"m{n}")]))
    store.close()
    assert open_fds() <= before


# -- background threads -----------------------------------------------------------------------------------


class HangingSummarizer:
    """Hangs on every call until released, like a model endpoint that stopped answering."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.calls = 0
        self._lock = threading.Lock()

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        with self._lock:
            self.calls += 1
        self.release.wait(60)
        return "a summary"

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        return self.summarize(previous_summary, messages, max_tokens=max_tokens)


def summarizing_every_turn(**changes: Any) -> MemoryConfig:
    return MemoryConfig(
        keep_recent_turns=1, summary_trigger="turns", summary_every_turns=1, language="en", **changes
    )


def settle(pool: WorkerPool) -> None:
    """Wait (bounded) until jobs abandoned by a test have returned, so the next test starts clean."""
    deadline = time.monotonic() + 60
    while pool.stats()["abandoned"] and time.monotonic() < deadline:
        time.sleep(0.05)


def test_two_thousand_background_memories_share_a_few_threads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    memories = []

    def open_and_add(first: int, count: int) -> None:
        for index in range(first, first + count):
            memory = ConversationMemory(f"s{index}", store, MemoryConfig(background=True))
            memory.add_turn("My name is Quill.", f"Nice to meet you ({index}).")
            memories.append(memory)
        for memory in memories:
            assert memory.flush(timeout=60)

    # The first memories fill the worker pool and the store's connection pool, both bounded:
    # measure from there, so what is checked is growth with the number of memories.
    open_and_add(0, 100)
    gc.collect()  # objects earlier tests left for the collector would close their files mid-count
    threads_before, fds_before = threading.active_count(), open_fds()
    open_and_add(100, 1_900)
    assert threading.active_count() - threads_before <= 10
    assert abs(open_fds() - fds_before) <= 10
    assert {f.key: f.value for f in memories[1_999].facts()} == {"name": "Quill"}
    for memory in memories:
        memory.close()
    store.close()


def test_retries_against_a_hung_summarizer_do_not_start_more_threads(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    summarizer = HangingSummarizer()
    config = summarizing_every_turn(background=True, background_timeout=0.2, extract_facts=False)
    threads_before = threading.active_count()
    try:
        with caplog.at_level(logging.WARNING, logger="convmem"):
            for step in range(20):
                # A new memory each time has no backoff left, so every one of them retries at once.
                memory = ConversationMemory("s", store, config, summarizer=summarizer)
                memory.add_turn(f"question {step}?", f"answer {step}.")
                assert memory.flush(timeout=30)
        assert summarizer.calls == 1
        assert "still running" in caplog.text
        assert threading.active_count() - threads_before <= 10
        assert len(store.messages("s")) == 40
    finally:
        summarizer.release.set()
        settle(shared_pool())
        store.close()


def test_a_hung_summarizer_in_many_sessions_holds_one_thread_per_session_and_none_of_the_pool(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "memory.db")
    summarizer = HangingSummarizer()
    config = summarizing_every_turn(background=True, background_timeout=0.2, extract_facts=False)
    threads_before = threading.active_count()
    try:
        memories = [ConversationMemory(f"s{n}", store, config, summarizer=summarizer) for n in range(40)]
        for memory in memories:
            memory.add_turn("first question?", "first answer.")
            memory.add_turn("second question?", "second answer.")
        for memory in memories:
            assert memory.flush(timeout=30)
        settle(shared_pool())  # a worker given up at background_timeout comes back without the model
        # Each session's model call, left to end in its own thread (never one per retry), and
        # the pool's own threads: no worker waits on a hung session, so none starves the others.
        assert shared_pool().stats()["abandoned"] == 0
        assert summarizer.calls == len(memories)
        assert model_calls().late() == len(memories)
        assert threading.active_count() - threads_before <= len(memories) + DEFAULT_WORKERS + 1
        assert all(len(m.messages()) == 4 for m in memories)
    finally:
        summarizer.release.set()
        settle(shared_pool())
    # Once the model answers again, the threads it held come back and the sessions catch up:
    # a session's next call waits for its late one to end, which on a busy machine can
    # take a moment after the release.
    deadline = time.monotonic() + 60
    while model_calls().late() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model_calls().late() == 0
    later = ConversationMemory("s0", store, summarizing_every_turn(), summarizer=summarizer)
    later.add_turn("third question?", "third answer.")
    assert later.summary().covers_through_seq >= 4
    store.close()


def test_many_threads_of_many_users_share_one_recall_and_each_recalls_only_their_own(tmp_path: Path) -> None:
    """The default recall is one per store: requests of many users in many threads use it at
    once, each new chat finds its user's earlier session, and none sees another user's."""
    from concurrent.futures import ThreadPoolExecutor

    store = SQLiteStore(tmp_path / "shared.db")
    users = [f"user{n}" for n in range(12)]
    for user in users:
        earlier = ConversationMemory(f"{user}-monday", store, user_id=user)
        earlier.add_turn(f"My locker code is {user.upper()}-LOCK.", "Noted.")
        earlier.add_turn("Let me also tell you about my week at the office.", "Please do.")

    def new_chat(user: str, round_: int) -> tuple[str, str, object]:
        memory = ConversationMemory(f"{user}-chat-{round_}", store, user_id=user)
        memory.add_turn("Hello again!", "Hi!")
        context = memory.build_context(query="what is my locker code?")
        return user, " ".join(str(m["content"]) for m in context.messages), memory.recall

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda job: new_chat(*job), [(u, r) for r in range(3) for u in users]))
    assert len({id(recall) for _, _, recall in results}) == 1  # one Recall for the store
    for user, text, _ in results:
        assert f"{user.upper()}-LOCK" in text
        others = [u for u in users if u != user and f"{u.upper()}-LOCK" in text]
        assert others == [], f"{user}'s context holds {others}'s locker code"
    store.close()


# -- what a long-lived memory keeps ------------------------------------------------------------------------


class _WholeMessageCounter(TokenCounter):
    """Counts a message as one text (not framing plus text): the builder then counts whole
    memory blocks, a new one for each question."""

    name = "whole-message"

    def count_text(self, text: str) -> int:
        return len(text.split()) + 1

    def count_message(self, message: Message) -> int:
        return self.count_text(message.text) + 4


@pytest.mark.parametrize("counter", [None, _WholeMessageCounter()], ids=["default", "whole-message"])
def test_what_a_memory_keeps_of_its_counts_does_not_grow_with_the_questions_asked(
    tmp_path: Path, counter: TokenCounter | None
) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    topics = ["garden", "violin", "kayak", "budget", "podcast", "orchard", "lantern", "chess"]
    old = ConversationMemory("old", store, user_id="ana", counter=counter)
    for number in range(120):
        topic = topics[number % len(topics)]
        old.add_turn(f"My {topic} note {number}: the {topic} plan needs work.", f"Noted about the {topic}.")
    old.flush()
    memory = ConversationMemory("new", store, user_id="ana", counter=counter)
    for number in range(300):
        context = memory.build_context(query=f"What did I say about the {topics[number % 8]} plan {number}?")
        assert context.token_count <= memory.config.budget
    costs = memory._operations.composer.builder.costs
    kept = [costs._kept.cache_info(), costs._user.cache_info(), costs._system.cache_info()]  # type: ignore[attr-defined]
    if counter is None:
        # tiktoken keeps the counts of short texts for the whole process: a memory keeps
        # none of them again (every text of these builds is short).
        assert kept[0].currsize == 0
        assert costs.text("What did I say about the garden plan?") == TiktokenCounter().count_text(
            "What did I say about the garden plan?"
        )
        long_summary = "The user planned the garden and the kayak trip. " * 40  # past what it keeps
        assert costs.text(long_summary) == TiktokenCounter().count_text(long_summary)
        assert costs._kept.cache_info().currsize == 1  # type: ignore[attr-defined]
    else:
        assert kept[0].currsize <= TEXTS_KEPT and kept[0].misses > TEXTS_KEPT  # more texts were counted
    assert kept[1].currsize <= MESSAGES_KEPT and kept[2].currsize <= MESSAGES_KEPT
    store.close()
