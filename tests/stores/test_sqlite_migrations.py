"""A SQLite file's schema evolves through named, numbered migrations, each applied once and
recorded; a file written before migrations were recorded opens with nothing lost."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from called_postings import sqlite_postings

from convmem import Message, Recall, SQLiteStore, StoreError, TiktokenCounter
from convmem._stores.sqlite.migrations import MIGRATIONS, SCHEMA_VERSION

COUNTER = TiktokenCounter()

# The schema as convmem wrote it before it recorded migrations by name (PRAGMA user_version 4),
# with a session, its state and one keyword-index document, written as that version wrote them.
SCHEMA_4 = """
CREATE TABLE sessions (
    session_id   TEXT PRIMARY KEY,
    user_id      TEXT,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    last_seq     INTEGER NOT NULL DEFAULT 0,
    message_count INTEGER NOT NULL DEFAULT 0,
    total_tokens INTEGER NOT NULL DEFAULT 0,
    generation   TEXT
);
CREATE INDEX sessions_by_user ON sessions(user_id);
CREATE INDEX sessions_by_activity ON sessions(updated_at);
CREATE TABLE messages (
    session_id   TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    name         TEXT,
    tool_calls   TEXT,
    tool_call_id TEXT,
    metadata     TEXT,
    status       TEXT NOT NULL,
    ts           REAL NOT NULL,
    token_count  INTEGER,
    reply_to_seq INTEGER,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE state (
    session_id   TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    version      INTEGER NOT NULL,
    updated_at   REAL NOT NULL,
    PRIMARY KEY (session_id, key)
) WITHOUT ROWID;
CREATE TRIGGER sessions_generation AFTER INSERT ON sessions
WHEN NEW.generation IS NULL
BEGIN
    UPDATE sessions SET generation = lower(hex(randomblob(8))) WHERE session_id = NEW.session_id;
END;
CREATE TABLE recall_sessions (
    number     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE
);
CREATE TABLE recall_docs (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    kind       INTEGER NOT NULL,
    doc_id     INTEGER NOT NULL,
    digest     BLOB NOT NULL,
    size       INTEGER NOT NULL,
    UNIQUE (session_id, kind, doc_id)
);
CREATE VIRTUAL TABLE recall_terms USING fts5(terms, tokenize = 'ascii');
CREATE TABLE recall_terms_state (epoch INTEGER NOT NULL);
INSERT INTO recall_terms_state(epoch) VALUES (1);
CREATE TRIGGER recall_docs_deleted AFTER DELETE ON recall_docs BEGIN
    DELETE FROM recall_terms WHERE rowid = OLD.id;
END;
CREATE TRIGGER messages_deleted_from_recall AFTER DELETE ON messages BEGIN
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 0 AND doc_id = OLD.seq;
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 1 AND doc_id = (
        SELECT max(doc_id) FROM recall_docs
        WHERE session_id = OLD.session_id AND kind = 1 AND doc_id <= OLD.seq);
END;
CREATE TRIGGER messages_rewritten_for_recall
AFTER UPDATE OF content, name ON messages BEGIN
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 0 AND doc_id = OLD.seq;
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 1 AND doc_id = (
        SELECT max(doc_id) FROM recall_docs
        WHERE session_id = OLD.session_id AND kind = 1 AND doc_id <= OLD.seq);
END;
INSERT INTO sessions VALUES ('s1', 'ana', 10, 20, 2, 2, 9, 'a1b2c3d4e5f60718');
INSERT INTO messages VALUES
    ('s1', 1, 'user', '"My sister lives in Tromsø."', 'Ana', NULL, NULL, '{"lang": "en"}', 'completed',
     10, 4, NULL),
    ('s1', 2, 'assistant', '"Noted."', NULL, NULL, NULL, NULL, 'completed', 11, 5, 1);
INSERT INTO state VALUES ('s1', 'summary', '{"text": "Ana''s sister"}', 3, 20);
INSERT INTO recall_sessions(session_id) VALUES ('s1');
INSERT INTO recall_docs VALUES (8589934593, 's1', 0, 1, x'00', 27);
INSERT INTO recall_terms(rowid, terms) VALUES (8589934593, 'sister live troms');
PRAGMA user_version = 4;
"""


def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(SCHEMA_4)
    return path


def rows(path: Path, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def postings_of(path: Path, term: str) -> int:
    """How many documents of any history hold `term`, as a search reads them."""
    histories = [number for (number,) in rows(path, "SELECT number FROM recall_histories")]
    return sum(len(sqlite_postings(path, history, [term])) for history in histories)


def shape(path: Path) -> dict[str, object]:
    """Every table's columns and every index and trigger, by name: what the file can hold."""
    with closing(sqlite3.connect(path)) as conn:
        objects = conn.execute(
            "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
        ).fetchall()
        return {
            name: [row[1:] for row in conn.execute(f"PRAGMA table_info('{name}')")]
            if kind == "table"
            else kind
            for kind, name in objects
        }


def test_a_file_of_the_previous_layout_opens_with_nothing_lost(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    before = {table: rows(path, f"SELECT * FROM {table}") for table in ("sessions", "messages", "state")}
    store = SQLiteStore(path)
    assert [m.text for m in store.messages("s1")] == ["My sister lives in Tromsø.", "Noted."]
    assert store.messages("s1")[0].name == "Ana" and store.messages("s1")[1].reply_to_seq == 1
    stats = store.stats("s1")
    assert (stats.user_id, stats.last_seq, stats.total_tokens, stats.generation) == (
        "ana",
        2,
        9,
        "a1b2c3d4e5f60718",
    )
    summary = store.get_state("s1", "summary")
    assert summary is not None and summary.version == 3
    store.close()
    assert {table: rows(path, f"SELECT * FROM {table}") for table in before} == before


def test_the_per_session_keyword_index_goes_and_recall_indexes_the_old_log_again(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    store = SQLiteStore(path)
    assert (
        rows(path, "SELECT name FROM sqlite_master WHERE name LIKE 'recall_terms%' OR name = 'recall_docs'")
        == []
    )
    result = Recall().search("s1", "where does my sister live?", store=store, max_tokens=200, counter=COUNTER)
    assert [item.text.splitlines()[-1] for item in result.items] == ["Ana: My sister lives in Tromsø."]
    assert postings_of(path, "sister") == 2  # passage, exchange
    store.close()


def test_the_previous_layout_counts_as_migrated_and_is_recorded_without_a_time(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    SQLiteStore(path).close()
    recorded = rows(path, "SELECT version, name, applied_at FROM schema_version ORDER BY version")
    assert [(number, name) for number, name, _ in recorded] == [
        (number, name) for number, name, _ in MIGRATIONS
    ]
    assert [applied is None for number, _, applied in recorded] == [
        number <= 4 for number, _, _ in MIGRATIONS
    ]
    assert rows(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]


def test_a_migrated_file_can_hold_what_a_new_file_holds(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    SQLiteStore(path).close()
    SQLiteStore(tmp_path / "new.db").close()
    assert shape(path) == shape(tmp_path / "new.db")


def test_a_migrated_file_keeps_working_as_a_store(tmp_path: Path) -> None:
    store = SQLiteStore(old_file(tmp_path))
    (stored,) = store.append("s1", [Message.create("user", "And my brother in Oslo.")], user_id="ana")
    assert stored.seq == 3
    Recall().catch_up("s1", store)
    assert postings_of(store.path, "sister") == 2
    store.delete_messages("s1", [1])  # its keyword rows go in the same transaction
    assert postings_of(store.path, "sister") == 0
    store.close()


def test_a_new_file_records_each_migration_by_number_name_and_time(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    recorded = rows(path, "SELECT version, name, applied_at FROM schema_version ORDER BY version")
    assert [(number, name) for number, name, _ in recorded] == [(n, name) for n, name, _ in MIGRATIONS]
    assert all(isinstance(applied_at, float) for _, _, applied_at in recorded)


def test_an_older_file_runs_only_the_migrations_it_lacks(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(SCHEMA_4.split("CREATE TABLE recall_sessions")[0] + "PRAGMA user_version = 3;")
    SQLiteStore(path).close()
    recorded = rows(path, "SELECT version, applied_at IS NOT NULL FROM schema_version ORDER BY version")
    assert recorded == [(1, 0), (2, 0), (3, 0), (4, 1), (5, 1), (6, 1)]
    assert rows(path, "SELECT count(*) FROM recall_histories") == [(0,)]


def test_reopening_a_current_file_applies_nothing(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    first = rows(path, "SELECT version, applied_at FROM schema_version")
    SQLiteStore(path).close()
    assert rows(path, "SELECT version, applied_at FROM schema_version") == first


def test_a_file_of_a_newer_convmem_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = old_file(tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="written by a newer convmem"):
        SQLiteStore(path)
    assert rows(path, "SELECT name FROM sqlite_master WHERE name = 'schema_version'") == []


def schema_5_file(tmp_path: Path) -> Path:
    """A file as schema 5 left it: one user's session indexed term by term in recall_postings."""
    path = tmp_path / "five.db"
    store = SQLiteStore(path)
    store.append("s1", [Message.create("user", "My sister lives in Tromsø.")], user_id="ana")
    Recall().catch_up("s1", store)
    store.close()
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(
            """
            DROP TABLE recall_segments;
            DROP TABLE recall_segment_terms;
            CREATE TABLE recall_postings (
                history INTEGER NOT NULL, term TEXT NOT NULL, kind INTEGER NOT NULL,
                key INTEGER NOT NULL, count INTEGER NOT NULL, length INTEGER NOT NULL,
                PRIMARY KEY (history, term, kind, key)
            ) WITHOUT ROWID;
            CREATE INDEX recall_postings_by_key ON recall_postings(history, key);
            INSERT INTO recall_postings SELECT number, 'sister', 0, 4294967296, 1, 3 FROM recall_histories;
            DELETE FROM schema_version WHERE version = 6;
            PRAGMA user_version = 5;
            """
        )
    return path


def test_postings_kept_term_by_term_go_and_the_sessions_are_indexed_again_in_segments(
    tmp_path: Path,
) -> None:
    path = schema_5_file(tmp_path)
    store = SQLiteStore(path)
    assert rows(path, "SELECT name FROM sqlite_master WHERE name LIKE 'recall_postings%'") == []
    assert rows(path, "SELECT generation IS NULL, cursor FROM recall_index_sessions") == [(1, "")]
    assert postings_of(path, "sister") == 0
    result = Recall().search("s1", "where does my sister live?", store=store, max_tokens=200, counter=COUNTER)
    assert [item.text.splitlines()[-1] for item in result.items] == ["User: My sister lives in Tromsø."]
    assert postings_of(path, "sister") == 2  # passage, exchange: indexed again from the log
    store.close()
    assert shape(path) == shape(_new_file(tmp_path))


def _new_file(tmp_path: Path) -> Path:
    path = tmp_path / "new.db"
    SQLiteStore(path).close()
    return path
