"""The schema of a `SQLiteStore` file, built by named, numbered migrations.

Each migration is a function that takes a connection inside a write
transaction and brings the file one step further. `migrate` applies, in
order, every one the file has not had, and records each in the
``schema_version`` table (number, name, time applied); ``PRAGMA
user_version`` holds the newest number too, so a file written by a newer
convmem is refused rather than misread. Never edit a released migration:
add the next one.

Files written before migrations were recorded by name carry only
``user_version``: migrations up to it count as applied (recorded with no
time). Every step also tolerates a file that already has what it adds, so a
file of any age, even one some older version half-built, comes out whole.

Tables::

    sessions  session_id -> user_id, created_at, updated_at, last_seq, message_count,
              total_tokens, generation (3)
    messages  (session_id, seq) -> role, content, name, tool_calls, tool_call_id, metadata,
              status, ts, token_count, reply_to_seq (2)
    state     (session_id, key) -> value, version, updated_at
    recall_*  recall's keyword index of each user's history (5, replacing the FTS5 index of 4;
              its postings in segments since 6; see `convmem._stores.sqlite.lexical`)
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

from ..._errors import StoreError
from .lexical import create_history_schema

__all__ = ["MIGRATIONS", "NEW_GENERATION", "SCHEMA_VERSION", "applied_migrations", "migrate"]

# A fresh log generation, computed by SQLite (see `Store`): 16 random hex digits.
NEW_GENERATION = "lower(hex(randomblob(8)))"

Migration = Callable[[sqlite3.Connection], None]


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}


def _add_column(conn: sqlite3.Connection, table: str, column: str, kind: str) -> None:
    # A nullable column leaves every stored row as it was; older rows read it as NULL.
    if column not in _columns(conn, table):
        conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")


def sessions_messages_and_state(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE IF NOT EXISTS sessions (
            session_id    TEXT PRIMARY KEY,
            user_id       TEXT,
            created_at    REAL NOT NULL,
            updated_at    REAL NOT NULL,
            last_seq      INTEGER NOT NULL DEFAULT 0,
            message_count INTEGER NOT NULL DEFAULT 0,
            total_tokens  INTEGER NOT NULL DEFAULT 0
        )"""
    )
    conn.execute("CREATE INDEX IF NOT EXISTS sessions_by_user ON sessions(user_id)")
    conn.execute("CREATE INDEX IF NOT EXISTS sessions_by_activity ON sessions(updated_at)")
    conn.execute(
        """CREATE TABLE IF NOT EXISTS messages (
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
            PRIMARY KEY (session_id, seq)
        ) WITHOUT ROWID"""
    )
    conn.execute(
        """CREATE TABLE IF NOT EXISTS state (
            session_id TEXT NOT NULL,
            key        TEXT NOT NULL,
            value      TEXT NOT NULL,
            version    INTEGER NOT NULL,
            updated_at REAL NOT NULL,
            PRIMARY KEY (session_id, key)
        ) WITHOUT ROWID"""
    )


def reply_to_seq(conn: sqlite3.Connection) -> None:
    """messages.reply_to_seq: the question an answer belongs to."""
    _add_column(conn, "messages", "reply_to_seq", "INTEGER")


def log_generations(conn: sqlite3.Connection) -> None:
    """sessions.generation: a generation per session log, given to every existing session."""
    _add_column(conn, "sessions", "generation", "TEXT")
    conn.execute(f"UPDATE sessions SET generation = {NEW_GENERATION} WHERE generation IS NULL")
    # Every new session row gets one, so no insert has to name the column; deleting or
    # replacing messages sets a new one.
    conn.execute(
        f"""CREATE TRIGGER IF NOT EXISTS sessions_generation AFTER INSERT ON sessions
        WHEN NEW.generation IS NULL
        BEGIN
            UPDATE sessions SET generation = {NEW_GENERATION} WHERE session_id = NEW.session_id;
        END"""
    )


# Schema 4 as released: recall's per-session FTS5 index (dropped by schema 5).
_FTS5_TABLES = (
    """CREATE TABLE IF NOT EXISTS recall_sessions (
        number     INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT NOT NULL UNIQUE
    )""",
    """CREATE TABLE IF NOT EXISTS recall_docs (
        id         INTEGER PRIMARY KEY,
        session_id TEXT NOT NULL,
        kind       INTEGER NOT NULL,
        doc_id     INTEGER NOT NULL,
        digest     BLOB NOT NULL,
        size       INTEGER NOT NULL,
        UNIQUE (session_id, kind, doc_id)
    )""",
    "CREATE VIRTUAL TABLE IF NOT EXISTS recall_terms USING fts5(terms, tokenize = 'ascii')",
    "CREATE TABLE IF NOT EXISTS recall_terms_state (epoch INTEGER NOT NULL)",
    "INSERT INTO recall_terms_state(epoch) SELECT 1 WHERE NOT EXISTS (SELECT 1 FROM recall_terms_state)",
)
_FTS5_TRIGGERS = ("recall_docs_deleted", "messages_deleted_from_recall", "messages_rewritten_for_recall")


def recall_keyword_index(conn: sqlite3.Connection) -> None:
    """recall_*: recall's keyword index in FTS5 tables (as schema 4 made them; schema 5
    replaces them, so the triggers that kept them are not made again)."""
    for statement in _FTS5_TABLES:
        conn.execute(statement)


def recall_history_index(conn: sqlite3.Connection) -> None:
    """recall_histories, recall_index_sessions, recall_units, recall_postings: recall's
    keyword index of each user's history; the per-session FTS5 index goes (each session
    is indexed again from its log when next searched)."""
    for trigger in _FTS5_TRIGGERS:
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    for table in ("recall_terms", "recall_docs", "recall_sessions", "recall_terms_state"):
        conn.execute(f"DROP TABLE IF EXISTS {table}")
    create_history_schema(conn)


def recall_postings_in_segments(conn: sqlite3.Connection) -> None:
    """recall_segments, recall_segment_terms: the postings of a history in segments
    written whole, instead of term by term in recall_postings (each session is indexed
    again from its log when next searched)."""
    conn.execute("DROP INDEX IF EXISTS recall_postings_by_key")
    conn.execute("DROP TABLE IF EXISTS recall_postings")
    create_history_schema(conn)


# (number, name, step). The name is recorded with the number.
MIGRATIONS: tuple[tuple[int, str, Migration], ...] = (
    (1, "sessions, messages and state", sessions_messages_and_state),
    (2, "messages.reply_to_seq: the question an answer belongs to", reply_to_seq),
    (3, "a generation per session log", log_generations),
    (4, "recall's keyword index (FTS5)", recall_keyword_index),
    (5, "recall's keyword index of each user's history", recall_history_index),
    (6, "recall's postings in segments", recall_postings_in_segments),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]

_RECORDS = """CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at REAL
)"""


def _is_current(conn: sqlite3.Connection) -> bool:
    version, recorded = conn.execute(
        "SELECT (SELECT user_version FROM pragma_user_version), "
        "EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version')"
    ).fetchone()
    return bool(version == SCHEMA_VERSION and recorded)


def migrate(conn: sqlite3.Connection, path: Path) -> int:
    """Apply the migrations the file at `path` lacks; return its schema version.

    One ``BEGIN IMMEDIATE`` transaction, the version read again inside it:
    processes opening an old file at once migrate it exactly once, and a
    failed step leaves the file as it was.
    """
    if _is_current(conn):
        return SCHEMA_VERSION
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{path} was written by a newer convmem (schema {version} > {SCHEMA_VERSION}); "
                "upgrade convmem to open it"
            )
        conn.execute(_RECORDS)
        recorded = {row[0] for row in conn.execute("SELECT version FROM schema_version")}
        for number, name, step in MIGRATIONS:
            if number <= version and number not in recorded:
                # Applied by a convmem that kept only PRAGMA user_version: recorded, not re-run.
                conn.execute("INSERT INTO schema_version (version, name) VALUES (?, ?)", (number, name))
            elif number > version:
                step(conn)
                conn.execute(
                    "INSERT OR REPLACE INTO schema_version (version, name, applied_at) VALUES (?, ?, ?)",
                    (number, name, time.time()),
                )
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return SCHEMA_VERSION


def applied_migrations(conn: sqlite3.Connection) -> list[tuple[int, str, float | None]]:
    """The file's record of migrations: (number, name, time applied or None), oldest first."""
    return [
        (int(row[0]), str(row[1]), row[2])
        for row in conn.execute("SELECT version, name, applied_at FROM schema_version ORDER BY version")
    ]
