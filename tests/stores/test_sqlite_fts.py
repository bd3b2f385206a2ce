"""On a `SQLiteStore`, recall's lexical index lives in the store's file (SQLite FTS5):
shared by every process using the file, kept in step with the log, purged of what is
deleted, and rebuilt from the log when it goes missing or corrupt."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path

import pytest

from convmem import (
    ConfigError,
    ConversationMemory,
    InMemoryStore,
    MemoryConfig,
    Message,
    Recall,
    SQLiteStore,
    TiktokenCounter,
)
from convmem._recall.history_index import SlotView
from convmem._recall.lexical import BM25TextIndex, tokenize
from convmem._stores.sqlite.lexical import SQLiteLexicalIndex

COUNTER = TiktokenCounter()
FILLER = [
    ("user", "How was your weekend?"),
    ("assistant", "Pretty quiet, I mostly read a novel about sailors."),
    ("user", "Work has been busy with the quarterly report."),
    ("assistant", "Deadlines always pile up at the end of a quarter."),
]


def append(store: SQLiteStore, session_id: str, items: Sequence[tuple[str, str]]) -> list[Message]:
    messages = []
    for role, text in items:
        message = Message.create(role, text)
        messages.append(dataclasses.replace(message, token_count=COUNTER.count_message(message)))
    return store.append(session_id, messages)


def recalled(recall: Recall, store: SQLiteStore, query: str, session_id: str = "s1") -> list[str]:
    result = recall.search(session_id, query, store=store, counter=COUNTER, max_tokens=400)
    return [item.text for item in result.items]


def fts_rows(path: Path, session_id: str | None = None) -> list[tuple[int, int, str]]:
    """(kind, doc id, terms) of the FTS documents in the file, of one session or all."""
    with closing(sqlite3.connect(path)) as conn:
        rows = conn.execute(
            "SELECT d.session_id, d.kind, d.doc_id, t.terms FROM recall_docs AS d "
            "JOIN recall_terms AS t ON t.rowid = d.id ORDER BY d.session_id, d.kind, d.doc_id"
        ).fetchall()
    return [(kind, doc, terms) for sid, kind, doc, terms in rows if session_id in (None, sid)]


def bytes_hold(folder: Path, text: str) -> list[str]:
    needle = text.encode()
    return sorted(p.name for p in folder.iterdir() if p.is_file() and needle in p.read_bytes())


# -- recall by words through FTS5 -------------------------------------------------------------


def test_recall_on_sqlite_finds_an_old_message_through_the_fts_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "I adopted a corgi named Duoduo last spring."), *FILLER])
    recall = Recall()
    assert "Duoduo" in recalled(recall, store, "what is the name of my corgi?")[0]
    rows = fts_rows(store.path, "s1")
    assert (0, 1, " ".join(tokenize("I adopted a corgi named Duoduo last spring."))) in rows
    assert {kind for kind, _, _ in rows} == {0, 1}  # messages and exchanges
    state = recall._state("s1", store)
    assert isinstance(state.lexical_messages, SQLiteLexicalIndex)
    store.close()


def test_the_default_memory_on_sqlite_recalls_by_words_from_the_file(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    memory = ConversationMemory("s1", store)
    memory.add("user", "The wifi password at the cabin is heliotrope42.")
    for role, text in FILLER * 30:
        memory.add(role, text)
    context = memory.build_context(query="what was the cabin wifi password?", budget=1000)
    assert any("heliotrope42" in item.text for item in context.recalled)
    assert any("heliotrope42" in terms for _, _, terms in fts_rows(store.path, "s1"))
    memory.close()
    store.close()


def test_messages_added_without_a_store_move_to_the_fts_index_once_the_store_is_named(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    stored = append(store, "s1", [("user", "I adopted a corgi named Duoduo last spring."), *FILLER])
    recall = Recall()
    recall.add("s1", stored)  # no store: kept in the process until the store is known
    assert "Duoduo" in recalled(recall, store, "what is the name of my corgi?")[0]
    assert isinstance(recall._state("s1", store).lexical_messages, SQLiteLexicalIndex)
    assert any("duoduo" in terms for _, _, terms in fts_rows(store.path, "s1"))
    store.close()


def test_async_recall_on_sqlite_finds_words_through_the_fts_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "I adopted a corgi named Duoduo last spring."), *FILLER])
    result = asyncio.run(
        Recall().asearch("s1", "what is my corgi called?", store=store, counter=COUNTER, max_tokens=300)
    )
    assert "Duoduo" in result.items[0].text
    assert any("duoduo" in terms for _, _, terms in fts_rows(store.path, "s1"))
    store.close()


def test_other_stores_keep_the_in_process_bm25_index() -> None:
    store = InMemoryStore()
    store.append("s1", [Message.create("user", "I adopted a corgi named Duoduo.")])
    recall = Recall()
    recall.search("s1", "corgi", store=store, counter=COUNTER, max_tokens=200)
    assert isinstance(recall._state("s1", store).lexical_messages, (BM25TextIndex, SlotView))


def test_chinese_terms_round_trip_through_fts5(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "我养了一只狗，品种是柯基，名字叫多多。"), *FILLER])
    assert "多多" in recalled(Recall(), store, "我的狗叫什么名字？")[0]
    terms = fts_rows(store.path, "s1")[0][2].split()
    assert terms == tokenize("我养了一只狗，品种是柯基，名字叫多多。")
    assert "多多" in terms and "柯基" in terms
    # A single character finds it too; a pair of its characters that is not in the text
    # matches only by those characters, below the pair that is.
    index = SQLiteLexicalIndex(store, "s1", "messages")
    assert 1 in index.scores("柯")
    assert index.scores("柯基")[1] > index.scores("基柯")[1]
    store.close()


def test_scores_rank_the_document_with_the_rarer_term_first(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "the train was late"), ("user", "the train to Zermatt"), *FILLER])
    index = SQLiteLexicalIndex(store, "s1", "messages")
    index.follow_log(store.stats("s1").generation)
    for message in store.messages("s1"):
        index.add(message.seq or 0, message.text)
    scores = index.scores("train to zermatt")
    assert set(scores) == {1, 2}
    assert scores[2] > scores[1] > 0
    store.close()


# -- FTS5 query syntax in a user's query ------------------------------------------------------

HOSTILE_QUERIES = [
    '"a" OR b* NEAR(',
    "col:x",
    "terms: secret",
    "scope : secret",
    "{scope terms}: secret",
    "secret*",
    "^secret",
    "NOT secret",
    "- secret",
    "NEAR(secret other, 1)",
    '"""',
    "((((",
    "secret AND",
    "OR OR OR",
    "rank:secret",
    "recall_terms: x",
    "b*",
    "\x00secret",
    "secret' OR 1=1 --",
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
def test_fts5_syntax_in_a_query_never_raises_or_crosses_sessions(tmp_path: Path, query: str) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "mine", [("user", "my notes on banana bread"), ("user", "a plain message")])
    append(store, "theirs", [("user", "the secret launch code is zebra")])
    recall = Recall()
    for session_id in ("mine", "theirs"):
        recalled(recall, store, "banana", session_id)  # both sessions indexed in the file
    index = SQLiteLexicalIndex(store, "mine", "messages")
    scores = index.scores(query)
    query_terms = set(tokenize(query))
    texts = {m.seq: m.text for m in store.messages("mine")}
    # Only documents of this session that share one of the query's own terms: "b*" is not a prefix search.
    assert all(query_terms & set(tokenize(texts[doc])) for doc in scores)
    result = recall.search("mine", query, store=store, counter=COUNTER, max_tokens=300)
    assert "zebra" not in result.text
    store.close()


def test_a_query_of_many_terms_works(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "word777 is here"), *FILLER])
    query = " ".join(f"word{i}" for i in range(3000))
    assert "word777" in recalled(Recall(), store, query)[0]
    store.close()


# -- shared by processes ------------------------------------------------------------------------


def docs_snapshot(path: Path) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(
            "SELECT id, session_id, kind, doc_id, digest FROM recall_docs ORDER BY id"
        ).fetchall()


def test_a_second_store_object_uses_the_documents_already_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    first = SQLiteStore(path, lexical_index="fts5")
    append(first, "s1", [("user", "I keep bees on the roof of the garage."), *FILLER])
    assert "bees" in recalled(Recall(), first, "where are my bees?")[0]
    written = docs_snapshot(path)
    second = SQLiteStore(path, lexical_index="fts5")
    assert "bees" in recalled(Recall(), second, "where are my bees?")[0]
    assert docs_snapshot(path) == written  # found, and nothing added again
    # What the second one appends, the first finds.
    append(second, "s1", [("assistant", "Your aunt Matilda lives in Oaxaca.")])
    assert any("Oaxaca" in text for text in recalled(Recall(), first, "where does Matilda live?"))
    first.close()
    second.close()


def test_a_process_that_read_less_of_the_log_never_undoes_one_that_read_more(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "Where is the ferry?"), ("assistant", "At pier nine.")])
    generation = store.stats("s1").generation
    ahead, behind = (SQLiteLexicalIndex(store, "s1", "exchanges") for _ in range(2))
    for index in (ahead, behind):
        index.follow_log(generation)
        index.clear()
    append(store, "s1", [("user", "And the bus to Lindau?")])
    ahead.add(1, "Where is the ferry?\nAt pier nine.")
    ahead.add(3, "And the bus to Lindau?")
    ahead.flush()
    behind.add(1, "Where is the ferry?")  # read before the answer was stored
    behind.flush()
    assert set(behind.scores("pier")) == {1}  # the longer exchange stayed
    assert set(behind.scores("Lindau")) == {3}  # and what it never saw was not swept away
    store.close()


CHILD = """
import sys
from convmem import Recall, SQLiteStore, TiktokenCounter
store = SQLiteStore(sys.argv[1], lexical_index="fts5")
result = Recall().search("s1", sys.argv[2], store=store, counter=TiktokenCounter(), max_tokens=300)
print(result.items[0].text if result.items else "")
"""


def test_another_process_recalls_from_the_file_without_adding_documents(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    store = SQLiteStore(path, lexical_index="fts5")
    append(store, "s1", [("user", "The spare key is under the blue flowerpot."), *FILLER])
    recalled(Recall(), store, "where is the spare key?")
    written = docs_snapshot(path)
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), "where is the spare key?"],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": ":".join(sys.path)},
    )
    assert "flowerpot" in child.stdout
    assert docs_snapshot(path) == written
    store.close()


# -- deleted text is gone from the index --------------------------------------------------------

SECRET_WORD = "xylophonequartz"


def indexed_secret(folder: Path, session_id: str = "s1", user_id: str | None = None) -> SQLiteStore:
    store = SQLiteStore(folder / "m.db", lexical_index="fts5")
    store.append(
        session_id, [Message.create("user", f"my locker code word is {SECRET_WORD}")], user_id=user_id
    )
    store.append(session_id, [Message.create(r, t) for r, t in FILLER], user_id=user_id)
    recall = Recall()
    assert SECRET_WORD in recalled(recall, store, "what is my locker code word?", session_id)[0]
    assert any(SECRET_WORD in terms for _, _, terms in fts_rows(store.path, session_id))
    return store


def assert_secret_gone(store: SQLiteStore, folder: Path) -> None:
    assert not any(SECRET_WORD in terms for _, _, terms in fts_rows(store.path))
    store.close()
    assert bytes_hold(folder, SECRET_WORD) == []


def test_a_deleted_message_leaves_no_terms_in_the_fts_index_or_file(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path)
    store.delete_messages("s1", [1])
    assert recalled(Recall(), store, "what is my locker code word?") == [] or not any(
        SECRET_WORD in text for text in recalled(Recall(), store, "locker code word")
    )
    assert_secret_gone(store, tmp_path)


def test_a_replaced_message_leaves_only_its_new_terms(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path)
    store.replace_message("s1", 1, Message.create("user", "my locker code word is [removed]"))
    assert "[removed]" in recalled(Recall(), store, "locker code word")[0]
    assert_secret_gone(store, tmp_path)


def test_clear_leaves_no_terms(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path)
    store.clear("s1")
    assert fts_rows(store.path) == []
    assert_secret_gone(store, tmp_path)


def test_a_cleared_session_leaves_not_even_its_id_and_starts_afresh(tmp_path: Path) -> None:
    session_id = "customer-4711-support-chat"
    store = indexed_secret(tmp_path, session_id=session_id)
    store.clear(session_id)
    with closing(sqlite3.connect(store.path)) as conn:
        assert conn.execute("SELECT count(*) FROM recall_sessions").fetchone() == (0,)
    append(store, session_id, [("user", "a new start about tulips"), *FILLER])
    recall = Recall()
    assert "tulips" in recalled(recall, store, "tulips", session_id)[0]
    assert recalled(recall, store, "what is my locker code word?", session_id) == []
    store.clear(session_id)
    store.close()
    assert bytes_hold(tmp_path, session_id) == []
    assert bytes_hold(tmp_path, SECRET_WORD) == []


def test_forget_user_leaves_no_terms(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path, user_id="dana")
    append(store, "other", [("user", "an unrelated session about gardening")])
    recalled(Recall(), store, "gardening", "other")
    assert store.forget_user("dana") == ["s1"]
    assert {kind for kind, _, _ in fts_rows(store.path, "other")} == {0, 1}  # the other session stays
    assert_secret_gone(store, tmp_path)


def test_expire_idle_leaves_no_terms(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path)
    time.sleep(0.05)
    assert store.expire_idle(0.01) == ["s1"]
    assert_secret_gone(store, tmp_path)


def test_the_memory_facade_forgets_a_session_and_its_terms(tmp_path: Path) -> None:
    store = indexed_secret(tmp_path)
    memory = ConversationMemory("s1", store)
    memory.clear()
    assert_secret_gone(store, tmp_path)


def test_text_read_before_another_process_deleted_it_is_not_written_back(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", f"my locker code word is {SECRET_WORD}"), *FILLER])
    index = SQLiteLexicalIndex(store, "s1", "messages")
    index.follow_log(store.stats("s1").generation)  # the log as read ...
    SQLiteStore(tmp_path / "m.db", lexical_index="fts5").delete_messages(
        "s1", [1]
    )  # ... then deleted elsewhere
    index.add(1, f"my locker code word is {SECRET_WORD}")
    assert SECRET_WORD not in str(index.scores("locker code word"))
    assert fts_rows(store.path) == []
    # Recall notices the new generation and indexes what the log holds now.
    assert not any(SECRET_WORD in text for text in recalled(Recall(), store, "locker code word"))
    assert_secret_gone(store, tmp_path)


# -- missing or corrupt index ---------------------------------------------------------------------


def a_recalling_store(folder: Path) -> tuple[SQLiteStore, Recall]:
    store = SQLiteStore(folder / "m.db", lexical_index="fts5")
    append(store, "s1", [("user", "My sister Ingrid teaches violin in Bergen."), *FILLER])
    recall = Recall()
    assert "Ingrid" in recalled(recall, store, "who teaches violin?")[0]
    return store, recall


@pytest.mark.parametrize("table", ["recall_terms", "recall_docs"])
def test_a_dropped_table_is_rebuilt_from_the_log_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, table: str
) -> None:
    store, recall = a_recalling_store(tmp_path)
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute(f"DROP TABLE {table}")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        append(store, "s1", [("assistant", "Bergen is rainy.")])  # a new document to write
        assert "Ingrid" in recalled(recall, store, "who teaches violin?")[0]
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    assert {kind for kind, _, _ in fts_rows(store.path, "s1")} == {0, 1}
    assert store.messages("s1")[0].text.startswith("My sister Ingrid")  # nothing stored is lost
    # A process that had it in memory too (another Recall) adds its documents again.
    assert "Ingrid" in recalled(Recall(), store, "who teaches violin?")[0]
    store.close()


def test_a_dropped_table_does_not_stop_a_delete(tmp_path: Path) -> None:
    store, _ = a_recalling_store(tmp_path)
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute("DROP TABLE recall_terms")
    assert len(store.delete_messages("s1", [1])) == 1
    assert store.messages("s1")[0].seq == 2
    store.close()


def corrupt_fts_segments(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE recall_terms_data SET block = zeroblob(length(block)) WHERE id > 10")
        conn.commit()
        with pytest.raises(sqlite3.DatabaseError):
            conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('integrity-check')")


def test_a_corrupt_fts_index_found_by_a_new_store_is_rebuilt_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, _ = a_recalling_store(tmp_path)
    store.close()
    corrupt_fts_segments(tmp_path / "m.db")
    reopened = SQLiteStore(tmp_path / "m.db", lexical_index="fts5")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "Ingrid" in recalled(Recall(), reopened, "who teaches violin?")[0]
    assert any("integrity check failed" in r.getMessage() for r in caplog.records)
    with closing(sqlite3.connect(reopened.path)) as conn:
        conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('integrity-check')")
    assert len(reopened.messages("s1")) == 1 + len(FILLER)
    reopened.close()


def test_a_query_that_hits_a_corrupt_segment_rebuilds_the_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, recall = a_recalling_store(tmp_path)
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute("UPDATE recall_terms_data SET block = x'ffffffff' WHERE id > 10")
        conn.commit()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "Ingrid" in recalled(recall, store, "who teaches violin?")[0]
    assert any("rebuilding" in r.getMessage() for r in caplog.records)
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('integrity-check')")
    store.close()


def test_a_rebuild_by_another_process_makes_this_one_add_its_documents_again(tmp_path: Path) -> None:
    store, recall = a_recalling_store(tmp_path)
    other = SQLiteStore(store.path, lexical_index="fts5")
    with closing(sqlite3.connect(store.path)) as conn:
        conn.execute("DROP TABLE recall_terms")
    recalled(Recall(), other, "nothing at all about it")  # the other one rebuilds, empty
    append(store, "s1", [("assistant", "Bergen is rainy.")])
    assert "Ingrid" in recalled(recall, store, "who teaches violin?")[0]
    other.close()
    store.close()


# -- migration ------------------------------------------------------------------------------------

SCHEMA_3 = """
CREATE TABLE sessions (session_id TEXT PRIMARY KEY, user_id TEXT, created_at REAL NOT NULL,
    updated_at REAL NOT NULL, last_seq INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0, total_tokens INTEGER NOT NULL DEFAULT 0, generation TEXT);
CREATE TABLE messages (session_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, name TEXT, tool_calls TEXT, tool_call_id TEXT, metadata TEXT,
    status TEXT NOT NULL, ts REAL NOT NULL, token_count INTEGER, reply_to_seq INTEGER,
    PRIMARY KEY (session_id, seq)) WITHOUT ROWID;
CREATE TABLE state (session_id TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL,
    version INTEGER NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (session_id, key)) WITHOUT ROWID;
INSERT INTO sessions VALUES ('s1', NULL, 1, 1, 2, 2, 0, 'abc');
INSERT INTO messages VALUES
    ('s1', 1, 'user', '"My grandmother grew saffron in Kozani."', NULL, NULL, NULL, NULL, 'completed', 1, NULL, NULL),
    ('s1', 2, 'assistant', '"How lovely."', NULL, NULL, NULL, NULL, 'completed', 2, NULL, NULL);
PRAGMA user_version = 3;
"""


def test_a_file_of_schema_3_gets_the_fts_index_and_recalls_its_old_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(SCHEMA_3)
    store = SQLiteStore(path, lexical_index="fts5")
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (4,)
    assert "saffron" in recalled(Recall(), store, "what did grandmother grow?")[0]
    assert any("saffron" in terms for _, _, terms in fts_rows(path, "s1"))
    store.delete_messages("s1", [1])  # the migrated file's triggers purge too
    assert not any("saffron" in terms for _, _, terms in fts_rows(path))
    store.close()


def test_by_default_the_keyword_index_stays_in_the_process(tmp_path: Path) -> None:
    """FTS5 is a choice (`lexical_index="fts5"`): a default store's file gets no documents."""
    store = SQLiteStore(tmp_path / "m.db")
    memory = ConversationMemory("s1", store, MemoryConfig(keep_recent_turns=2))
    memory.add_turn("My corgi is called Duoduo.", "Lovely!")
    for i in range(6):
        memory.add_turn(f"Question {i} about the migration?", f"Answer {i}.")
    assert any("Duoduo" in item.text for item in memory.build_context("What is my corgi called?").recalled)
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM recall_docs").fetchone() == (0,)
    store.close()


@pytest.mark.parametrize("bad", ["FTS5", "bm25", "", None, 5])
def test_an_unknown_lexical_index_is_refused(tmp_path: Path, bad: object) -> None:
    with pytest.raises(ConfigError, match="lexical_index must be 'process'"):
        SQLiteStore(tmp_path / "m.db", lexical_index=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "m.db").exists()
