"""Recall's keyword index in PostgreSQL, as a ``tsvector`` per document.

`PostgresLexicalIndex` is the `LexicalIndex` recall uses for a session of a
`PostgresStore` opened with ``lexical_index="tsvector"`` (by default recall keeps
BM25 in each process instead): the terms of each message and each exchange are
rows of the store's ``lexical_docs`` table (migration 5), so a server that
starts serving a session finds them there, and a second server mirroring the
same session writes nothing.

Terms are recall's own (`tokenize`: light stems, CJK characters and pairs),
turned into a tsvector by ``array_to_tsvector``: no text search parser or
dictionary sees them, so each term is exactly one lexeme whatever it holds
(quotes, colons, backslashes, any script). A query is the OR of its terms, each
a quoted lexeme (quotes and backslashes escaped), passed as a bound ``tsquery``
parameter: no query text is ever read as tsquery syntax or SQL. Documents are
ranked in SQL with ``ts_rank`` (normalised by the log of the document's number of
distinct terms): it counts which query terms a document holds, not how often,
and has no IDF; recall divides by the best score, so only the order matters.
Without `full_match`, recall across a user's sessions scales each session's
scores on their own.

Documents belong to one generation of the log (see `Store.stats`): a write
lands only while the session is still at the generation the documents were
read from (a key-share lock on the session row makes check and write one step),
reads join on the session's current generation, and the store deletes the
session's documents in the transaction that deletes or replaces messages (recall
then adds them again from the new log), and with the session (`clear`,
`forget_user`, `expire_idle`, by the foreign key).

Costs: a query is one statement over the session's documents of one kind that
match a term (``ts_rank`` on each); writes are batched, one transaction per
flush. Sync only, like `PostgresVectorIndex`.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from ._lexical import query_terms, tokenize
from ._postgres_schema import _Operation, _Queries

__all__ = ["UNIT_KINDS", "PostgresLexicalIndex", "tsquery_text"]

logger = logging.getLogger("convmem")

UNIT_KINDS = ("messages", "exchanges")
_T = TypeVar("_T")
# Documents buffered before they are written without waiting for a query.
_FLUSH_EVERY = 512
# What a tsvector and tsquery accept: a lexeme below 2 KiB, a tsvector below 1 MiB.
_MAX_LEXEME_BYTES = 2046
_MAX_DOC_BYTES = 900_000
_SEPARATOR = "\x1f"


class _SyncPostgres(Protocol):
    """What the index needs of a `PostgresStore` (named here: the store's module imports this one)."""

    _queries: _Queries

    def _run(self, make: Callable[[], _Operation[Any]], action: str, *, transaction: bool = False) -> Any: ...


def _usable(terms: Iterable[str]) -> list[str]:
    """Distinct terms a tsvector can hold (no separator, below the lexeme size limit), in order."""
    out: list[str] = []
    for term in dict.fromkeys(terms):
        if (
            term
            and _SEPARATOR not in term
            and len(term.encode("utf-8", "surrogatepass")) <= _MAX_LEXEME_BYTES
        ):
            out.append(term)
    return out


def _document_terms(text: str) -> str:
    """The document's distinct terms joined by the separator, cut before the tsvector size limit."""
    kept: list[str] = []
    size = 0
    for term in _usable(tokenize(text)):
        size += len(term.encode("utf-8", "surrogatepass")) + 8
        if size > _MAX_DOC_BYTES:
            break
        kept.append(term)
    return _SEPARATOR.join(kept)


def _lexeme(term: str) -> str:
    """A term as a quoted tsquery lexeme: quotes doubled, backslashes escaped."""
    return "'" + term.replace("\\", "\\\\").replace("'", "''") + "'"


def tsquery_text(terms: Iterable[str]) -> str:
    """The tsquery (text form, to bind as a parameter) matching any of `terms`; "" for none."""
    return " | ".join(_lexeme(term) for term in _usable(terms))


def _digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET = _Unset()


class PostgresLexicalIndex:
    """One session's messages or exchanges, found by their words with a PostgreSQL ``tsvector``.

    Made by recall for each session of a `PostgresStore` opened with
    ``lexical_index="tsvector"`` (see the module docstring). Not thread-safe:
    recall calls it under the session's lock.

    Args:
        store: the `PostgresStore` whose schema holds the index.
        session_id: the session whose documents these are.
        units: ``"messages"`` (doc id = seq) or ``"exchanges"`` (doc id = first seq).

    Example::

        index = PostgresLexicalIndex(store, "s1", "messages")
        index.follow_log(store.stats("s1").generation)
        index.add(1, "My dog is called Duoduo")
        index.scores("what is my dog called?")  # {1: 0.06...}
    """

    def __init__(self, store: _SyncPostgres, session_id: str, units: str) -> None:
        if units not in UNIT_KINDS:
            raise ValueError(f"units must be one of {list(UNIT_KINDS)}, got {units!r}")
        self.store = store
        self.session_id = session_id
        self.units = units
        self._generation: str | _Unset | None = _UNSET
        self._pending: dict[int, str | None] = {}  # doc id -> text to write, or None to delete
        self._syncing = False  # after clear(): stored documents not added again are deleted
        self._confirmed: set[int] = set()  # doc ids added since clear(), already written
        self._last_added = -1  # the greatest doc id added since clear()

    def __repr__(self) -> str:
        return f"PostgresLexicalIndex({self.store!r}, {self.session_id!r}, {self.units!r})"

    def _run(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool = False) -> _T:
        result: _T = self.store._run(
            make, f"{action} of session {self.session_id!r:.80}", transaction=transaction
        )
        return result

    # -- LexicalIndex -------------------------------------------------------------------

    def follow_log(self, generation: str | None) -> None:
        self._generation = generation

    def add(self, doc_id: int, text: str) -> None:
        self._pending[doc_id] = text
        self._last_added = max(self._last_added, doc_id)
        if len(self._pending) >= _FLUSH_EVERY:
            try:
                self._flush(final=False)
            except Exception as exc:  # written at the next query instead
                logger.debug("recall lexical index of %r not written yet: %s", self.session_id, exc)

    def remove(self, doc_id: int) -> None:
        self._pending[doc_id] = None
        self._confirmed.discard(doc_id)

    def clear(self) -> None:
        """Start over: the documents added from now on are all the session has; the
        ones stored and not added again are deleted when the index is next written."""
        self._pending.clear()
        self._confirmed.clear()
        self._last_added = -1
        self._syncing = True

    def flush(self) -> None:
        """Write what `add` buffered now. A failure is logged and left for `scores`."""
        try:
            self._flush(final=True)
        except Exception as exc:
            logger.debug("recall lexical index of %r not written yet: %s", self.session_id, exc)

    def scores(self, query: str) -> dict[int, float]:
        """``ts_rank`` of every document of the log's current generation sharing a term."""
        self._flush(final=True)
        text = tsquery_text(query_terms(query))
        if not text:
            return {}
        return self._run(
            lambda: self.store._queries.lexical_scores(self.session_id, self.units, text),
            "keyword search",
        )

    # -- writing ------------------------------------------------------------------------

    def _flush(self, *, final: bool) -> None:
        """Write what `add` buffered; documents already stored with the same text are left
        alone. With ``final`` after `clear`, stored documents not added again go."""
        sweep = final and self._syncing
        if not self._pending and not sweep:
            return
        if not isinstance(self._generation, str) and self._generation is not None:
            return  # the log was never read: nothing to check writes against
        queries = self.store._queries
        wanted = None if sweep else list(self._pending)
        stored: dict[int, tuple[bytes, int]] = self._run(
            lambda: queries.lexical_stored(self.session_id, self.units, wanted), "reading the keyword index"
        )
        writes: list[tuple[int, bytes, int, str]] = []
        for doc_id, text in self._pending.items():
            if text is None:
                continue
            digest = _digest(text)
            known = stored.get(doc_id)
            if known is None or (known[0] != digest and known[1] <= len(text)):
                writes.append((doc_id, digest, len(text), _document_terms(text)))
        deletes = [doc_id for doc_id, text in self._pending.items() if text is None and doc_id in stored]
        if sweep:
            # Past the last document given: added by a server that has read further.
            kept = self._confirmed | self._pending.keys()
            deletes.extend(d for d in stored if d not in kept and d <= self._last_added)
        if writes or deletes:
            generation = self._generation if isinstance(self._generation, str) else None
            # False: another server deleted or replaced messages; recall reads the log afresh.
            self._run(
                lambda: queries.write_lexical(self.session_id, self.units, generation, deletes, writes),
                "writing the keyword index",
                transaction=True,
            )
        if self._syncing:
            self._confirmed.update(doc_id for doc_id, text in self._pending.items() if text is not None)
        self._pending.clear()
        if sweep:
            self._syncing = False
            self._confirmed.clear()
