"""`index_rows.derive` (the rows a store keeps of a log) holds to the units of the
in-process mirror (`units.SessionMirror`): the same indexed messages in the same places,
episodes and exchanges, the same candidates, the same passage and exchange documents
term for term, and the same totals, whether the log is derived at once or appended to
and derived a batch at a time, as `KeptHistories.catch_up` does."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import datetime, timezone
from pathlib import Path

import pytest

from convmem import Message, RecallConfig
from convmem._recall.index_rows import (
    IndexBatch,
    IndexCursor,
    IndexGap,
    UnitRow,
    derive,
)
from convmem._recall.lexical import BM25TextIndex
from convmem._recall.passages import PART_BITS
from convmem._recall.terms import tokenize
from convmem._recall.units import SessionMirror

CONFIG = RecallConfig()


def locomo_file() -> Path | None:
    """``../shared/data/locomo-dev.json`` beside the repository, when it is there."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "shared" / "data" / "locomo-dev.json"
        if candidate.is_file():
            return candidate
    return None


def locomo_logs() -> Iterator[tuple[str, list[Message]]]:
    """Each LoCoMo conversation as one stored log: its first speaker the user, the other the
    assistant, both named, every session at its date (so sessions are episodes)."""
    path = locomo_file()
    if path is None:
        pytest.skip("../shared/data/locomo-dev.json is not here")
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conversation = sample["conversation"]
        messages: list[Message] = []
        session = 1
        while f"session_{session}" in conversation:
            start = datetime.strptime(conversation[f"session_{session}_date_time"], "%I:%M %p on %d %B, %Y")
            at = start.replace(tzinfo=timezone.utc).timestamp()
            for turn in conversation[f"session_{session}"]:
                role = "user" if turn["speaker"] == conversation["speaker_a"] else "assistant"
                message = Message.create(role, turn["text"], name=turn["speaker"], timestamp=at)
                messages.append(dataclasses.replace(message, seq=len(messages) + 1))
                at += 30.0
            session += 1
        yield sample["sample_id"], messages


def synthetic_log() -> list[Message]:
    """A log with what the rules treat apart: long messages (passages, some named), tool
    calls and tool results, failed and cancelled turns, small talk, empty and system
    messages, CJK text, an assistant's long run (the exchange cap), gaps between episodes,
    and messages deleted from it (holes in the seqs)."""
    paragraph = (
        "The migration plan moves the orders table to PostgreSQL in three steps. First we copy "
        "the history in batches of ten thousand rows, then we replay the changes captured since, "
        "and last we switch the readers over during the quiet hour on Sunday morning. "
    )
    long_text = "\n\n".join(f"Part {i}: {paragraph * 2}" for i in range(6))
    at = 1_700_000_000.0
    items: list[tuple[str, str, dict[str, object]]] = [
        ("assistant", "Welcome back! What shall we work on?", {}),
        ("user", "My sister Ingrid teaches violin in Bergen.", {}),
        ("assistant", "Thanks!", {}),
        ("user", "ok", {}),
        ("user", "😊", {}),
        ("user", "Plan the database migration for me, in detail please.", {}),
        ("assistant", long_text, {}),
        ("user", "   ", {}),
        ("system", "You are a careful planner.", {}),
        ("assistant", "", {"tool_calls": [{"id": "c1", "name": "weather", "args": {"city": "Bergen"}}]}),
        ("tool", "Rain, 9 degrees", {"tool_call_id": "c1"}),
        ("assistant", "It rains in Bergen today, 9 degrees.", {}),
        ("user", "What about Oslo?", {"status": "failed"}),
        ("assistant", "Oslo is", {"status": "cancelled"}),
        ("user", "我的狗叫多多，它喜欢在公园里追球。", {}),
        ("assistant", "多多是个好名字！", {}),
        ("user", "Tell me everything about the plan again.", {"gap": True}),
        *[("assistant", f"Step {i}: check the replica lag before batch {i}.", {}) for i in range(20)],
        ("user", "Caroline's question: is the Sunday window long enough?", {"name": "Caroline"}),
        ("assistant", long_text.replace("orders", "invoices"), {"name": "Planner"}),
        ("user", "Melanie here: thanks, that makes sense.", {"name": "Melanie", "gap": True}),
        ("assistant", "You're welcome! Let me know if you need anything else.", {}),
        ("user", "One last thing: the backup bucket is called ferry-42.", {}),
    ]
    deleted = {4, 12, 30, 31}  # deleted from the log after they were stored
    messages = []
    for seq, (role, text, extra) in enumerate(items, start=1):
        at += 4 * 3600.0 if extra.get("gap") else 45.0
        if seq in deleted:
            continue
        message = Message.create(
            role,
            text,
            name=extra.get("name"),  # type: ignore[arg-type]
            tool_calls=extra.get("tool_calls"),  # type: ignore[arg-type]
            tool_call_id=extra.get("tool_call_id"),  # type: ignore[arg-type]
            status=extra.get("status", "completed"),  # type: ignore[arg-type]
            timestamp=at,
        )
        messages.append(dataclasses.replace(message, seq=seq))
    return messages


@dataclasses.dataclass
class KeptRows:
    """The rows a store holds for one session after applying batches, as `HistoryTables.write`
    applies them: units and passages written as given, an exchange's counts adding up as it
    gains messages, its length and last member updated."""

    units: dict[int, UnitRow] = dataclasses.field(default_factory=dict)
    passages: dict[int, tuple[Counter[str], int]] = dataclasses.field(default_factory=dict)
    exchanges: dict[int, tuple[Counter[str], int]] = dataclasses.field(default_factory=dict)
    cursor: IndexCursor = dataclasses.field(default_factory=IndexCursor)

    def apply(self, batch: IndexBatch) -> None:
        for unit in batch.units:
            self.units[unit.seq] = unit
        for first, last in batch.grown.items():
            self.units[first] = dataclasses.replace(self.units[first], last=last)
        for doc, counts, length in batch.passages:
            assert doc not in self.passages, f"passage {doc} written twice"
            self.passages[doc] = (Counter(counts), length)
        for first, counts, length, new in batch.exchanges:
            assert new == (first not in self.exchanges), f"exchange {first}: new={new}"
            held = self.exchanges.get(first, (Counter(), 0))[0]
            self.exchanges[first] = (held + Counter(counts), length)
        # Stored and read back as JSON, as the store keeps it.
        self.cursor = IndexCursor.from_json(batch.cursor.to_json())


def derived_at_once(log: Sequence[Message]) -> KeptRows:
    rows = KeptRows()
    rows.apply(derive(IndexCursor(), log, CONFIG, session_id="s", generation="g", reset=True))
    return rows


def derived_in_batches(log: Sequence[Message], size: int) -> KeptRows:
    """Appended `size` messages at a time, each batch read after the cursor (as `catch_up`)."""
    rows = KeptRows()
    for start in range(0, len(log), size):
        batch = derive(
            rows.cursor, log[start : start + size], CONFIG, session_id="s", generation="g", reset=not start
        )
        if start + size < len(log):
            # The log was indexed through its last seq when read: a message deleted at the
            # boundary leaves the next batch continuing the cursor (as catch_up's stats do).
            batch.cursor.seq = (log[start + size].seq or 0) - 1
        rows.apply(batch)
    return rows


def mirror_of(log: Sequence[Message]) -> SessionMirror:
    mirror = SessionMirror("s", embeds=False)
    with mirror.lock:
        mirror.ingest(log, CONFIG)
    return mirror


def documents(index: object) -> dict[int, tuple[Counter[str], int]]:
    """The documents of a mirror's `BM25TextIndex`: id -> (term counts, length)."""
    assert isinstance(index, BM25TextIndex)
    bm25 = index.bm25
    found: dict[int, tuple[Counter[str], int]] = {
        doc: (Counter(), length) for doc, length in bm25._lengths.items()
    }
    for term, docs in bm25._postings.items():
        for doc, count in docs.items():
            found[doc][0][term] = count
    return found


def assert_same_units(rows: KeptRows, mirror: SessionMirror) -> None:
    units = [rows.units[seq] for seq in sorted(rows.units)]
    assert [u.seq for u in units] == mirror.order
    for unit in units:
        message = mirror.messages[unit.seq]
        assert unit.place == mirror.position[unit.seq], unit
        assert unit.episode == mirror.episode_of[unit.seq], unit
        assert unit.exchange == mirror.exchange_of[unit.seq], unit
        assert unit.candidate == (unit.seq not in mirror.small_talk), unit
        assert unit.long == (unit.seq in mirror.passages), unit
        assert (unit.timestamp, unit.name, unit.from_user) == (
            message.timestamp,
            message.name,
            message.role.value == "user",
        ), unit
    # The same candidates, passages and exchanges.
    assert {u.seq for u in units if u.candidate} == set(mirror.order) - mirror.small_talk
    members: dict[int, list[int]] = {}
    for unit in units:
        members.setdefault(unit.exchange, []).append(unit.seq)
    assert members == mirror.exchanges
    for first, seqs in members.items():
        assert rows.units[first].last == seqs[-1], first
    assert rows.passages == documents(mirror.lexical_messages)
    assert {doc >> PART_BITS for doc in rows.passages} == set(mirror.order) - mirror.small_talk
    assert rows.exchanges == documents(mirror.lexical_exchanges)
    # The totals ranking reads from the cursor instead of the index.
    cursor = rows.cursor
    assert (cursor.message_docs, cursor.message_terms) == (
        len(mirror.lexical_messages.bm25),  # type: ignore[attr-defined]
        mirror.lexical_messages.bm25._total_length,  # type: ignore[attr-defined]
    )
    assert (cursor.exchange_docs, cursor.exchange_terms) == (
        len(mirror.lexical_exchanges.bm25),  # type: ignore[attr-defined]
        mirror.lexical_exchanges.bm25._total_length,  # type: ignore[attr-defined]
    )
    assert (cursor.places, cursor.episodes, cursor.newest_ts, cursor.last_ts) == (
        len(mirror.order),
        mirror.episode_count,
        mirror.newest_timestamp,
        mirror.last_timestamp,
    )
    assert sorted(cursor.names) == sorted(mirror.speakers.values())


def test_the_synthetic_log_has_what_the_rules_treat_apart() -> None:
    """The log below tests what it claims to (else a rule could go untested)."""
    log = synthetic_log()
    mirror = mirror_of(log)
    seqs = [m.seq or 0 for m in log]
    assert any(b - a > 1 for a, b in itertools.pairwise(seqs))  # holes
    assert len(mirror.passages) == 2 and mirror.small_talk and mirror.episode_count == 3
    assert max(len(members) for members in mirror.exchanges.values()) == 16  # the cap
    assert len(mirror.order) < len(log)  # tool, system, empty, failed, cancelled left out
    assert {"Caroline", "Planner", "Melanie"} <= set(mirror.speakers.values())


@pytest.mark.parametrize("size", [None, 1, 3, 7, 32])
def test_rows_of_a_synthetic_log_are_the_mirrors_units(size: int | None) -> None:
    log = synthetic_log()
    rows = derived_at_once(log) if size is None else derived_in_batches(log, size)
    assert_same_units(rows, mirror_of(log))


@pytest.mark.parametrize("size", [None, 5, 32])
def test_rows_of_locomo_conversations_are_the_mirrors_units(size: int | None) -> None:
    compared = 0
    for sample_id, log in locomo_logs():
        rows = derived_at_once(log) if size is None else derived_in_batches(log, size)
        mirror = mirror_of(log)
        assert mirror.episode_count > 1 and len(mirror.speakers) == 2, sample_id
        assert_same_units(rows, mirror)
        compared += 1
    assert compared


def test_a_log_with_holes_is_derived_whole_but_a_batch_must_continue_its_cursor() -> None:
    log = synthetic_log()
    rows = derived_at_once(log)  # holes within the log read: deleted messages
    assert rows.cursor.seq == log[-1].seq
    # A batch that skips messages after the cursor would leave them out for good.
    cursor = derived_at_once(log[:2]).cursor
    later = [m for m in log if (m.seq or 0) > cursor.seq + 1]
    with pytest.raises(IndexGap):
        derive(cursor, later, CONFIG, session_id="s", generation="g", reset=False)


def texts_documents(mirror: SessionMirror) -> tuple[dict[int, Counter[str]], dict[int, Counter[str]]]:
    """What the mirror's passage and exchange documents must hold, tokenized from their
    texts: each passage's ``name: `` and span, each exchange's lines joined."""
    passages: dict[int, Counter[str]] = {}
    for seq in mirror.order:
        if seq in mirror.small_talk:
            continue
        message = mirror.messages[seq]
        prefix = f"{message.name}: " if message.name else ""
        text = message.text.strip()
        for part, (start, end) in enumerate(mirror.passages.get(seq, [(0, len(text))])):
            passages[seq << PART_BITS | part] = Counter(tokenize(prefix + text[start:end]))
    exchanges = {first: Counter(tokenize(mirror.exchange_text(first))) for first in mirror.exchanges}
    return passages, exchanges


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_a_mirror_fed_a_few_messages_at_a_time_indexes_what_the_texts_say(size: int) -> None:
    """The mirror tokenizes each line once and makes an exchange's terms of its lines'
    (kept for the open exchange only): an exchange that gains a message in a later ingest
    still holds exactly the terms of its text."""
    log = synthetic_log()
    mirror = SessionMirror("s", embeds=False)
    for start in range(0, len(log), size):
        with mirror.lock:
            mirror.ingest(log[start : start + size], CONFIG)
        assert set(mirror.line_terms) <= set(mirror.exchanges[mirror.open_exchange or 0])
    passages, exchanges = texts_documents(mirror)
    assert {doc: counts for doc, (counts, _) in documents(mirror.lexical_messages).items()} == passages
    assert {doc: counts for doc, (counts, _) in documents(mirror.lexical_exchanges).items()} == exchanges
    assert any(len(members) > 1 for members in mirror.exchanges.values())
    assert len(mirror.passages) == 2
