"""Recall's keyword index in PostgreSQL: BM25 over a ``tsvector`` per document.

`PostgresLexicalIndex` is the `LexicalIndex` recall uses for a session of a
`PostgresStore` opened with ``lexical_index="tsvector"`` (by default recall keeps
BM25 in each process instead): the terms of each message and each exchange are
rows of the store's ``lexical_docs`` table (migrations 5 to 7), so a server that
starts serving a session finds them there, and a second server mirroring the
same session writes nothing.

Terms are recall's own (`tokenize`: light stems, CJK characters and pairs),
turned into a tsvector by ``array_to_tsvector``: no text search parser or
dictionary sees them, so each term is exactly one lexeme whatever it holds
(quotes, colons, backslashes, any script). Each document also holds the
lexeme of its (session, kind) (`lexical_tag`: a space and a digest, which no
term holds) and, for each term it holds more than once, ``term + "\\x1e"``; its
row keeps its length in terms and the counts of its repeated terms, and
``lexical_stats`` the index's number of documents and total length, changed in
the transaction that changes the rows.

Each term's documents are also kept as postings (``lexical_postings``,
migration 7): one row per (term, block of 256 doc ids) holding the doc ids, the
term's count in each and each document's length as packed integers, edited in
the transaction that writes the documents (writers of one index take turns on
an advisory lock, so each edits what the previous one left). A search is one
query by primary key: the index's totals and the posting blocks of the query's
terms (bound as a ``text[]`` parameter: no query text is ever read as tsquery
syntax or SQL), so it reads a few rows per term rather than one row per
matching document.

Scores are Okapi BM25 with `BM25Index`'s k1, b and idf, computed with numpy in
the process from those postings, equal to `BM25TextIndex` over the same
documents (tests compare them to 1e-12), and `full_match` is BM25's too, so
recall across a user's sessions puts this index's sessions on one scale.

Documents belong to one generation of the log (see `Store.stats`): a write
lands only while the session is still at the generation the documents were
read from (a key-share lock on the session row makes check and write one step),
reads join on the session's current generation, and the store deletes the
session's documents, totals and postings in the transaction that deletes or replaces
messages (recall then adds them again from the new log), and with the session
(`clear`, `forget_user`, `expire_idle`, by the foreign key).

Costs (``benchmarks/bench_lexical_postgres.py``, a synthetic log where each
query term is in 12-14% of all messages, so every search matches about 14% of
the session): a search reads a few rows per term in the server and decodes and
scores the matching documents' postings in the process; the median `scores`
call took 3.1 ms at 10,000 messages (BM25 in the process: 0.2 ms) and 10.2 ms
at 100,000 (in the process: 2.4 ms), against 43 ms in the same run conditions
when it read one row per matching document (migration 6). Writes are batched,
one transaction per flush, and rewrite the posting blocks their documents fall
in: the first query on an unindexed 100,000-message session writes every
document and posting in about 28 s (114 MB of postings beside 79 MB of
documents). Sync only, like `PostgresVectorIndex`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from ..._recall.lexical import (
    BM25Index,
    BufferedLexicalIndex,
    LexicalScores,
    document_digest,
    no_scores,
    query_terms,
    tokenize,
)
from .postings import REPEATED, SEPARATOR, LexicalMatches
from .queries import _Queries
from .sql import _Operation

__all__ = ["UNIT_KINDS", "PostgresLexicalIndex"]

UNIT_KINDS = ("messages", "exchanges")
_T = TypeVar("_T")
# What a tsvector and tsquery accept: a lexeme below 2 KiB, a tsvector below 1 MiB.
_MAX_LEXEME_BYTES = 2046
_MAX_DOC_BYTES = 900_000
# Distinct query terms a search scores at most (a question has a few dozen); the rest are left out.
_MAX_QUERY_TERMS = 256
_BM25 = BM25Index()  # its k1 and b: the same BM25 as in the process


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
            and SEPARATOR not in term
            and REPEATED not in term
            and len(term.encode("utf-8", "surrogatepass")) <= _MAX_LEXEME_BYTES
        ):
            out.append(term)
    return out


def _document(text: str) -> tuple[str, int, str | None]:
    """The document's lexemes joined by the separator: its distinct terms (cut before the
    tsvector size limit) and ``term + REPEATED`` for each it holds more than once; its length
    in terms (as `BM25Index` counts it); and its repeated terms with their counts
    ("term\\x1ecount\\x1f...", None when every term occurs once)."""
    tokens = tokenize(text)
    counts = Counter(tokens)
    kept: list[str] = []
    size = 0
    for term in _usable(counts):
        size += len(term.encode("utf-8", "surrogatepass")) * (1 + (counts[term] > 1)) + 16
        if size > _MAX_DOC_BYTES:
            break
        kept.append(term)
    repeated = [term for term in kept if counts[term] > 1]
    lexemes = kept + [term + REPEATED for term in repeated]
    repeats = SEPARATOR.join(f"{term}{REPEATED}{counts[term]}" for term in repeated)
    return SEPARATOR.join(lexemes), len(tokens), repeats or None


def _idf(documents: int, frequency: int) -> float:
    return math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))


def _postings(blocks: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A term's posting blocks (see `encode_postings`) as arrays of doc ids, counts and lengths."""
    ids, counts, lengths = [], [], []
    for blob in blocks:
        size = len(blob) // 16
        ids.append(np.frombuffer(blob, dtype=">i8", count=size))
        counts.append(np.frombuffer(blob, dtype=">i4", count=size, offset=8 * size))
        lengths.append(np.frombuffer(blob, dtype=">i4", count=size, offset=12 * size))
    return (
        np.concatenate(ids).astype(np.int64),
        np.concatenate(counts).astype(np.float64),
        np.concatenate(lengths).astype(np.float64),
    )


def _bm25(terms: Sequence[str], found: LexicalMatches) -> tuple[dict[str, int], LexicalScores]:
    """Each term's document frequency and each found document's BM25 score, computed as
    `BM25Index.scores` does (each document's parts added in the order of `terms`)."""
    documents = found.documents
    if not found.postings or not documents:
        return {}, no_scores()
    average = found.total_length / documents or 1.0
    k1, b = _BM25.k1, _BM25.b
    frequencies: dict[str, int] = {}
    ids, parts = [], []
    for term in terms:
        blocks = found.postings.get(term)
        if not blocks:
            continue
        doc_ids, counts, lengths = _postings(blocks)
        frequencies[term] = len(doc_ids)
        norm = k1 * (1.0 - b + b * lengths / average)
        ids.append(doc_ids)
        parts.append(_idf(documents, len(doc_ids)) * counts * (k1 + 1.0) / (counts + norm))
    if not ids:
        return frequencies, no_scores()
    unique, inverse = np.unique(np.concatenate(ids), return_inverse=True)
    sums = np.bincount(inverse, weights=np.concatenate(parts), minlength=len(unique))
    return frequencies, LexicalScores(unique, sums)


class PostgresLexicalIndex(BufferedLexicalIndex):
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
        index.scores("what is my dog called?")  # {1: 0.57...}, as BM25TextIndex
        index.full_match("what is my dog called?")  # 0.57...
    """

    def __init__(self, store: _SyncPostgres, session_id: str, units: str) -> None:
        if units not in UNIT_KINDS:
            raise ValueError(f"units must be one of {list(UNIT_KINDS)}, got {units!r}")
        super().__init__(session_id, units)
        self.store = store
        # (query, documents, term -> document frequency) of the last search, for full_match.
        self._last: tuple[str, int, dict[str, int]] | None = None

    def __repr__(self) -> str:
        return f"PostgresLexicalIndex({self.store!r}, {self.session_id!r}, {self.units!r})"

    def _run(self, make: Callable[[], _Operation[_T]], action: str, *, transaction: bool = False) -> _T:
        result: _T = self.store._run(
            make, f"{action} of session {self.session_id!r:.80}", transaction=transaction
        )
        return result

    # -- LexicalIndex -------------------------------------------------------------------

    def _write_buffered(self, *, final: bool) -> None:
        self._flush(final=final)

    def scores(self, query: str) -> LexicalScores:
        """Okapi BM25 (`BM25Index`'s k1, b and idf) of every document of the log's current
        generation sharing a term with `query`: equal to `BM25TextIndex` over the same documents."""
        self._flush(final=True)
        terms = _usable(query_terms(query))[:_MAX_QUERY_TERMS]
        if not terms:
            self._last = (query, 0, {})
            return no_scores()
        found = self._run(
            lambda: self.store._queries.lexical_matches(self.session_id, self.units, terms),
            "keyword search",
            transaction=True,
        )
        frequencies, scores = _bm25(terms, found)
        documents = found.documents
        self._last = (query, documents, frequencies)
        return scores

    def full_match(self, query: str) -> float:
        """The score of a document of average length holding each query term once, as
        `BM25Index.full_match`: divided by it, scores of different sessions compare (recall
        across a user's sessions). Uses the counts of the last `scores` of the same query
        (recall asks right after it), else searches once."""
        if self._last is None or self._last[0] != query:
            self.scores(query)
        assert self._last is not None
        _, documents, frequencies = self._last
        if not documents:
            return 0.0
        return sum(_idf(documents, frequencies.get(term, 0)) for term in set(query_terms(query)))

    # -- writing ------------------------------------------------------------------------

    def _flush(self, *, final: bool) -> None:
        """Write what `add` buffered; documents already stored with the same text are left
        alone. With ``final`` after `clear`, stored documents not added again go."""
        sweep = self._due(final=final)
        if sweep is None:
            return
        queries = self.store._queries
        wanted = self._wanted(sweep=sweep)
        stored: dict[int, tuple[bytes, int]] = self._run(
            lambda: queries.lexical_stored(self.session_id, self.units, wanted), "reading the keyword index"
        )
        changed, deletes = self._changes(stored, sweep=sweep)
        writes = [
            (doc_id, document_digest(text), len(text), *_document(text)) for doc_id, text in changed.items()
        ]
        if writes or deletes:
            generation = self._generation if isinstance(self._generation, str) else None
            # False: another server deleted or replaced messages; recall reads the log afresh.
            self._run(
                lambda: queries.write_lexical(self.session_id, self.units, generation, deletes, writes),
                "writing the keyword index",
                transaction=True,
            )
        self._written(sweep=sweep)
