"""A SQLite store keeps recall's postings in segments, one per write, merged a few at a
time: whatever the writes and merges, a search reads each document once with the counts
and length its log calls for, and a deleted session leaves nothing in any segment or in
the file."""

from __future__ import annotations

import logging
import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from called_postings import called_postings, sqlite_postings

from convmem import ConversationMemory, Message, Recall, SQLiteStore
from convmem._recall.index_rows import KEY_SHIFT
from convmem._stores.sqlite.segments import ENTRY_FIELDS, ENTRY_SIZE, FANOUT, LENGTHS

TOPICS = ["violin", "flowerpot", "corgi", "kayak", "sourdough", "telescope", "origami", "beekeeping"]


def rows(path: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def history_of(path: Path, user: str) -> int:
    ((number,),) = rows(path, "SELECT number FROM recall_histories WHERE owner = ?", (f"user:{user}",))
    return int(number)


def stored(path: Path, history: int) -> list[tuple[str, int, int, int, int]]:
    """(term, kind, key, count, length) of every document of the history, as a search reads them."""
    return sqlite_postings(path, history)


def expected(store: SQLiteStore, path: Path, session_ids: list[str]) -> list[tuple[str, int, int, int, int]]:
    """What the logs call for: each session's postings derived from its whole log at once."""
    out = []
    for session_id in session_ids:
        ((slot,),) = rows(path, "SELECT slot FROM recall_index_sessions WHERE session_id = ?", (session_id,))
        out += called_postings(store, session_id, int(slot) << KEY_SHIFT)
    return sorted(out)


def chat(store: SQLiteStore, user: str, session_id: str, topic: str) -> None:
    memory = ConversationMemory(session_id, store, user_id=user)
    memory.add_turn(f"I took up {topic} this month with my cousin.", f"How is the {topic} going?")
    memory.add_turn("Slowly, but I like it.", "That is how it starts.")
    memory.close()


def write_sessions(store: SQLiteStore, count: int) -> list[str]:
    """`count` sessions of ana, each indexed by its own write."""
    session_ids = []
    for n in range(count):
        session_id = f"chat-{n}"
        chat(store, "ana", session_id, f"{TOPICS[n % len(TOPICS)]}{n}")
        Recall().catch_up(session_id, store)
        session_ids.append(session_id)
    return session_ids


def segments_by_level(path: Path, history: int) -> list[int]:
    found = rows(
        path, "SELECT level, count(*) FROM recall_segments WHERE history = ? GROUP BY level", (history,)
    )
    return [count for _, count in sorted(found)]


def test_an_entry_packs_into_the_size_the_rows_are_cut_at() -> None:
    assert np.dtype(list(ENTRY_FIELDS)).itemsize == ENTRY_SIZE


def test_merged_segments_read_as_the_logs_call_for(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db")
    count = FANOUT * FANOUT + FANOUT + 3  # a merge of merges, one merge, three single writes
    session_ids = write_sessions(store, count)
    history = history_of(store.path, "ana")
    assert segments_by_level(store.path, history) == [3, 1, 1]
    assert stored(store.path, history) == expected(store, store.path, session_ids)
    store.close()


def test_an_exchange_answered_in_a_later_write_reads_as_one_document(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "x.db")
    store.append("s", [Message.create("user", "Which kayak should my cousin buy?")], user_id="ana")
    Recall().catch_up("s", store)
    store.append("s", [Message.create("assistant", "A touring kayak, stable and light.")], user_id="ana")
    Recall().catch_up("s", store)
    history = history_of(store.path, "ana")
    assert rows(
        store.path,
        "SELECT count(*) FROM recall_segment_terms WHERE history = ? AND term = ?",
        (history, LENGTHS),
    ) == [(1,)]
    found = stored(store.path, history)
    assert found == expected(store, store.path, ["s"])
    # the question's word and the answer's, in one exchange of both messages' length
    (kayak,) = [row for row in found if row[0] == "kayak" and row[1] == 1]
    (touring,) = [row for row in found if row[0] == "tour" and row[1] == 1]
    assert kayak[2:] == (touring[2], 2, touring[4])
    store.close()


def test_a_session_forgotten_out_of_merged_segments_leaves_no_trace(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    store = SQLiteStore(path)
    session_ids = write_sessions(store, FANOUT + 2)
    history = history_of(path, "ana")
    assert segments_by_level(path, history) == [2, 1]
    gone = session_ids[3]  # inside the merged segment
    secret = f"{TOPICS[3]}3"
    assert any(term == secret for term, *_ in stored(path, history))
    store.clear(gone)
    left = [s for s in session_ids if s != gone]
    assert stored(path, history) == expected(store, path, left)
    ((slots,),) = rows(path, "SELECT slots FROM recall_segments WHERE history = ? AND level = 1", (history,))
    assert len(slots.split(",")) == FANOUT - 1
    memory = ConversationMemory("today", store, user_id="ana")
    found = [item.text for item in memory.build_context(query=f"How is my {secret} going?").recalled]
    assert not any(secret in text for text in found)
    store.close()
    assert not any(secret.encode() in p.read_bytes() for p in tmp_path.iterdir() if p.is_file())


def test_a_session_edited_after_a_merge_is_indexed_again_beside_the_others(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "e.db")
    session_ids = write_sessions(store, FANOUT + 1)
    store.delete_messages(session_ids[0], [1])  # its rows are reset: indexed again in a new slot
    Recall().catch_up(session_ids[0], store)
    history = history_of(store.path, "ana")
    assert stored(store.path, history) == expected(store, store.path, session_ids)
    store.close()


@pytest.mark.parametrize(
    "spoiled",
    [
        "CAST(x'ff00000000000000' || substr(postings, 9) AS BLOB)",  # more passages than it holds
        "'not a packed row, é'",  # text
        "x'01'",  # too short
    ],
)
def test_a_damaged_postings_row_is_made_again_from_the_log_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, spoiled: str
) -> None:
    path = tmp_path / "d.db"
    session_ids = write_sessions(SQLiteStore(path), 3)
    query = f"How is my {TOPICS[1]}1 going?"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"UPDATE recall_segment_terms SET postings = {spoiled}")
        conn.commit()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        found = ConversationMemory("today", SQLiteStore(path), user_id="ana").build_context(query=query)
    assert any(f"{TOPICS[1]}1" in item.text for item in found.recalled)  # from the logs
    assert [r for r in caplog.records if "damaged row" in r.getMessage()]
    caplog.clear()
    store = SQLiteStore(path)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        found = ConversationMemory("today-2", store, user_id="ana").build_context(query=query)
    assert any(f"{TOPICS[1]}1" in item.text for item in found.recalled)
    assert [r.getMessage() for r in caplog.records] == []  # indexed again, searched quietly
    history = history_of(path, "ana")
    assert stored(path, history) == expected(store, path, session_ids)


def test_writers_of_one_history_in_several_stores_at_once_merge_without_losing_a_posting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "w.db"
    SQLiteStore(path).close()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def writer(at: int) -> None:
        store = SQLiteStore(path)  # a process of its own: its own connections
        try:
            start.wait()
            for n in range(6):
                session_id = f"w{at}-{n}"
                chat(store, "ana", session_id, f"{TOPICS[(at + n) % len(TOPICS)]}{at}{n}")
                Recall().catch_up(session_id, store)
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(at,)) for at in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    store = SQLiteStore(path)
    session_ids = [f"w{at}-{n}" for at in range(4) for n in range(6)]
    history = history_of(path, "ana")
    assert sum(segments_by_level(path, history)) < len(session_ids)  # merged as they went
    assert stored(path, history) == expected(store, path, session_ids)
    store.close()


def damage(path: Path) -> None:
    """Every packed row says more passages than it holds."""
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(
            "UPDATE recall_segment_terms SET postings = CAST(x'ff00000000000000' || substr(postings, 9) AS BLOB)"
        )
        conn.commit()


def test_a_damaged_row_does_not_stop_a_delete(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "dd.db"
    store = SQLiteStore(path)
    session_ids = write_sessions(store, FANOUT)  # one merged segment: a delete rewrites it
    damage(path)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert [m.seq for m in store.delete_messages(session_ids[0], [1, 2])] == [1, 2]
    assert [r for r in caplog.records if "damaged row" in r.getMessage()]
    for session_id in session_ids:  # every session of the history is indexed again
        Recall().catch_up(session_id, store)
    assert stored(path, history_of(path, "ana")) == expected(store, path, session_ids)
    assert not any(f"{TOPICS[0]}0" in str(row) for row in rows(path, "SELECT * FROM recall_segment_terms"))
    store.close()


def test_a_damaged_row_met_merging_resets_the_history_and_the_write_is_made_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "dm.db"
    store = SQLiteStore(path)
    session_ids = write_sessions(store, FANOUT - 1)
    damage(path)
    with caplog.at_level(logging.WARNING, logger="convmem"):
        chat(store, "ana", "last", "kayak99")  # its write makes a level full: a merge
        Recall().catch_up("last", store)
    assert [r for r in caplog.records if "damaged row" in r.getMessage()]
    for session_id in session_ids:
        Recall().catch_up(session_id, store)
    assert stored(path, history_of(path, "ana")) == expected(store, path, [*session_ids, "last"])
    store.close()


def logged_only(store: SQLiteStore, count: int) -> list[str]:
    """`count` sessions of ana appended to the store directly: logged, never indexed (a
    history imported, or written before this index existed)."""
    session_ids = []
    for n in range(count):
        session_id = f"imported-{n}"
        topic = f"{TOPICS[n % len(TOPICS)]}{n}"
        store.append(
            session_id,
            [
                Message.create("user", f"I took up {topic} this month with my cousin."),
                Message.create("assistant", f"How is the {topic} going?"),
            ],
            user_id="ana",
        )
        session_ids.append(session_id)
    return session_ids


def test_sessions_a_search_indexes_are_written_together(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "imported.db"
    store = SQLiteStore(path)
    session_ids = logged_only(store, 12)
    memory = ConversationMemory("today", store, user_id="ana")
    with caplog.at_level(logging.INFO, logger="convmem"):
        recalled = memory.build_context("What did I take up with my cousin, kayak3?").recalled
    # Said once for the twelve, not once per session.
    said = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("recall's keyword index lacks 12 sessions of this history ('imported-")
    assert said[0].endswith(" and 9 more; 24 messages); indexing them from their logs")
    assert any("kayak3" in item.text for item in recalled)
    history = history_of(path, "ana")
    # One write for the twelve: one segment (written one by one, twelve, merged at eight).
    assert rows(path, "SELECT count(*), min(level) FROM recall_segments WHERE history = ?", (history,)) == [
        (1, 0)
    ]
    assert stored(path, history) == expected(store, path, session_ids)
    slots = rows(path, "SELECT slot FROM recall_index_sessions WHERE history = ?", (history,))
    assert len({slot for (slot,) in slots}) == 12


def test_a_session_another_writer_got_to_first_is_indexed_on_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from convmem._stores.sqlite import lexical

    path = tmp_path / "raced.db"
    store = SQLiteStore(path)
    session_ids = logged_only(store, 6)
    checked = lexical.SQLiteHistoryTables._current
    raced: list[str] = []

    def another_writer_first(conn: sqlite3.Connection, batch: Any, expected: Any) -> Any:
        if batch.session_id == "imported-4" and not raced:
            raced.append(batch.session_id)
            return False  # as when its row changed after the batch was made
        return checked(conn, batch, expected)

    monkeypatch.setattr(lexical.SQLiteHistoryTables, "_current", staticmethod(another_writer_first))
    memory = ConversationMemory("today", store, user_id="ana")
    recalled = memory.build_context("What did I take up with my cousin, sourdough4?").recalled
    assert raced == ["imported-4"]
    assert any("sourdough4" in item.text for item in recalled)  # indexed on its own, in the same search
    history = history_of(path, "ana")
    assert stored(path, history) == expected(store, path, session_ids)
    # The five written together, then the one on its own: two segments.
    assert rows(path, "SELECT count(*) FROM recall_segments WHERE history = ?", (history,)) == [(2,)]
