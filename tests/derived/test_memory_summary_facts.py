"""The facade's rolling summary and core facts: triggers, watermarks, failures, persistence."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from convmem import (
    ConversationMemory,
    InMemoryStore,
    LLMSummarizer,
    MemoryConfig,
    Message,
    SQLiteStore,
    Store,
    StoreError,
    TiktokenCounter,
    count_messages,
)
from convmem._derived.records import FACTS_KEY


class RecordingSummarizer:
    """Concatenates what it is given, so the test can see exactly which messages were folded in."""

    def __init__(self, fail_times: int = 0, delay: float = 0.0) -> None:
        self.calls: list[tuple[str | None, list[int]]] = []
        self.fail_times = fail_times
        self.delay = delay
        self._lock = threading.Lock()

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        with self._lock:
            self.calls.append((previous_summary, [m.seq or 0 for m in messages]))
            if self.fail_times:
                self.fail_times -= 1
                raise RuntimeError("model unavailable")
        if self.delay:
            time.sleep(self.delay)
        seqs = [m.seq or 0 for m in messages]
        return ((previous_summary or "") + f" [{seqs[0]}-{seqs[-1]}]").strip()

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        return self.summarize(previous_summary, messages, max_tokens=max_tokens)


def config(**changes: object) -> MemoryConfig:
    base = MemoryConfig(budget=1000, keep_recent_turns=2, summary_trigger="turns", summary_every_turns=1)
    return base.replace(**changes)


def talk(memory: ConversationMemory, turns: int, start: int = 0) -> None:
    for i in range(start, start + turns):
        memory.add_turn(f"question {i} about topic {i}.", f"answer {i} with a detail {i}.")


def covered_ranges(summary_text: str) -> list[tuple[int, int]]:
    import re

    return [(int(a), int(b)) for a, b in re.findall(r"\[(\d+)-(\d+)\]", summary_text)]


def assert_exact_cover(summary_text: str, through: int) -> None:
    """The summary folded in every seq 1..through exactly once, in order."""
    expected = 1
    for first, last in covered_ranges(summary_text):
        assert first == expected, summary_text
        expected = last + 1
    assert expected == through + 1, summary_text


def test_evicted_turns_are_summarized_incrementally_with_an_exact_watermark(store: Store) -> None:
    summarizer = RecordingSummarizer()
    memory = ConversationMemory("s", store, config(), summarizer=summarizer)
    talk(memory, 6)
    summary = memory.summary()
    # 6 turns, the window keeps 2: seqs 1-8 are evicted and covered once each.
    assert summary.covers_through_seq == 8
    assert_exact_cover(summary.text, 8)
    # every call saw the previous summary and only new messages
    for (previous, seqs), (_, earlier) in zip(summarizer.calls[1:], summarizer.calls[:-1], strict=True):
        assert previous is not None and seqs[0] == earlier[-1] + 1


def test_token_trigger_waits_for_enough_evicted_history() -> None:
    summarizer = RecordingSummarizer()
    memory = ConversationMemory(
        "s", config=config(summary_trigger="tokens", summary_threshold=1.0), summarizer=summarizer
    )
    talk(memory, 3)
    assert memory.summary().covers_through_seq == 0  # a few evicted tokens: below 0.2 * 1000
    talk(memory, 20, start=3)
    assert memory.summary().covers_through_seq > 0


def test_never_trigger_keeps_the_window_only_until_summarize_now() -> None:
    summarizer = RecordingSummarizer()
    memory = ConversationMemory("s", config=config(summary_trigger="never"), summarizer=summarizer)
    talk(memory, 5)
    assert summarizer.calls == []
    assert memory.summarize_now() is True
    assert memory.summary().covers_through_seq == 6
    assert memory.summarize_now() is False  # nothing new was evicted


def test_watermark_is_exact_under_concurrent_adds_from_threads(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    summarizer = RecordingSummarizer(delay=0.002)
    memories = [ConversationMemory("shared", store, config(), summarizer=summarizer) for _ in range(4)]

    def writer(memory: ConversationMemory, offset: int) -> None:
        for i in range(10):
            memory.add_messages(
                [
                    {"role": "user", "content": f"q{offset}-{i}."},
                    {"role": "assistant", "content": f"a{offset}-{i}."},
                ]
            )

    threads = [threading.Thread(target=writer, args=(m, n)) for n, m in enumerate(memories)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    memories[0].summarize_now()
    summary = memories[0].summary()
    assert summary.covers_through_seq == 80 - 4  # all but the last 2 turns
    assert_exact_cover(summary.text, summary.covers_through_seq)
    assert len(memories[0].messages()) == 80


def test_failing_summarizer_loses_no_turn_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    summarizer = RecordingSummarizer(fail_times=1)
    memory = ConversationMemory("s", config=config(), summarizer=summarizer)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        talk(memory, 4)
    assert "summary" in caplog.text and "retried" in caplog.text
    assert len(memory.messages()) == 8
    # while it is failing, the context says that earlier history was omitted
    context = memory.build_context(query="what did we say?")
    assert context.token_count <= 1000
    memory._derived.backoff.record("summary", True)  # the backoff delay has passed
    talk(memory, 1, start=4)
    assert memory.summary().covers_through_seq == 6
    assert_exact_cover(memory.summary().text, 6)


def test_omitted_marker_when_summary_lags_the_window() -> None:
    memory = ConversationMemory("s", config=config(summary_trigger="never", language="en"))
    memory.add_turn("My name is Alice and I live in Paris.", "Nice to meet you, Alice.")
    talk(memory, 4)
    context = memory.build_context(query="where do I live?")
    assert "Some earlier conversation is not included here." in context.memory_text


def test_facts_are_extracted_and_newer_values_supersede(store: Store) -> None:
    memory = ConversationMemory("s", store, config(language="en"))
    memory.add_turn("My name is Alice. I live in Hangzhou.", "Hello Alice!")
    memory.add_turn("I moved to Beijing last month.", "Welcome to Beijing!")
    facts = {f.key: f.value for f in memory.facts()}
    assert facts["name"] == "Alice"
    assert facts["city"] == "Beijing"
    context = memory.build_context(query="hi", budget=500)
    assert "Beijing" in context.memory_text and "Hangzhou" not in context.memory_text
    assert "Beijing" not in context.system_text


def test_forget_fact_removes_it_from_the_context(store: Store) -> None:
    memory = ConversationMemory("s", store, config(language="en"))
    memory.add_turn("My name is Alice.", "Hi Alice.")
    assert memory.forget_fact("name") is True
    assert memory.forget_fact("name") is False
    assert "name" not in {f.key for f in memory.facts()}
    memory.add("user", "ok")
    assert "name" not in {f.key for f in memory.facts()}


def test_reopened_sqlite_session_keeps_summary_and_facts(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    memory = ConversationMemory.open("s", path, config=config(language="en"))
    memory.add_turn("我叫李雷，我住在杭州。", "你好，李雷！")
    talk(memory, 5)
    summary, facts = memory.summary(), memory.facts()
    assert summary.covers_through_seq > 0 and facts
    memory.store.close()
    reopened = ConversationMemory.open("s", path, config=config(language="en"))
    assert reopened.summary() == summary
    assert reopened.facts() == facts


def test_context_with_every_section_filled_stays_within_budget(store: Store) -> None:
    memory = ConversationMemory("s", store, config(system_prompt="Be helpful.", keep_recent_turns=3))
    memory.add_turn("My name is Alice. I live in Paris. I like green tea.", "Noted!")
    for i in range(30):
        memory.add_turn(
            f"We decided to ship version {i} on Friday with budget {i * 1000} yuan.", f"Okay, version {i}."
        )
    for budget in (80, 150, 300, 700, 1500):
        context = memory.build_context(query="what did we decide?", budget=budget)
        assert context.token_count <= budget
        assert count_messages(TiktokenCounter(), context.messages) == context.token_count
    full = memory.build_context(query="what did we decide?", budget=1500)
    assert full.section("facts").tokens > 0 and full.section("summary").tokens > 0


def _summarized_items() -> ConversationMemory:
    """Forty turns of numbered items, all summarized, and a window of one turn."""
    memory = ConversationMemory(
        "s", config=MemoryConfig(keep_recent_turns=1, summary_trigger="never", language="en")
    )
    for i in range(40):
        memory.add_turn(f"Fact number {i}: the value of item {i} is {i * 7}.", f"Recorded item {i}.")
    memory.summarize_now()
    return memory


def test_summary_over_its_cap_is_condensed_at_sentence_boundaries() -> None:
    memory = _summarized_items()
    context = memory.build_context(budget=400)
    summary_section = context.section("summary")
    assert 0 < summary_section.tokens <= summary_section.cap  # type: ignore[operator]
    body = context.memory_text.split("Summary of the earlier conversation:")[1]
    assert body.removesuffix("</memory>").strip().endswith((".", "。"))


def test_a_question_about_the_past_gives_recall_the_summary_s_room_when_recall_needs_it() -> None:
    memory = _summarized_items()
    # Every old turn matches: recall can fill any room it gets.
    past = memory.build_context(query="What did I say the value of each item was?", budget=1000)
    present = memory.build_context(query="Write a haiku about each autumn leaf.", budget=1000)
    past_summary, present_summary = past.section("summary"), present.section("summary")
    assert past_summary.cap is not None and present_summary.cap is not None
    # The two questions are about as long: the caps differ by the shares.
    shares = memory.config.past_summary_share / memory.config.summary_share
    assert past_summary.cap == pytest.approx(present_summary.cap * shares, abs=3)
    assert 0 < past_summary.tokens <= past_summary.cap
    assert "the query points to the past" in past_summary.note
    assert "points to the past" not in present_summary.note
    assert past.section("recall").tokens > present.section("recall").tokens
    assert past.token_count <= 1000


def test_the_summary_keeps_its_share_when_recall_finds_little() -> None:
    memory = _summarized_items()
    past = memory.build_context(query="What did I say about volcanoes last year?", budget=1000)
    present = memory.build_context(query="Write a haiku about the autumn leaves.", budget=1000)
    assert past.section("recall").items == 0
    assert past.section("summary").cap == pytest.approx(present.section("summary").cap, abs=3)
    assert past.section("summary").tokens == present.section("summary").tokens > 0
    assert "points to the past" not in past.section("summary").note


def test_past_summary_share_above_the_summary_share_changes_nothing() -> None:
    config = MemoryConfig(
        keep_recent_turns=1, summary_trigger="never", summary_share=0.1, past_summary_share=0.3
    )
    memory = ConversationMemory("s", config=config)
    for i in range(40):
        memory.add_turn(f"Fact number {i}: the value of item {i} is {i * 7}.", f"Recorded item {i}.")
    memory.summarize_now()
    summary = memory.build_context(query="What did I say about item 3?", budget=1000).section("summary")
    assert summary.cap is not None and summary.cap <= 100
    assert "points to the past" not in summary.note


class CountingCondenser(RecordingSummarizer):
    """A summarizer with `condense`, counting how often a build asks for it."""

    def __init__(self) -> None:
        super().__init__()
        self.condensed: list[int] = []

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        return " ".join([previous_summary or "", *(m.text for m in messages)]).strip()

    def condense(self, summary: str, max_tokens: int) -> str:
        self.condensed.append(max_tokens)
        return summary[: max_tokens * 2]


def test_an_oversized_summary_is_condensed_once_per_version_and_room_not_per_build() -> None:
    summarizer = CountingCondenser()
    memory = ConversationMemory("s", config=config(summary_trigger="never"), summarizer=summarizer)
    for i in range(40):
        memory.add_turn(f"Fact number {i}: the value of item {i} is {i * 7}.", f"Recorded item {i}.")
    memory.summarize_now()
    first = memory.build_context(budget=400)
    for _ in range(5):
        assert memory.build_context(budget=400).messages == first.messages
    assert len(summarizer.condensed) == 1
    memory.build_context(budget=300)  # another room
    assert len(summarizer.condensed) == 2
    rooms_before = len(set(summarizer.condensed))
    for _ in range(3):
        for query in ("Which item?", "Which item was the seventh?", "And the one after it?"):
            memory.build_context(query=query, budget=700)
    # Each room is condensed once: asking again, or another question, condenses nothing new.
    assert len(summarizer.condensed) == len(set(summarizer.condensed)) <= rooms_before + 3
    condensed = len(summarizer.condensed)
    memory.add_turn("Fact number 99: the value is 1.", "Recorded.")
    memory.summarize_now()  # another version
    memory.build_context(budget=300)
    assert len(summarizer.condensed) == condensed + 1


def test_background_add_returns_before_slow_work_and_flush_waits() -> None:
    summarizer = RecordingSummarizer(delay=0.2)
    memory = ConversationMemory("s", config=config(background=True), summarizer=summarizer)
    talk(memory, 4)
    started = time.perf_counter()
    memory.add_turn("one more.", "sure.")
    assert time.perf_counter() - started < 0.2
    assert memory.flush(timeout=30)
    memory.summarize_now()
    assert_exact_cover(memory.summary().text, memory.summary().covers_through_seq)
    assert memory.summary().covers_through_seq == 6
    memory.close()


def test_background_job_that_hangs_times_out_and_no_turn_is_lost(caplog: pytest.LogCaptureFixture) -> None:
    summarizer = RecordingSummarizer(delay=2.0)
    memory = ConversationMemory(
        "s", config=config(background=True, background_timeout=0.2), summarizer=summarizer
    )
    with caplog.at_level(logging.WARNING, logger="convmem"):
        talk(memory, 4)
        assert memory.flush(timeout=30)
    # Given up by the pool's job timeout or, first, by the model call's own (capped by it).
    assert "timed out" in caplog.text or "took longer than model_timeout" in caplog.text
    assert len(memory.messages()) == 8


def test_async_background_uses_tasks_and_aflush_waits() -> None:
    async def scenario() -> None:
        calls: list[str] = []

        async def complete(prompt: str) -> str:
            calls.append(prompt)
            await asyncio.sleep(0.01)
            return "The user asked several numbered questions."

        memory = ConversationMemory(
            "s", InMemoryStore(), config(background=True), summarizer=LLMSummarizer(complete)
        )
        for i in range(4):
            await memory.aadd_turn(f"question {i}?", f"answer {i}.")
        assert await memory.aflush(timeout=30)
        assert calls, "the async model was called"
        summary = await memory.asummary()
        assert summary.text == "The user asked several numbered questions."
        assert summary.covers_through_seq == 4

    asyncio.run(scenario())


def test_sessions_do_not_share_summaries_or_facts(store: Store) -> None:
    a = ConversationMemory("a", store, config())
    b = ConversationMemory("b", store, config())
    a.add_turn("My name is Alice.", "Hi.")
    talk(a, 4)
    b.add_turn("hello", "hi")
    assert b.facts() == []
    assert b.summary().text == ""
    assert "Alice" not in str(b.build_context(query="who am I?").messages)


def test_facts_shown_follow_the_stored_book_while_its_coverage_moves(store: Store) -> None:
    """Every write moves the stored facts' coverage; the book is parsed again only when
    the facts change, and a damaged record is an error, not stale facts."""
    memory = ConversationMemory("s", store)
    memory.add_turn("My favourite colour is teal.", "Noted!")
    assert "teal" in memory.build_context(query="What is my favourite colour?").memory_text
    first = store.get_state("s", FACTS_KEY)
    memory.add_turn("How do I sort a list in Python?", "Use sorted().")
    memory.flush()  # a turn that states no fact moves the coverage when the memory flushes
    second = store.get_state("s", FACTS_KEY)
    assert first is not None and second is not None and first.value != second.value
    book = memory._derived.facts_book()
    assert "teal" in memory.build_context(query="What is my favourite colour?").memory_text
    assert memory._derived.facts_book() is book  # same facts, new coverage: not parsed again
    memory.add_turn("I live in Lisbon.", "Nice city!")
    assert memory._derived.facts_book() is not book
    shown = memory.build_context(query="Where do I live and what colour do I like?").memory_text
    assert "Lisbon" in shown and "teal" in shown

    current = store.get_state("s", FACTS_KEY)
    assert current is not None
    for damaged in ('{"covers_through_seq": 6}', '{"covers_through_seq": 6, "book": {"format": 1}}', "[1"):
        store.put_state("s", FACTS_KEY, damaged)
        with pytest.raises(StoreError, match="stored facts of session 's' are malformed"):
            memory.build_context(query="Where do I live?")
    store.put_state("s", FACTS_KEY, current.value)
    assert "Lisbon" in memory.build_context(query="Where do I live?").memory_text
