"""Recall's keyword index of each user's history in PostgreSQL: `PostgresHistoryTables`.

The `HistoryTables` a `PostgresStore` offers recall (unless opened with
``lexical_index="process"``), in the store's schema (migration 8; the SQL is in
`convmem._stores.postgres.lexical_queries`)::

    recall_histories       number -> owner ("user:<id>" or "session:<id>"), next_slot
    recall_index_sessions  session_id -> history, slot, generation, cursor
    recall_units           (history, key) -> what ranking reads of a message
    recall_postings        (history, term, kind, key) -> count, length

A server new to a user answers their first query with a few indexed reads (the
rows of the user's sessions, the postings of the query's terms over the whole
history, the unit rows of the best candidates, the messages it shows), and
every server shares what any of them wrote: nothing is indexed twice. Scores
are computed in the process with recall's own BM25 from the postings, so they
equal the in-process index's.

Writes are one transaction each, checked against the session's log generation
(a key-share lock on its row keeps an edit from landing meanwhile) and its
index row (compare-and-set; writers of one session take turns on an advisory
lock). Deleting or replacing messages resets the session's rows in the same
transaction; deleting a session takes them with it (a trigger on its index
row). Sync only, like `PostgresVectorIndex`: an asyncio application's memories
call their store from a worker thread anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from ..._models import Message
from ..._recall.index_rows import KEY_SHIFT, IndexBatch, IndexedHistory, IndexedSession
from ..codec import message_from_record
from .queries import _Queries
from .sql import _COLUMNS, _Operation

__all__ = ["PostgresHistoryTables"]

_T = TypeVar("_T")


class _SyncPostgres(Protocol):
    """What the tables need of a `PostgresStore` (named here: the store's module imports this one)."""

    _queries: _Queries

    def _run(
        self,
        make: Callable[[], _Operation[Any]],
        action: str,
        *,
        transaction: bool = False,
        retry_remade: bool = True,
    ) -> Any: ...


class PostgresHistoryTables:
    """Recall's index of each user's history in a `PostgresStore`'s schema (see the module
    docstring). Thread-safe: every call runs on a pooled connection of its own."""

    def __init__(self, store: _SyncPostgres) -> None:
        self.store = store
        self._queries = store._queries

    def __repr__(self) -> str:
        return f"PostgresHistoryTables({self.store!r})"

    def _run(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool = False) -> _T:
        # A table made again is empty where this search's earlier reads found rows: it fails
        # (recall reads the logs), and the next search indexes every session afresh.
        result: _T = self.store._run(
            make, f"recall's keyword index: {action}", transaction=transaction, retry_remade=False
        )
        return result

    def indexed(self, owner: str) -> IndexedHistory:
        return self._run(lambda: self._queries.history_indexed(owner), "reading a history")

    def indexed_session(self, session_id: str) -> IndexedSession | None:
        return self._run(
            lambda: self._queries.history_session(session_id), f"reading session {session_id!r:.80}"
        )

    def write(self, owner: str, batch: IndexBatch, expected: IndexedSession | None) -> bool:
        return self._run(
            lambda: self._queries.history_write(owner, batch, expected),
            f"writing session {batch.session_id!r:.80}",
            transaction=True,
        )

    def postings(self, history: int, terms: Sequence[str]) -> list[tuple[Any, ...]]:
        return self._run(lambda: self._queries.history_postings(history, terms), "keyword search")

    def units(self, history: int, keys: Sequence[int], exchanges: Sequence[int]) -> list[tuple[Any, ...]]:
        return self._run(lambda: self._queries.history_units(history, keys, exchanges), "reading candidates")

    def messages(self, history: int, keys: Sequence[int]) -> dict[int, Message]:
        rows = self._run(
            lambda: self._queries.history_messages(history, keys, _COLUMNS), "reading recalled messages"
        )
        found: dict[int, Message] = {}
        for row in rows:
            message = message_from_record(dict(zip(_COLUMNS, row[2:], strict=True)), row[1])
            found[int(row[0]) << KEY_SHIFT | (message.seq or 0)] = message
        return found

    def reset(self, session_id: str) -> None:
        self._run(
            lambda: self._queries.history_reset(session_id),
            f"resetting session {session_id!r:.80}",
            transaction=True,
        )
