"""Recall's keyword index kept in the store (`HostsHistoryIndex`): on SQLite and
PostgreSQL a user's history is searched in the store's own tables, so a new process
answers a returning user's first query without reading the user's logs, with the same
results as the in-process mirror. The tables follow the log: what is appended behind
recall's back is found, what is deleted, replaced or forgotten is gone, a missing,
stale or corrupt index is made again from the log with a warning, writers of one
session write it once, and no user's history is searched for another's."""

from __future__ import annotations

import contextlib
import json
import logging
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from called_postings import called_postings, sqlite_postings

from convmem import ConversationMemory, Message, PostgresStore, Recall, SQLiteStore, Store
from convmem._recall import terms
from convmem._recall.index_rows import KEY_SHIFT, IndexCursor, IndexedSession
from convmem._recall.kept_cursors import plan_indexing
from convmem._recall.kept_history import WRITE_EVERY
from convmem._recall.terms import tokenize
from convmem.integration import LogRead

FALLBACK = "could not search the keyword index"

# Three earlier sessions of one user, each holding one thing worth recalling among chatter.
FILLER = [
    ("How was your weekend?", "Pretty quiet, I mostly read a novel about sailors."),
    ("Work has been busy with the quarterly report.", "Deadlines always pile up at the end of a quarter."),
    ("I tried a new ramen place downtown.", "Was the broth any good?"),
    ("Any tips for sleeping better?", "Keep a regular schedule and skip screens before bed."),
]
HISTORY = {
    "trip": [("My sister Ingrid teaches violin in Bergen.", "Bergen sounds lovely."), *FILLER],
    "garden": [*FILLER, ("The spare key is under the blue flowerpot.", "Noted, blue flowerpot.")],
    "pets": [
        FILLER[0],
        ("My corgi is called Duoduo and loves the beach.", "Duoduo is a great name!"),
        ("我的狗叫多多，它喜欢在公园里追球。", "多多真可爱。"),
        *FILLER[1:],
    ],
}
QUERIES = {
    "Where does my sister Ingrid teach violin?": "Bergen",
    "Where is the spare key?": "flowerpot",
    "What is my corgi called?": "Duoduo",
    "我的狗叫什么名字？": "多多",
}


# -- the two stores ----------------------------------------------------------------------------


class _CountsReads:
    """Records every read of a session's messages (`messages`, `tail`, `get`, `read_logs`)
    by session id."""

    reads: list[tuple[str, str]]

    def messages(self, session_id: str, **kwargs: Any) -> list[Message]:
        self.reads.append(("messages", session_id))
        return super().messages(session_id, **kwargs)  # type: ignore[misc, no-any-return]

    def tail(self, session_id: str, limit: int, **kwargs: Any) -> list[Message]:
        self.reads.append(("tail", session_id))
        return super().tail(session_id, limit, **kwargs)  # type: ignore[misc, no-any-return]

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        self.reads.append(("get", session_id))
        return super().get(session_id, seqs)  # type: ignore[misc, no-any-return]

    def read_logs(self, session_ids: Sequence[str]) -> dict[str, LogRead]:
        self.reads.extend(("read_logs", session_id) for session_id in session_ids)
        return super().read_logs(session_ids)  # type: ignore[misc, no-any-return]

    def logs_read(self, session_ids: Sequence[str]) -> list[tuple[str, str]]:
        return [read for read in self.reads if read[1] in session_ids]


class CountingSQLiteStore(_CountsReads, SQLiteStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.reads = []
        super().__init__(*args, **kwargs)


class CountingPostgresStore(_CountsReads, PostgresStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.reads = []
        super().__init__(*args, **kwargs)


Counting = CountingSQLiteStore | CountingPostgresStore


class Backend:
    """One database (a SQLite file, or a PostgreSQL schema) that stores are opened on, as
    processes would open it, and read or damaged with plain SQL behind their backs."""

    def __init__(self, kind: str, *, path: Path | None = None, url: str = "", schema: str = "") -> None:
        self.kind, self.path, self.url, self.schema = kind, path, url, schema
        self.opened: list[Store] = []

    def open(self, lexical_index: str = "store") -> Counting:
        store: Counting
        if self.path is not None:
            store = CountingSQLiteStore(self.path, lexical_index=lexical_index)
        else:
            store = CountingPostgresStore(self.url, schema=self.schema, lexical_index=lexical_index)
        self.opened.append(store)
        return store

    def sql(self, text: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run `text` (tables named ``{s}table``, parameters ``?``) outside any store."""
        if self.path is not None:
            with closing(sqlite3.connect(self.path)) as conn:
                rows = conn.execute(text.format(s=""), params).fetchall()
                conn.commit()
            return rows
        import psycopg  # only with PostgreSQL: the SQLite half runs without the extra

        with psycopg.connect(self.url, autocommit=True) as pg:
            cursor = pg.execute(text.format(s=f'"{self.schema}".').replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description is not None else []

    def table(self, name: str) -> str:
        """A table of recall's index, "postings" for the one that holds them."""
        if name != "postings":
            return name
        return "recall_segment_terms" if self.path is not None else "recall_postings"

    @property
    def tables(self) -> tuple[str, ...]:
        """Recall's index tables (SQLite keeps the postings in segments)."""
        postings = (
            ("recall_segments", "recall_segment_terms") if self.path is not None else ("recall_postings",)
        )
        return (*postings, "recall_units", "recall_index_sessions", "recall_histories")

    def postings(
        self, history: int, terms: Sequence[str] | None = None
    ) -> list[tuple[str, int, int, int, int]]:
        """(term, kind, key, count, length) of the history's documents holding `terms`
        (None: every term), as a search reads them."""
        if self.path is None:
            where = "" if terms is None else f" AND term IN ({','.join('?' * len(terms))})"
            return self.sql(
                f"SELECT term, kind, key, count, length FROM {{s}}recall_postings WHERE history = ?{where}",
                (history, *(terms or ())),
            )
        return sqlite_postings(self.path, history, terms)

    def close(self) -> None:
        for store in self.opened:
            with contextlib.suppress(Exception):
                store.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "sqlite":
        opened = Backend("sqlite", path=tmp_path / "memory.db")
    else:
        url, schema = request.getfixturevalue("postgres_url"), request.getfixturevalue("schema")
        opened = Backend("postgres", url=url, schema=schema)
    yield opened
    opened.close()


@pytest.fixture
def second_backend(backend: Backend, tmp_path: Path) -> Iterator[Backend]:
    """Another database of the same kind (another file, another schema)."""
    if backend.kind == "sqlite":
        other = Backend("sqlite", path=tmp_path / "other.db")
        yield other
        other.close()
        return
    from postgres_server import drop_schema, new_schema

    other = Backend("postgres", url=backend.url, schema=new_schema())
    yield other
    other.close()
    drop_schema(other.url, other.schema)


# -- helpers ------------------------------------------------------------------------------------


def write_history(
    store: Store, user_id: str | None, history: dict[str, list[tuple[str, str]]] = HISTORY
) -> None:
    """The sessions of `history` written through memories, closed as a process ends."""
    for session_id, turns in history.items():
        memory = ConversationMemory(session_id, store, user_id=user_id)
        for question, answer in turns:
            memory.add_turn(question, answer)
        memory.close()


def recalled(memory: ConversationMemory, query: str) -> list[tuple[str | None, tuple[int, ...], str]]:
    """What a build for `query` recalls: (session, seqs, text) of each item (the query itself is
    left out of the context, so a query of any length fits)."""
    context = memory.build_context(query=query, include_query=False)
    assert isinstance(context.to_text(), str)
    return [(item.session_id, item.seqs, item.text) for item in context.recalled]


def texts(found: Sequence[tuple[str | None, tuple[int, ...], str]]) -> str:
    return "\n".join(text for _, _, text in found)


def tables_of(store: Store) -> Any:
    tables = store.history_tables()  # type: ignore[attr-defined]
    assert tables is not None
    return tables


def cursor_of(store: Store, session_id: str) -> IndexCursor | None:
    row = tables_of(store).indexed_session(session_id)
    return IndexCursor.from_json(row.cursor) if row is not None and row.cursor else None


def indexed_through(store: Store, session_id: str) -> int:
    cursor = cursor_of(store, session_id)
    return -1 if cursor is None else cursor.seq


def slot_rows(backend: Backend, row: IndexedSession) -> tuple[int, int]:
    """How many unit and posting rows the session's slot holds."""
    (history,) = backend.sql("SELECT number FROM {s}recall_histories WHERE owner = ?", (row.owner,))[0]
    low, high = row.slot << KEY_SHIFT, ((row.slot + 1) << KEY_SHIFT) - 1
    units = backend.sql(
        "SELECT count(*) FROM {s}recall_units WHERE history = ? AND key BETWEEN ? AND ?", (history, low, high)
    )[0][0]
    return units, sum(low <= key <= high for _, _, key, _, _ in backend.postings(history))


def postings_of(backend: Backend, word: str) -> int:
    """Postings of `word`'s terms anywhere in the database."""
    terms = tokenize(word)
    assert terms
    histories = [row[0] for row in backend.sql("SELECT number FROM {s}recall_histories")]
    return sum(len(backend.postings(history, terms)) for history in histories)


def no_fallback(caplog: pytest.LogCaptureFixture) -> None:
    """The kept tables answered: recall did not fall back to reading the logs."""
    assert not [r.getMessage() for r in caplog.records if FALLBACK in r.getMessage()]


# -- 1. a new process ---------------------------------------------------------------------------


def test_a_new_process_recalls_from_the_tables_without_reading_old_logs(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    write_history(backend.open(), "ana")
    store = backend.open()  # a new process: a new store object and a new recall
    for session_id in HISTORY:
        assert indexed_through(store, session_id) == store.stats(session_id).last_seq > 0
    memory = ConversationMemory("today", store, user_id="ana")
    found: dict[str, list[tuple[str | None, tuple[int, ...], str]]] = {}
    with caplog.at_level(logging.INFO, logger="convmem"):
        for query, answer in QUERIES.items():
            found[query] = recalled(memory, query)
            assert answer in texts(found[query]), query
    no_fallback(caplog)
    assert store.logs_read(list(HISTORY)) == []  # only the rows of the recalled messages were read
    assert not [r for r in caplog.records if "lacks session" in r.getMessage()]  # nothing to index

    # The in-process mirror on the same data reads every log and recalls the same items.
    process = backend.open(lexical_index="process")
    mirrored = ConversationMemory("today", process, user_id="ana")
    for query in QUERIES:
        assert recalled(mirrored, query) == found[query], query
    assert {session for _, session in process.logs_read(list(HISTORY))} == set(HISTORY)


def test_the_first_query_of_a_new_process_reads_only_the_rows_of_what_it_shows(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_history(backend.open(), "ana", {"long": [*FILLER * 20, *HISTORY["trip"], *FILLER * 20]})
    store = backend.open()
    tables = type(tables_of(store))
    asked: list[int] = []
    original = tables.messages

    def counting(self: Any, history: int, keys: Sequence[int]) -> Any:
        asked.extend(keys)
        return original(self, history, keys)

    monkeypatch.setattr(tables, "messages", counting)
    found = recalled(
        ConversationMemory("today", store, user_id="ana"), "Where does my sister Ingrid teach violin?"
    )
    assert "Bergen" in texts(found)
    assert 0 < len(set(asked)) < store.stats("long").message_count // 4  # the candidates, not the log
    assert store.logs_read(["long"]) == []


# -- 2. consistency with the log ----------------------------------------------------------------


def test_messages_appended_behind_recalls_back_are_found_by_the_next_search(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.open()
    write_history(store, "ana")
    # As after a crash between the log's write and the index's: in the log only.
    store.append("garden", [Message.create("user", "The canoe is moored at pier nine.")], user_id="ana")
    store.append("boat", [Message.create("user", "The lighthouse keeper is called Oswin.")], user_id="ana")
    assert indexed_through(store, "garden") < store.stats("garden").last_seq
    assert tables_of(store).indexed_session("boat") is None
    fresh = backend.open()
    memory = ConversationMemory("today", fresh, user_id="ana")
    with caplog.at_level(logging.INFO, logger="convmem"):
        assert "pier nine" in texts(recalled(memory, "Where is the canoe moored?"))
        assert "Oswin" in texts(recalled(memory, "Who is the lighthouse keeper?"))
    no_fallback(caplog)
    assert any("lacks session 'boat'" in r.getMessage() for r in caplog.records)
    for session_id in ("garden", "boat"):
        assert indexed_through(fresh, session_id) == fresh.stats(session_id).last_seq
    # Indexed once: the next search of another process reads no log.
    again = backend.open()
    assert "Oswin" in texts(recalled(ConversationMemory("today", again, user_id="ana"), "lighthouse keeper?"))
    assert again.logs_read(["garden", "boat", *HISTORY]) == []


SECRET = "xylophonequartz"


def test_sessions_the_index_lacks_are_told_once_for_all_of_them(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.open()
    for session_id, turns in HISTORY.items():  # logged straight to the store: never indexed
        messages = [
            Message.create(role, text) for q, a in turns for role, text in (("user", q), ("assistant", a))
        ]
        store.append(session_id, messages, user_id="ana")
    memory = ConversationMemory("today", store, user_id="ana")
    with caplog.at_level(logging.INFO, logger="convmem"):
        assert "Bergen" in texts(recalled(memory, "Where does my sister Ingrid teach violin?"))
    said = [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    assert len(said) == 1, said
    assert said[0].startswith("recall's keyword index lacks 3 sessions of this history (")
    assert all(f"'{session_id}'" in said[0] for session_id in HISTORY)


def secret_history(backend: Backend) -> tuple[Counting, ConversationMemory, int]:
    """A user's session holding a secret, indexed, and a memory of the user that recalled it
    (so its recall holds the rendered line). Returns the store, that memory and the seq."""
    store = backend.open()
    memory = ConversationMemory("locker", store, user_id="ana")
    memory.add_turn("Where did I leave my bike?", "At the station.")
    secret = memory.add_turn(f"My locker code word is {SECRET}.", "I will remember it.").messages[0]
    for question, answer in FILLER * 3:
        memory.add_turn(question, answer)
    memory.close()
    asker = ConversationMemory("today", store, user_id="ana")
    assert SECRET in texts(recalled(asker, "What is my locker code word?"))
    assert postings_of(backend, SECRET) > 0
    assert secret.seq is not None
    return store, asker, secret.seq


@pytest.mark.parametrize("edit", ["delete", "replace"])
def test_an_edited_session_is_never_recalled_with_its_old_text(
    backend: Backend, caplog: pytest.LogCaptureFixture, edit: str
) -> None:
    store, asker, seq = secret_history(backend)
    before = tables_of(store).indexed_session("locker")
    if edit == "delete":
        store.delete_messages("locker", [seq])
    else:
        store.replace_message("locker", seq, Message.create("user", "My locker code word is [removed]."))
    # Reset in the edit's own transaction: no row of the old text is left to find.
    row = tables_of(store).indexed_session("locker")
    assert row is not None and (row.cursor, row.generation) == ("", None)
    assert slot_rows(backend, before) == (0, 0)
    assert postings_of(backend, SECRET) == 0
    with caplog.at_level(logging.WARNING, logger="convmem"):
        found = texts(recalled(asker, "What is my locker code word?"))  # the same recall, lines cached
        assert SECRET not in found
        if edit == "replace":
            assert "[removed]" in found
        assert "station" in texts(recalled(asker, "Where did I leave my bike?"))
    no_fallback(caplog)
    after = tables_of(store).indexed_session("locker")
    assert after is not None and after.slot != before.slot  # indexed afresh, under a new slot
    assert indexed_through(store, "locker") == store.stats("locker").last_seq
    assert postings_of(backend, SECRET) == 0
    # A new process does not find it either.
    fresh = ConversationMemory("today", backend.open(), user_id="ana")
    assert SECRET not in texts(recalled(fresh, f"locker code word {SECRET}"))


@pytest.mark.parametrize("forget", ["forget_user", "clear", "memory clear", "expire_idle"])
def test_a_forgotten_session_leaves_no_rows_and_is_never_recalled(
    backend: Backend, caplog: pytest.LogCaptureFixture, forget: str
) -> None:
    store, asker, _ = secret_history(backend)
    write_history(store, "bob", {"bobs": HISTORY["trip"]})
    if forget == "forget_user":
        assert store.forget_user("ana") == ["locker"]
        assert backend.sql("SELECT count(*) FROM {s}recall_histories WHERE owner = 'user:ana'") == [(0,)]
    elif forget == "clear":
        store.clear("locker")
    elif forget == "memory clear":
        ConversationMemory("locker", store, user_id="ana").clear()
    else:
        backend.sql("UPDATE {s}sessions SET updated_at = 0 WHERE session_id = 'locker'")
        assert store.expire_idle(3600) == ["locker"]
    assert tables_of(store).indexed_session("locker") is None
    assert postings_of(backend, SECRET) == 0
    assert postings_of(backend, "Ingrid") > 0  # another user's rows stay
    # The user starts again: the old text is not recalled, by the old recall or a new one.
    memory = ConversationMemory("locker", store, user_id="ana")
    memory.add_turn("My locker moved to the second floor.", "Second floor, noted.")
    memory.flush()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        for asking in (asker, ConversationMemory("today", backend.open(), user_id="ana")):
            assert SECRET not in texts(recalled(asking, f"What is my locker code word {SECRET}?"))
    no_fallback(caplog)


def test_a_deleted_message_is_not_findable_in_the_tables_or_the_file(backend: Backend) -> None:
    store, _, seq = secret_history(backend)
    store.delete_messages("locker", [seq])
    assert SECRET not in texts(recalled(ConversationMemory("today", store, user_id="ana"), SECRET))
    for table in backend.tables:
        rows = backend.sql(f"SELECT * FROM {{s}}{table}")
        assert rows and not any(SECRET in str(value) for row in rows for value in row), table
    if backend.path is not None:  # secure_delete: not in the file, its journal or its WAL either
        backend.close()
        assert not any(
            SECRET.encode() in path.read_bytes() for path in backend.path.parent.iterdir() if path.is_file()
        )


# -- 3. missing, stale or corrupt ---------------------------------------------------------------

# What is done to the index behind the store's back, and what the warning about it says.
DAMAGE: dict[str, tuple[Callable[[Backend], object], str]] = {
    "postings dropped": (lambda b: b.sql(f"DROP TABLE {{s}}{b.table('postings')}"), "postings"),
    "units dropped": (lambda b: b.sql("DROP TABLE {s}recall_units"), "recall_units"),
    "index rows dropped": (lambda b: b.sql("DROP TABLE {s}recall_index_sessions"), "recall_index_sessions"),
    "histories dropped": (lambda b: b.sql("DROP TABLE {s}recall_histories"), "recall_histories"),
    "cursor corrupt": (
        lambda b: b.sql("UPDATE {s}recall_index_sessions SET cursor = '{{\"seq\": oops'"),
        "unreadable",
    ),
    "cursor inconsistent": (
        lambda b: b.sql("UPDATE {s}recall_index_sessions SET cursor = '{{\"seq\": -4}}'"),
        "unreadable",
    ),
    "cursor's tokenizer not a version": (
        lambda b: b.sql(
            "UPDATE {s}recall_index_sessions SET cursor = replace(cursor, '\"tokenizer\":2', '\"tokenizer\":[2]')"
        ),
        "unreadable",
    ),
    "generation stale": (
        lambda b: b.sql("UPDATE {s}recall_index_sessions SET generation = 'stale'"),
        "stale",
    ),
}


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_index_is_made_again_from_the_log_with_a_warning(
    backend: Backend, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    store = backend.open()
    write_history(store, "ana")
    logged = {session_id: [m.text for m in store.messages(session_id)] for session_id in HISTORY}
    store.close()
    spoil, warning = DAMAGE[damage]
    spoil(backend)
    fresh = backend.open()
    memory = ConversationMemory("today", fresh, user_id="ana")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        for query, answer in QUERIES.items():
            assert answer in texts(recalled(memory, query)), query
    assert [
        r for r in caplog.records if r.levelno == logging.WARNING and backend.table(warning) in r.getMessage()
    ]
    assert {s: [m.text for m in fresh.messages(s)] for s in HISTORY} == logged  # nothing lost
    caplog.clear()
    again = backend.open()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "Bergen" in texts(
            recalled(ConversationMemory("today", again, user_id="ana"), "Ingrid violin?")
        )
    # Made again: the next process searches the tables, quietly, without reading the logs.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert again.logs_read(list(HISTORY)) == []


def test_a_stale_session_is_warned_of_once_per_search(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.open()
    write_history(store, "ana")
    store.close()
    backend.sql("UPDATE {s}recall_index_sessions SET generation = 'stale'")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "Bergen" in texts(
            recalled(ConversationMemory("today", backend.open(), user_id="ana"), "Where does Ingrid teach?")
        )
    stale = sorted(
        found.group(1)
        for r in caplog.records
        if (found := re.search(r"session '(\w+)' is stale", r.getMessage()))
    )
    assert stale == sorted(HISTORY)


def test_rows_made_by_an_older_tokenizer_are_made_again_quietly(
    backend: Backend, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store indexed by version 1 of the tokenizer, which stemmed "family" to "fami":
    asked with today's stems, its rows would find nothing of the words whose stem changed,
    so they are made again from the log (an upgrade, told at INFO, not a warning)."""
    try:
        with monkeypatch.context() as old:
            old.setattr(terms, "_adverb", lambda word: True)
            old.setattr(terms, "_INVARIANT", frozenset())
            terms._stem.cache_clear()
            store = backend.open()
            write_history(
                store, "ana", {**HISTORY, "kin": [("My family lives in Tromsø.", "Tromsø, noted.")]}
            )
            assert postings_of(backend, "fami") > 0
            store.close()
    finally:
        terms._stem.cache_clear()  # no stem of the old rules is left for the tests after this one
    assert tokenize("family") == ["family"]
    # What version 1 wrote: cursors that do not name a version.
    for session_id, cursor in backend.sql("SELECT session_id, cursor FROM {s}recall_index_sessions"):
        written = json.loads(cursor)
        written.pop("tokenizer")
        backend.sql(
            "UPDATE {s}recall_index_sessions SET cursor = ? WHERE session_id = ?",
            (json.dumps(written), session_id),
        )
    fresh = backend.open()
    with caplog.at_level(logging.INFO, logger="convmem"):
        assert "Tromsø" in texts(
            recalled(ConversationMemory("today", fresh, user_id="ana"), "And my family?")
        )
        for query, answer in QUERIES.items():
            assert answer in texts(recalled(ConversationMemory("today", fresh, user_id="ana"), query)), query
    # Said once for the history, not once per session.
    assert len([r for r in caplog.records if "version 1 of its tokenizer" in r.getMessage()]) == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    cursor = cursor_of(fresh, "kin")
    assert cursor is not None and cursor.tokenizer == terms.TOKENIZER_VERSION
    assert postings_of(backend, "fami") == 0
    # Made again once: the next process searches the tables without reading the logs.
    again = backend.open()
    assert "Tromsø" in texts(recalled(ConversationMemory("today", again, user_id="ana"), "my family?"))
    assert again.logs_read([*HISTORY, "kin"]) == []


@pytest.mark.parametrize("table", ["postings", "recall_units", "recall_index_sessions", "recall_histories"])
def test_a_dropped_table_does_not_stop_a_delete(
    backend: Backend, caplog: pytest.LogCaptureFixture, table: str
) -> None:
    table = backend.table(table)
    store, asker, seq = secret_history(backend)
    write_history(store, "ana")
    backend.sql(f"DROP TABLE {{s}}{table}")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert [m.seq for m in store.delete_messages("locker", [seq])] == [seq]
        assert SECRET not in texts(recalled(asker, "What is my locker code word?"))
        # Every session's rows were reset with the table: all of them are found again.
        for query, answer in QUERIES.items():
            assert answer in texts(recalled(asker, query)), query
    # made again, when the delete or the next search needed it
    assert [r for r in caplog.records if table in r.getMessage() and "made again" in r.getMessage()]


@pytest.mark.parametrize("table", ["postings", "recall_units", "recall_index_sessions", "recall_histories"])
def test_a_dropped_table_does_not_stop_forgetting_a_user(backend: Backend, table: str) -> None:
    table = backend.table(table)
    store = backend.open()
    for user in ("ana", "bob"):
        write_history(store, user, {f"{user}-{s}": items for s, items in HISTORY.items()})
    assert "Bergen" in texts(
        recalled(ConversationMemory("ana-today", store, user_id="ana"), "Ingrid violin?")
    )
    backend.sql(f"DROP TABLE {{s}}{table}")

    store.forget_user("ana")

    assert all(store.messages(f"ana-{s}") == [] for s in HISTORY)
    bob = ConversationMemory("bob-today", store, user_id="bob")
    assert "Bergen" in texts(recalled(bob, "Ingrid violin?"))
    ana = ConversationMemory("ana-again", store, user_id="ana")
    assert "Bergen" not in texts(recalled(ana, "Ingrid violin?"))


# -- 4. users and stores ------------------------------------------------------------------------

PRIVATE = {  # user -> (session, code): the session's text holds the code
    "ana": ("ana-1", "KX4471"),
    "bob": ("bob-1", "ZQ9902"),
    None: ("kiosk", "WW1234"),
}


def test_no_user_is_shown_another_users_history(backend: Backend, caplog: pytest.LogCaptureFixture) -> None:
    store = backend.open()
    for user, (session_id, code) in PRIVATE.items():
        said = f"My passport number is {code} and it expires in June."
        write_history(store, user, {session_id: [FILLER[0], (said, "Noted."), *FILLER[1:]]})
    query = "What is my passport number? " + " ".join(code for _, code in PRIVATE.values())
    fresh = backend.open()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        for user, (session_id, code) in PRIVATE.items():
            # A user's new session; without a user, the session itself (its own history).
            asker = ConversationMemory(f"new-{user}" if user else session_id, fresh, user_id=user)
            found = texts(recalled(asker, query))
            if user is not None:
                assert code in found, user
            for other, (_, other_code) in PRIVATE.items():
                if other != user:
                    assert other_code not in found, (user, other)
    no_fallback(caplog)


def test_two_databases_never_mix_even_through_one_recall(
    backend: Backend, second_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """Same session ids, same user, same history numbers and slots: only the store differs."""
    first, second = backend.open(), second_backend.open()
    write_history(first, "ana", {"trip": [("My sister Ingrid teaches violin in Bergen.", "Nice.")]})
    write_history(second, "ana", {"trip": [("My sister Ingrid teaches cello in Tromsø.", "Nice.")]})
    recall = Recall()
    with caplog.at_level(logging.WARNING, logger="convmem"):
        for _ in range(2):  # the second round with the rendered lines cached
            one = texts(recalled(ConversationMemory("today", first, user_id="ana", recall=recall), "Ingrid?"))
            two = texts(
                recalled(ConversationMemory("today", second, user_id="ana", recall=recall), "Ingrid?")
            )
            assert "Bergen" in one and "Tromsø" not in one
            assert "Tromsø" in two and "Bergen" not in two
    no_fallback(caplog)


# -- 5. batching --------------------------------------------------------------------------------


def test_rows_are_written_in_batches_and_a_search_still_finds_the_newest(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    store = backend.open()
    memory = ConversationMemory("s", store, user_id="ana")
    for question, answer in FILLER * 3:
        memory.add_turn(question, answer)
    memory.flush()
    flushed = store.stats("s").last_seq
    assert indexed_through(store, "s") == flushed
    memory.add_turn("The wifi password at the cabin is heliotrope42.", "Got it.")
    for question, answer in FILLER:
        memory.add_turn(question, answer)
    assert store.stats("s").last_seq - flushed < WRITE_EVERY
    assert indexed_through(store, "s") == flushed  # behind: nothing written yet
    # Found meanwhile: the search indexes what the rows lack.
    asker = ConversationMemory("other", backend.open(), user_id="ana")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        assert "heliotrope42" in texts(recalled(asker, "What is the cabin wifi password?"))
    no_fallback(caplog)
    assert indexed_through(store, "s") == store.stats("s").last_seq
    # Without a search: behind until flush() ...
    for question, answer in FILLER:
        memory.add_turn(question, answer)
    behind = indexed_through(store, "s")
    assert behind < store.stats("s").last_seq
    memory.flush()
    assert indexed_through(store, "s") == store.stats("s").last_seq
    # ... or until a batch is due.
    written = indexed_through(store, "s")
    for question, answer in FILLER * (WRITE_EVERY // 4 + 1):
        memory.add_turn(question, answer)
    assert written < indexed_through(store, "s") <= store.stats("s").last_seq
    memory.close()
    assert indexed_through(store, "s") == store.stats("s").last_seq


# -- 6. writers of one session ------------------------------------------------------------------


def expected_rows(store: Store, session_id: str) -> list[tuple[str, int, int, int, int]]:
    """(term, kind, key within the session, count, length) of every posting the log calls for."""
    return called_postings(store, session_id)


def stored_rows(
    backend: Backend, store: Store, session_id: str
) -> tuple[list[tuple[str, int, int, int, int]], int]:
    row = tables_of(store).indexed_session(session_id)
    assert row is not None
    (history,) = backend.sql("SELECT number FROM {s}recall_histories WHERE owner = ?", (row.owner,))[0]
    low, high = row.slot << KEY_SHIFT, ((row.slot + 1) << KEY_SHIFT) - 1
    postings = [row for row in backend.postings(history) if low <= row[2] <= high]
    units = backend.sql(
        "SELECT count(*) FROM {s}recall_units WHERE history = ? AND key BETWEEN ? AND ?", (history, low, high)
    )[0][0]
    mask = (1 << KEY_SHIFT) - 1
    return sorted((t, int(k), int(key) & mask, int(c), int(n)) for t, k, key, c, n in postings), int(units)


def test_writers_of_one_session_in_several_processes_write_it_once(backend: Backend) -> None:
    stores = [backend.open() for _ in range(4)]
    recalls = [Recall() for _ in stores]
    errors: list[BaseException] = []
    for round_ in range(4):
        # Appended elsewhere (no recall), then caught up by every writer at once.
        stores[0].append(
            "shared",
            [
                Message.create(role, f"{text} (round {round_})")
                for pair in FILLER
                for role, text in zip(("user", "assistant"), pair, strict=True)
            ],
            user_id="ana",
        )
        start = threading.Barrier(len(stores))

        def catch_up(at: int, start: threading.Barrier) -> None:
            try:
                start.wait()
                recalls[at].catch_up("shared", stores[at])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=catch_up, args=(at, start)) for at in range(len(stores))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert indexed_through(stores[0], "shared") == stores[0].stats("shared").last_seq
        postings, units = stored_rows(backend, stores[0], "shared")
        assert postings == expected_rows(stores[0], "shared"), round_
        assert units == stores[0].stats("shared").message_count


# -- 7. any query -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "answer"),
    [
        ("", None),
        ("   ", None),
        ("the and of what is it", None),
        ("😀🐶🎉", None),
        ("Ingrid " + "violin " * 2857, "Bergen"),
        ("x" * 20_000, None),
        ("狗 " * 10_000, None),
        (" ".join(f"word{i}" for i in range(3000)) + " flowerpot", None),  # more terms than one SQL IN
        # Query syntax of the engines, and SQL, are only words here.
        ('"a" OR b* NEAR(', None),
        ("violin' OR 1=1 --", None),
        ("corgi:* & (duoduo <-> spring) | !x", None),
        ("\x00Ingrid teaches", "Bergen"),
        ("recall_postings: term", None),
    ],
)
def test_any_query_gives_a_valid_context_as_the_mirror_does(
    backend: Backend, caplog: pytest.LogCaptureFixture, query: str, answer: str | None
) -> None:
    write_history(backend.open(), "ana")
    memory = ConversationMemory("today", backend.open(), user_id="ana")
    with caplog.at_level(logging.WARNING, logger="convmem"):
        found = recalled(memory, query)
    no_fallback(caplog)
    assert all(isinstance(text, str) and text for _, _, text in found)
    if not tokenize(query):
        assert found == []
    if answer is not None:
        assert answer in texts(found)
    mirrored = ConversationMemory("today", backend.open(lexical_index="process"), user_id="ana")
    assert recalled(mirrored, query) == found


def test_tables_dropped_under_a_running_store_never_show_one_user_another_users_lines(
    backend: Backend,
) -> None:
    # The process keeps lines rendered under each history's number; tables made again
    # must not give another user a number those lines were cached under.
    store = backend.open()
    for user, (session_id, code) in PRIVATE.items():
        if user is not None:
            said = f"My passport number is {code} and it expires in June."
            write_history(store, user, {session_id: [FILLER[0], (said, "Noted."), *FILLER[1:]]})
    query = "What is my passport number?"
    assert PRIVATE["ana"][1] in texts(recalled(ConversationMemory("new-ana", store, user_id="ana"), query))
    for table in backend.tables:
        backend.sql(f"DROP TABLE {{s}}{table}")
    for attempt in range(3):  # the first search reads the logs; the next ones the tables made again
        found = texts(recalled(ConversationMemory(f"new-bob-{attempt}", store, user_id="bob"), query))
        assert PRIVATE["bob"][1] in found
        assert PRIVATE["ana"][1] not in found
    assert PRIVATE["ana"][1] in texts(recalled(ConversationMemory("new-ana-2", store, user_id="ana"), query))


def test_rows_newer_than_a_readers_stats_are_not_made_again(backend: Backend) -> None:
    """Stats read before another writer appended and indexed (one memory used by two
    threads): the rows are ahead of them in the same log, not stale, so nothing is
    indexed afresh (with a warning) from those stats."""
    store = backend.open()
    write_history(store, "ana")
    old_stats = store.stats("trip")
    memory = ConversationMemory("trip", store, user_id="ana")
    memory.add_turn("I also booked a ferry to Flåm.", "The fjord ferry, lovely.")
    assert "Flåm" in texts(recalled(ConversationMemory("today", store, user_id="ana"), "ferry to Flåm?"))
    row = tables_of(store).indexed_session("trip")
    assert IndexCursor.from_json(row.cursor).seq > old_stats.last_seq  # the test can fail
    assert plan_indexing(old_stats, row.owner, row) is None
    newer = store.stats("trip")
    store.delete_messages("trip", [newer.last_seq])  # a new generation: made afresh
    plan = plan_indexing(store.stats("trip"), row.owner, row)
    assert plan is not None and plan[1] and "is stale" in str(plan[2])
