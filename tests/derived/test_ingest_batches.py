"""Ingest without reading back what was just written: the summary and facts a memory keeps
while appending are those a plan from the log makes; bulk imports report their progress."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from convmem import (
    ConfigError,
    ConversationMemory,
    ImportProgress,
    InMemoryStore,
    MemoryConfig,
    Message,
    SessionOwnerError,
    SQLiteStore,
    Store,
)
from convmem._derived.records import FACTS_KEY, SUMMARY_KEY
from convmem._stores.base import StateRecord

_TOPICS = ("the garden", "a trip to Porto", "the new job", "my sister's wedding", "learning Rust")


class RecordingSummarizer:
    """Keeps which messages each call folded in, and says so in the summary it returns."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, list[int]]] = []

    def summarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        seqs = [m.seq or 0 for m in messages]
        self.calls.append((previous_summary, seqs))
        return ((previous_summary or "") + f" [{seqs[0]}-{seqs[-1]}]").strip()

    async def asummarize(
        self, previous_summary: str | None, messages: Sequence[Message], *, max_tokens: int | None = None
    ) -> str:
        return self.summarize(previous_summary, messages, max_tokens=max_tokens)


def conversation(turns: int) -> list[tuple[str, str]]:
    """Messages of uneven length, some stating facts, so the window moves by varying steps."""
    said: list[tuple[str, str]] = []
    for i in range(turns):
        topic = _TOPICS[i % len(_TOPICS)]
        question = f"Tell me more about {topic}, part {i}." + " Please be thorough." * (i % 4)
        if i % 7 == 3:
            question = f"My favourite colour is {('teal', 'red', 'ochre')[i % 3]}. " + question
        if i % 11 == 5:
            question = f"I live in {('Lisbon', 'Oslo')[i % 2]}. " + question
        answer = f"About {topic}: " + "here is a detail worth keeping. " * (1 + (i * 5) % 9)
        said.extend((("user", question), ("assistant", answer)))
    return said


def summary_config(trigger: str) -> MemoryConfig:
    return MemoryConfig(budget=600, summary_trigger=trigger, summary_every_turns=2)  # type: ignore[arg-type]


def stored_summary(store: Store, session_id: str) -> tuple[str, int]:
    record = store.get_state(session_id, SUMMARY_KEY)
    assert record is not None
    data = json.loads(record.value)
    return data["text"], data["covers_through_seq"]


def stored_facts(store: Store, session_id: str) -> tuple[int, list[tuple[str, str, int | None]]]:
    record = store.get_state(session_id, FACTS_KEY)
    if record is None:
        return 0, []
    data = json.loads(record.value)
    book = json.loads(data["book"])
    facts = sorted(
        (key, fact["value"], fact.get("seq")) for key, history in book["history"].items() for fact in history
    )
    return data["covers_through_seq"], facts


def ingest(
    store: Store,
    said: list[tuple[str, str]],
    config: MemoryConfig,
    summarizer: RecordingSummarizer,
    memory_for: Callable[[int], ConversationMemory] | None = None,
) -> None:
    memory = ConversationMemory("s", store, config, summarizer=summarizer)
    for i, (role, text) in enumerate(said):
        writer = memory if memory_for is None else memory_for(i)
        writer.add(role, text, timestamp=1_700_000_000.0 + 60 * i)
    memory.flush()


@pytest.fixture(params=["memory", "sqlite"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[str], Store]:
    def make(name: str) -> Store:
        return InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / f"{name}.db")

    return make


def chatter(turns: int) -> list[tuple[str, str]]:
    """Many short messages: finding the window takes more than one read of the newest ones."""
    return [message for i in range(turns) for message in (("user", f"ok {i}?"), ("assistant", f"yes {i}."))]


@pytest.mark.parametrize(
    ("trigger", "said", "budget"),
    [("tokens", conversation(40), 600), ("turns", conversation(40), 600), ("tokens", chatter(150), 2500)],
    ids=["tokens", "turns", "short-messages"],
)
def test_summary_and_facts_kept_while_appending_are_those_planned_from_the_log(
    make_store: Callable[[str], Store], trigger: str, said: list[tuple[str, str]], budget: int
) -> None:
    config = summary_config(trigger).replace(budget=budget)
    kept, planned = make_store("kept"), make_store("planned")
    kept_summarizer, planned_summarizer = RecordingSummarizer(), RecordingSummarizer()
    ingest(kept, said, config, kept_summarizer)
    # A new memory for every message knows nothing: each plan reads the log.
    ingest(
        planned,
        said,
        config,
        planned_summarizer,
        lambda i: ConversationMemory("s", planned, config, summarizer=planned_summarizer),
    )
    assert len(planned_summarizer.calls) >= 3  # the window moved on several times
    assert kept_summarizer.calls == planned_summarizer.calls
    assert stored_summary(kept, "s") == stored_summary(planned, "s")
    assert stored_facts(kept, "s")[1] == stored_facts(planned, "s")[1]
    assert stored_facts(kept, "s")[0] == len(said)  # flushed: every message was read for facts


def test_async_appends_keep_the_same_summary_and_facts(make_store: Callable[[str], Store]) -> None:
    said = conversation(30)
    config = summary_config("tokens")
    kept, planned = make_store("kept"), make_store("planned")
    kept_summarizer, planned_summarizer = RecordingSummarizer(), RecordingSummarizer()

    async def run() -> None:
        memory = ConversationMemory("s", kept, config, summarizer=kept_summarizer)
        for i, (role, text) in enumerate(said):
            await memory.aadd(role, text, timestamp=1_700_000_000.0 + 60 * i)
        await memory.aflush()

    asyncio.run(run())
    ingest(
        planned,
        said,
        config,
        planned_summarizer,
        lambda i: ConversationMemory("s", planned, config, summarizer=planned_summarizer),
    )
    assert len(planned_summarizer.calls) >= 2
    assert kept_summarizer.calls == planned_summarizer.calls
    assert stored_summary(kept, "s") == stored_summary(planned, "s")
    assert stored_facts(kept, "s")[1] == stored_facts(planned, "s")[1]
    assert stored_facts(kept, "s")[0] == len(said)


def test_another_writer_between_appends_is_read_from_the_log(make_store: Callable[[str], Store]) -> None:
    said = conversation(30)
    config = summary_config("tokens")
    alone, shared = make_store("alone"), make_store("shared")
    alone_summarizer, shared_summarizer = RecordingSummarizer(), RecordingSummarizer()
    ingest(
        alone,
        said,
        config,
        alone_summarizer,
        lambda i: ConversationMemory("s", alone, config, summarizer=alone_summarizer),
    )
    first = ConversationMemory("s", shared, config, summarizer=shared_summarizer)
    second = ConversationMemory("s", shared, config, summarizer=shared_summarizer)
    ingest(shared, said, config, shared_summarizer, lambda i: (first, first, second)[i % 3])
    second.flush()
    assert shared_summarizer.calls == alone_summarizer.calls
    assert stored_summary(shared, "s") == stored_summary(alone, "s")
    assert stored_facts(shared, "s")[1] == stored_facts(alone, "s")[1]


def test_turns_without_facts_move_the_stored_watermark_when_the_memory_flushes(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    memory = ConversationMemory("s", store)
    memory.add_turn("My favourite colour is teal.", "Noted!")
    memory.add_turn("How do I sort a list in Python?", "Use sorted().")
    memory.add_turn("And a tuple?", "sorted() works on any iterable.")
    assert stored_facts(store, "s")[0] == 2  # written with the fact, not moved by the turns after it
    memory.flush()
    assert stored_facts(store, "s")[0] == 6


def test_a_process_that_stopped_before_flushing_loses_no_fact(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    stopped = ConversationMemory("s", store)
    stopped.add_turn("My favourite colour is teal.", "Noted!")
    stopped.add_turn("How do I sort a list in Python?", "Use sorted().")
    # No flush or close: the next memory on the file reads the turns after the watermark again.
    again = ConversationMemory("s", SQLiteStore(tmp_path / "m.db"))
    again.add_turn("I live in Lisbon.", "Nice city!")
    covers, facts = stored_facts(again.store, "s")
    assert covers == 6
    assert [(key, value) for key, value, _ in facts] == [("city", "Lisbon"), ("favourite:colour", "teal")]


def test_a_fact_written_by_another_memory_is_kept(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    first, second = ConversationMemory("s", store), ConversationMemory("s", store)
    first.add_turn("How are you?", "Fine.")
    second.add_turn("My favourite colour is teal.", "Noted!")
    first.add_turn("I live in Lisbon.", "Nice city!")
    _, facts = stored_facts(store, "s")
    assert [(key, value) for key, value, _ in facts] == [("city", "Lisbon"), ("favourite:colour", "teal")]


def test_an_edit_makes_the_next_plan_read_the_log(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    summarizer = RecordingSummarizer()
    config = summary_config("turns")
    memory = ConversationMemory("s", store, config, summarizer=summarizer)
    said = conversation(12)
    for role, text in said:
        memory.add(role, text)
    covered = stored_summary(store, "s")[1]
    assert covered > 4
    memory.delete_messages([2])
    for role, text in conversation(6):
        memory.add(role, text)
    folded = [seq for _, seqs in summarizer.calls for seq in seqs]
    assert 2 not in folded[folded.index(3) + 1 :]  # never folded in again after the delete
    text, through = stored_summary(store, "s")
    assert through > covered and text


def test_sqlite_append_to_another_users_session_changes_nothing(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    store.append("s", [Message.create("user", "hello")], user_id="alice")
    before = store.stats("s")
    with pytest.raises(SessionOwnerError):
        store.append("s", [Message.create("user", "mine now")], user_id="bob")
    assert store.stats("s") == before
    assert [m.text for m in store.messages("s")] == ["hello"]
    stored = store.append("s", [Message.create("user", "again")], user_id="alice")
    assert [m.seq for m in stored] == [2]


# -- bulk imports -------------------------------------------------------------------


def history(messages: int) -> list[dict[str, object]]:
    return [
        {"role": role, "content": text, "timestamp": 1_700_000_000.0 + i}
        for i, (role, text) in enumerate(conversation(messages // 2))
    ]


def test_add_messages_reports_each_stage_to_a_callback() -> None:
    seen: list[ImportProgress] = []
    memory = ConversationMemory("s", InMemoryStore())
    memory.add_messages(history(200), progress=seen.append)
    stages = [p.stage for p in seen]
    assert stages[: stages.index("storing")] == ["counting"] * stages.index("storing")
    assert stages[stages.index("storing") :] == ["storing", "facts", "summary", "index", "done"]
    counted = [p.done for p in seen if p.stage == "counting"]
    assert counted == sorted(counted) and counted[-1] == 200 and len(counted) <= 51
    assert {p.total for p in seen} == {200} and {p.session_id for p in seen} == {"s"}


def test_async_add_messages_reports_the_same_stages() -> None:
    sync_seen: list[ImportProgress] = []
    async_seen: list[ImportProgress] = []
    ConversationMemory("s", InMemoryStore()).add_messages(history(60), progress=sync_seen.append)

    async def run() -> None:
        await ConversationMemory("s", InMemoryStore()).aadd_messages(history(60), progress=async_seen.append)

    asyncio.run(run())
    assert async_seen == sync_seen


def test_add_messages_reports_nothing_unless_asked(capsys: pytest.CaptureFixture[str]) -> None:
    memory = ConversationMemory("s", InMemoryStore())
    memory.add_messages(history(40))
    assert capsys.readouterr() == ("", "")
    memory.add_messages(history(40), progress=True)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines()[-1] == "convmem: session 's': 40 messages imported"


def test_a_progress_that_is_neither_a_flag_nor_a_callable_is_refused_before_anything_is_stored() -> None:
    memory = ConversationMemory("s", InMemoryStore())
    with pytest.raises(ConfigError, match=r"progress must be True .* got 'yes'"):
        memory.add_messages(history(4), progress="yes")  # type: ignore[arg-type]
    assert memory.messages() == []


class CountingStore(InMemoryStore):
    """Counts the reads of records and of the log."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        self.reads += 1
        return super().get_state(session_id, key)

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        self.reads += 1
        return super().messages(session_id, after_seq=after_seq, through_seq=through_seq)

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        self.reads += 1
        return super().tail(session_id, limit, before_seq=before_seq)


def test_appends_after_the_first_read_neither_the_records_nor_the_log() -> None:
    store = CountingStore()
    memory = ConversationMemory("s", store, MemoryConfig(recall_earlier_turns=False))
    memory.add_turn("Hello there.", "Hi!")
    store.reads = 0
    for i in range(20):
        memory.add_turn(f"Tell me about the garden, part {i}.", f"Here is part {i} about the garden.")
    assert store.reads == 0
    memory.delete_messages([1])  # an edit: what the memory knew is read again
    assert store.reads > 0


@pytest.mark.parametrize("edit", ["delete", "replace"])
def test_a_message_another_memory_edits_never_reaches_the_summary(tmp_path: Path, edit: str) -> None:
    # The writer holds the messages it appended; another memory of the session deletes or
    # redacts one before the summary covers it. The summary is made from the log, not the copy.
    path = tmp_path / "edited.db"
    config = MemoryConfig(budget=300)
    writer = ConversationMemory("s", SQLiteStore(path), config)
    for i in range(6):
        writer.add_turn(f"Question {i} about tomatoes in pots.", f"Answer {i} about watering and light.")
    secret = writer.add("user", "My locker code is 4471 and my secret password is zebra-crossing.")
    writer.add("assistant", "Noted.")
    assert secret.seq is not None
    editor = ConversationMemory("s", SQLiteStore(path), config)
    if edit == "delete":
        editor.delete_messages([secret.seq])
    else:
        editor.replace_message(secret.seq, {"role": "user", "content": "[removed]"})
    for i in range(30):
        writer.add_turn(f"Another question {i} on compost.", f"Reply {i} on browns and greens.")
    writer.flush()
    stored = SQLiteStore(path).get_state("s", SUMMARY_KEY)
    assert stored is not None
    summary = json.loads(stored.value)
    assert summary["covers_through_seq"] > secret.seq, "the summary never covered the edited message"
    # Its text, not the whole record: a stored time such as 1796462687.3774471 may hold the digits.
    texts = " ".join(value for value in summary.values() if isinstance(value, str))
    assert "locker" not in texts and "4471" not in texts and "zebra" not in texts
