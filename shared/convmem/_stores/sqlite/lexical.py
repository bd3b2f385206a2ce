"""Recall's lexical index in the store's own SQLite file, with SQLite FTS5.

`SQLiteLexicalIndex` is the `LexicalIndex` recall uses for a session of a
`SQLiteStore` opened with ``lexical_index="fts5"`` (by default recall keeps
BM25 in each process instead): the terms of each message and each exchange live in the same
file as the log, so a process that opens the file finds them there instead of
keeping a BM25 copy of every session it serves in memory, and a second process
mirroring the same session writes nothing.

Tables (schema 4 of `SQLiteStore`):

``recall_sessions``
    a number for each session with documents (never reused: AUTOINCREMENT);
    deleted with the session.
``recall_docs``
    one row per (session, unit kind, doc id), its id that of its FTS row:
    ``session number << 33 | kind << 32 | doc id``, so one session's documents
    of one kind are one range of rowids, which FTS5 searches without reading
    any other session's matches. Also a digest
    of the document's text, so a process that adds a document already there
    (same digest) writes nothing, and its length: within one generation of a
    log a document only grows (an exchange gains messages), so a process that
    has not read as far as another never replaces the other's longer version,
    nor deletes documents past the last one it was given.
``recall_terms``
    FTS5 over one column, ``terms``: the space-joined output of `tokenize`.
    The ``ascii``
    tokenizer splits only on ASCII punctuation and spaces and leaves every
    other character alone, so each of our terms (Latin stems, CJK characters
    and pairs) is exactly one FTS5 token. A query is the OR of its terms, each
    quoted, so no query text is read as FTS5 syntax. Ranked with FTS5's
    ``bm25()``; its IDF and average length are those of the whole file, not
    of one session.
``recall_terms_state``
    one row, an epoch bumped when the FTS table is rebuilt; an index that sees
    another epoch than the one it wrote under re-adds its documents.

Who writes what:

* Recall writes documents, from the process that reads them: `add` buffers,
  and the buffer is written once recall has read the log (`flush`), before a
  query, or every few hundred documents, in one transaction that first
  checks that the session's log still has the generation the documents were
  read from; when it has not (another process
  deleted or replaced messages meanwhile) nothing is written and recall, which
  notices the new generation on its next read, mirrors the log afresh. The
  units (which roles count, small talk, exchanges) are recall's rules, so the
  store does not derive them in its append transaction.
* The store deletes: triggers on ``messages`` remove the documents of a
  deleted or rewritten message (its message document and the exchange holding
  it) in the deleting transaction itself, and `purge_deleted_terms` then
  merges the FTS index so no segment keeps the deleted terms (SQLite before
  3.44 has no FTS5 ``secure-delete``). Clearing, forgetting a user and expiring
  sessions go through the same triggers, whether or not any recall is running.

The first query through a store object runs FTS5's ``integrity-check`` (about
0.07 s per 10,000 messages); any read or write that fails runs it again. A
missing or corrupt FTS table is rebuilt empty with a warning, the epoch moves
on, and every recall that uses the file adds its documents again from its
mirror of the log: nothing stored is lost.

Costs (``benchmarks/bench_lexical_sqlite.py``): the index takes several times
the log's size on disk; a query costs O(documents of the session that share a
term with it) in ``bm25()``, slower per match than `BM25Index`; a delete merges
the whole FTS index (O(index)); recall across a user's sessions runs one FTS5
query per session and unit kind it screens (about 0.3 ms each), where BM25 in
memory costs microseconds; in return no process holds or rebuilds a copy.
"""

from __future__ import annotations

import logging
import sqlite3
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Protocol

from ..._errors import StoreError
from ..._recall.lexical import (
    BufferedLexicalIndex,
    LexicalIndexLost,
    LexicalScores,
    document_digest,
    no_scores,
    query_terms,
    tokenize,
)

__all__ = [
    "UNIT_KINDS",
    "SQLiteFile",
    "SQLiteLexicalIndex",
    "create_lexical_schema",
    "ensure_lexical_schema",
    "purge_deleted_terms",
    "sessions_have_documents",
]

logger = logging.getLogger("convmem")

UNIT_KINDS = {"messages": 0, "exchanges": 1}
_DOCS = """
CREATE TABLE IF NOT EXISTS recall_docs (
    id         INTEGER PRIMARY KEY,  -- session number << 33 | kind << 32 | doc_id
    session_id TEXT NOT NULL,
    kind       INTEGER NOT NULL,
    doc_id     INTEGER NOT NULL,
    digest     BLOB NOT NULL,
    size       INTEGER NOT NULL,
    UNIQUE (session_id, kind, doc_id)
)"""
_TERMS = "CREATE VIRTUAL TABLE IF NOT EXISTS recall_terms USING fts5(terms, tokenize = 'ascii')"
_SESSIONS = """
CREATE TABLE IF NOT EXISTS recall_sessions (
    number     INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL UNIQUE
)"""
# FTS rowid = session number << 33 | kind << 32 | doc id: 2**30 sessions, doc ids (seqs) below 2**32.
_DOC_BITS = 32
_KIND_SHIFT = _DOC_BITS
_SESSION_SHIFT = _DOC_BITS + 1
_MAX_SESSION_NUMBER = (1 << (63 - _SESSION_SHIFT)) - 1
_STATE = "CREATE TABLE IF NOT EXISTS recall_terms_state (epoch INTEGER NOT NULL)"
# The documents holding a message: the message itself, and the exchange it belongs to
# (exchanges are runs of seqs: the one with the greatest first seq not after it).
_DOCUMENTS_OF_OLD_MESSAGE = """
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 0 AND doc_id = OLD.seq;
    DELETE FROM recall_docs WHERE session_id = OLD.session_id AND kind = 1 AND doc_id = (
        SELECT max(doc_id) FROM recall_docs
        WHERE session_id = OLD.session_id AND kind = 1 AND doc_id <= OLD.seq);
"""
_TRIGGERS = (
    """CREATE TRIGGER IF NOT EXISTS recall_docs_deleted AFTER DELETE ON recall_docs BEGIN
        DELETE FROM recall_terms WHERE rowid = OLD.id;
    END""",
    f"""CREATE TRIGGER IF NOT EXISTS messages_deleted_from_recall AFTER DELETE ON messages BEGIN
        {_DOCUMENTS_OF_OLD_MESSAGE}
    END""",
    # replace_message sets every column; set_status (only status) keeps the text.
    f"""CREATE TRIGGER IF NOT EXISTS messages_rewritten_for_recall
    AFTER UPDATE OF content, name ON messages BEGIN
        {_DOCUMENTS_OF_OLD_MESSAGE}
    END""",
)
_LEXICAL_TABLES = ("recall_sessions", "recall_docs", "recall_terms", "recall_terms_state")
_IN_CHUNK = 500


def create_lexical_schema(conn: sqlite3.Connection) -> None:
    """Create the lexical tables and triggers that are missing (inside a write transaction)."""
    conn.execute(_SESSIONS)
    conn.execute(_DOCS)
    conn.execute(_TERMS)
    conn.execute(_STATE)
    if conn.execute("SELECT count(*) FROM recall_terms_state").fetchone()[0] == 0:
        conn.execute("INSERT INTO recall_terms_state(epoch) VALUES (1)")
    for trigger in _TRIGGERS:
        conn.execute(trigger)


def _missing_tables(conn: sqlite3.Connection) -> list[str]:
    present = {
        row[0]
        for row in conn.execute(
            f"SELECT name FROM sqlite_master WHERE name IN ({','.join('?' * len(_LEXICAL_TABLES))})",
            _LEXICAL_TABLES,
        )
    }
    return [name for name in _LEXICAL_TABLES if name not in present]


def ensure_lexical_schema(conn: sqlite3.Connection, path: object) -> None:
    """Before the store deletes (write transaction held): the triggers on ``messages``
    need the lexical tables, so a table someone dropped is rebuilt first (empty)."""
    if _missing_tables(conn):
        _rebuild(conn, path, "a lexical table is missing")


def _rebuild(conn: sqlite3.Connection, path: object, reason: str) -> None:
    """Drop and recreate the FTS table, forget every document, move the epoch on
    (write transaction held): every recall adds its documents again."""
    logger.warning(
        "the recall lexical index in %s is unusable (%s); rebuilding it: recall adds every "
        "session's messages again from the log",
        path,
        reason,
    )
    conn.execute("DROP TABLE IF EXISTS recall_terms")
    create_lexical_schema(conn)
    conn.execute("DELETE FROM recall_docs")
    conn.execute("DELETE FROM recall_sessions")
    conn.execute("UPDATE recall_terms_state SET epoch = epoch + 1")


def sessions_have_documents(conn: sqlite3.Connection, session_ids: list[str]) -> bool:
    """Whether any of these sessions has lexical documents (then a delete must purge)."""
    for start in range(0, len(session_ids), _IN_CHUNK):
        chunk = session_ids[start : start + _IN_CHUNK]
        found = conn.execute(
            f"SELECT 1 FROM recall_docs WHERE session_id IN ({','.join('?' * len(chunk))}) LIMIT 1",
            chunk,
        ).fetchone()
        if found:
            return True
    return False


def purge_deleted_terms(conn: sqlite3.Connection) -> None:
    """Merge the FTS index into one segment: FTS5 deletes by writing tombstones, and the
    terms of a deleted document stay in older segments until they are merged away."""
    conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('optimize')")


def _phrase(term: str) -> str:
    """A term as an FTS5 string: quoted, so no query text is ever read as FTS5 syntax."""
    return '"' + term.replace('"', '""') + '"'


def _is_busy(exc: sqlite3.Error) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class SQLiteFile(Protocol):
    """What the index needs of a `SQLiteStore` (named here: the store imports this module)."""

    path: Path
    _lexical_checked: bool

    def _connection(self) -> AbstractContextManager[sqlite3.Connection]: ...


class SQLiteLexicalIndex(BufferedLexicalIndex):
    """One session's messages or exchanges, found by their words with SQLite FTS5.

    Made by recall for each session of a `SQLiteStore` (see the module docstring
    for the tables and who writes them). Not thread-safe: recall calls it under
    the session's lock.

    Args:
        store: the `SQLiteStore` whose file holds the index.
        session_id: the session whose documents these are.
        units: ``"messages"`` (doc id = seq) or ``"exchanges"`` (doc id = first seq).

    Example::

        index = SQLiteLexicalIndex(store, "s1", "messages")
        index.follow_log(store.stats("s1").generation)
        index.add(1, "My dog is called Duoduo")
        index.scores("what is my dog called?")  # {1: 1.2...}
    """

    def __init__(self, store: SQLiteFile, session_id: str, units: str) -> None:
        if units not in UNIT_KINDS:
            raise ValueError(f"units must be one of {sorted(UNIT_KINDS)}, got {units!r}")
        super().__init__(session_id, units)
        self.store = store
        self._kind = UNIT_KINDS[units]
        self._epoch: int | None = None

    def __repr__(self) -> str:
        return f"SQLiteLexicalIndex({self.store!r}, {self.session_id!r}, {self.units!r})"

    # -- LexicalIndex -------------------------------------------------------------------

    def _write_buffered(self, *, final: bool) -> None:
        # `flush` (final): recall calls it after reading the log, in a worker thread under
        # asyncio; a failure is left for `scores`, which repairs.
        with self.store._connection() as conn:
            if final:
                self._check_once(conn)
            self._flush(conn, final=final)

    def _check_once(self, conn: sqlite3.Connection) -> None:
        """FTS5's integrity check, once per store object: a damaged segment is read
        without an error as often as not. Raises `sqlite3.DatabaseError` when it fails."""
        if not self.store._lexical_checked:
            conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('integrity-check')")
            self.store._lexical_checked = True

    def scores(self, query: str) -> LexicalScores:
        """FTS5 ``bm25()`` (negated: higher is better) of every document sharing a term.

        Raises `LexicalIndexLost` when the FTS table was missing or corrupt (rebuilt
        here) or another process rebuilt it: add every document again and ask again.
        """
        terms = list(dict.fromkeys(query_terms(query)))
        try:
            with self.store._connection() as conn:
                self._check_once(conn)
                self._flush(conn, final=True)
                if not terms:
                    return no_scores()
                # One statement: a session's number never changes while it has documents, and
                # numbers are never reused, so a number read once stays right or finds nothing.
                epoch, number = conn.execute(
                    "SELECT (SELECT epoch FROM recall_terms_state), "
                    "(SELECT number FROM recall_sessions WHERE session_id = ?)",
                    (self.session_id,),
                ).fetchone()
                if epoch is None or (self._epoch is not None and epoch != self._epoch):
                    self._epoch = None
                    raise LexicalIndexLost(f"the lexical index of {self.store.path} was rebuilt")
                base = None if number is None else self._first_rowid(number)
                if base is None:
                    return no_scores()  # nothing of this session written yet
                # One range of rowids: FTS5 reads no other session's or kind's matches.
                rows = conn.execute(
                    "SELECT rowid - ?, -bm25(recall_terms) FROM recall_terms "
                    "WHERE recall_terms MATCH ? AND rowid BETWEEN ? AND ?",
                    (base, " OR ".join(map(_phrase, terms)), base, base + (1 << _DOC_BITS) - 1),
                ).fetchall()
        except sqlite3.DatabaseError as exc:
            if isinstance(exc, sqlite3.OperationalError) and _is_busy(exc):
                raise
            self._check_after(exc)
            raise
        return LexicalScores.of_rows(rows)

    # -- writing ------------------------------------------------------------------------

    def _base(self, conn: sqlite3.Connection) -> int | None:
        """The first FTS rowid of this session's documents of this kind (None: none written)."""
        row = conn.execute(
            "SELECT number FROM recall_sessions WHERE session_id = ?", (self.session_id,)
        ).fetchone()
        return None if row is None else self._first_rowid(row[0])

    def _numbered_base(self, conn: sqlite3.Connection) -> int:
        """`_base`, giving the session its number first if it has none (write transaction held)."""
        base = self._base(conn)
        if base is not None:
            return base
        cursor = conn.execute("INSERT INTO recall_sessions(session_id) VALUES (?)", (self.session_id,))
        return self._first_rowid(cursor.lastrowid)

    def _first_rowid(self, number: int | None) -> int:
        if number is None or number > _MAX_SESSION_NUMBER:
            raise StoreError(
                f"recall's lexical index in {self.store.path} has numbered {number} sessions, past "
                f"{_MAX_SESSION_NUMBER}; drop its tables (recall_sessions, recall_docs, recall_terms) "
                "and recall rebuilds them"
            )
        return (number << _SESSION_SHIFT) | (self._kind << _KIND_SHIFT)

    def _stored(self, conn: sqlite3.Connection, doc_ids: list[int] | None) -> dict[int, tuple[bytes, int]]:
        """Digest and length of the stored documents: of `doc_ids`, or all of them (None)."""
        base = "SELECT doc_id, digest, size FROM recall_docs WHERE session_id = ? AND kind = ?"
        rows: list[tuple[int, bytes, int]] = []
        if doc_ids is None:
            rows = conn.execute(base, (self.session_id, self._kind)).fetchall()
        for start in range(0, len(doc_ids or ()), _IN_CHUNK):
            chunk = (doc_ids or [])[start : start + _IN_CHUNK]
            rows.extend(
                conn.execute(
                    f"{base} AND doc_id IN ({','.join('?' * len(chunk))})",
                    (self.session_id, self._kind, *chunk),
                ).fetchall()
            )
        return {doc_id: (digest, size) for doc_id, digest, size in rows}

    def _flush(self, conn: sqlite3.Connection, *, final: bool) -> None:
        """Write what `add` buffered; documents already stored with the same text are left
        alone. With ``final`` after `clear`, stored documents not added again go."""
        sweep = self._due(final=final)
        if sweep is None:
            return
        stored = self._stored(conn, self._wanted(sweep=sweep))
        writes, deletes = self._changes(stored, sweep=sweep)
        if writes or deletes:
            self._write(conn, writes, deletes)
        elif self._epoch is None:
            self._epoch = conn.execute("SELECT epoch FROM recall_terms_state").fetchone()[0]
        self._written(sweep=sweep)

    def _write(self, conn: sqlite3.Connection, writes: dict[int, str], deletes: list[int]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT generation FROM sessions WHERE session_id = ?", (self.session_id,)
            ).fetchone()
            if (row[0] if row else None) != self._generation or row is None:
                # Another process deleted or replaced messages (or forgot the session): what
                # was read from the old log must not be written. Recall reads the log afresh.
                conn.execute("ROLLBACK")
                return
            epoch = conn.execute("SELECT epoch FROM recall_terms_state").fetchone()[0]
            if self._epoch is not None and epoch != self._epoch:
                conn.execute("ROLLBACK")
                return  # scores() raises LexicalIndexLost: everything is added again
            key = "DELETE FROM recall_docs WHERE session_id = ? AND kind = ? AND doc_id = ?"
            conn.executemany(key, [(self.session_id, self._kind, d) for d in deletes])
            # A longer version written meanwhile (by a process that read further) stays.
            conn.executemany(
                f"{key} AND size <= ?", [(self.session_id, self._kind, d, len(t)) for d, t in writes.items()]
            )
            base = self._numbered_base(conn) if writes else 0
            for doc_id, text in writes.items():
                if not 0 <= doc_id < 1 << _DOC_BITS:
                    continue  # a seq past 2**32: found by meaning only
                cursor = conn.execute(
                    "INSERT OR IGNORE INTO recall_docs(id, session_id, kind, doc_id, digest, size) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (base | doc_id, self.session_id, self._kind, doc_id, document_digest(text), len(text)),
                )
                if not cursor.rowcount:
                    continue
                conn.execute(
                    "INSERT INTO recall_terms(rowid, terms) VALUES (?, ?)",
                    (base | doc_id, " ".join(tokenize(text))),
                )
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._epoch = epoch

    # -- recovering ---------------------------------------------------------------------

    def _check_after(self, error: sqlite3.DatabaseError) -> None:
        """After a failed read or write: rebuild the FTS table when it is missing or fails
        its integrity check (then raise `LexicalIndexLost`); otherwise return."""
        with self.store._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                missing = _missing_tables(conn)
                reason = f"{', '.join(missing)} missing" if missing else None
                if reason is None:
                    try:
                        conn.execute("INSERT INTO recall_terms(recall_terms) VALUES ('integrity-check')")
                    except sqlite3.DatabaseError as exc:
                        reason = f"integrity check failed: {exc}"
                if reason is None:
                    conn.execute("ROLLBACK")
                    return
                _rebuild(conn, self.store.path, f"{reason}; first error: {error}")
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        self._pending.clear()
        self._confirmed.clear()
        self._epoch = None
        raise LexicalIndexLost(f"the lexical index of {self.store.path} was rebuilt") from error
