"""Postings in tests: what a session's log calls for, derived from the whole log at once
(what a store's keyword index must read back however it wrote them), and what a SQLite
file's index holds, read as a search reads it."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

from convmem import Store
from convmem._recall.config import RecallConfig
from convmem._recall.index_rows import IndexCursor, derive
from convmem._stores.sqlite.segments import read_postings


def called_postings(store: Store, session_id: str, base: int = 0) -> list[tuple[str, int, int, int, int]]:
    """(term, kind, key, count, length) of every posting of the session, sorted; keys are
    `base` | the document's id within the session (`base`: the session's slot, shifted)."""
    batch = derive(
        IndexCursor(),
        store.messages(session_id),
        RecallConfig(),
        session_id=session_id,
        generation=None,
        reset=True,
    )
    rows = [
        (term, 0, base | doc, count, length)
        for doc, counts, length in batch.passages
        for term, count in counts.items()
    ]
    rows += [
        (term, 1, base | first, count, length)
        for first, counts, length, _ in batch.exchanges
        for term, count in counts.items()
    ]
    return sorted(rows)


def sqlite_postings(
    path: Path, history: int, terms: Sequence[str] | None = None
) -> list[tuple[str, int, int, int, int]]:
    """(term, kind, key, count, length) of the history's documents holding `terms` (None:
    every term) in the SQLite file at `path`, sorted, as a search reads them."""
    with closing(sqlite3.connect(path)) as conn:

        def read(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
            return conn.execute(sql, tuple(params)).fetchall()

        if terms is None:
            terms = [
                t
                for (t,) in read(
                    "SELECT DISTINCT term FROM recall_segment_terms WHERE history = ?", (history,)
                )
            ]
        found = read_postings(read, history, terms)
    return sorted((term, kind, key, count, length) for kind, term, key, count, length in found)
