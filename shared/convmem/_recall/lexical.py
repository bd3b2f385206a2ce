"""Lexical matching: a small incremental BM25 index and the seam stores fill.

Dense embeddings miss exact names, numbers and rare words; BM25 catches them,
and with no embedder at all it is the whole of recall. The index is
incremental (a document is added once, when its message is stored) because
rebuilding a BM25 model for every query costs O(history). Its terms come from
`terms.tokenize` (re-exported here with `query_terms`).

Recall reaches its lexical half through `LexicalIndex` (text in, scores out).
An index that can score as part of a larger collection (`JointLexicalIndex`)
lets recall rank a user's sessions as one history (`CollectionStats`); in this
process a user's sessions share one (`history_index.HistoryIndex`), and a store
that keeps recall's index itself keeps postings of the same BM25
(`index_rows.HistoryTables`, scored by `scoring`).
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

from .terms import CJK_PAIR, query_terms, tokenize

logger = logging.getLogger("convmem")

__all__ = [
    "ABOUT_THE_TALK",
    "BM25Index",
    "BM25TextIndex",
    "CollectionStats",
    "JointLexicalIndex",
    "LexicalIndex",
    "LexicalScores",
    "information",
    "joint_kinds",
    "query_terms",
    "tokenize",
]

# Words a question uses to point at the conversation, not at what was said in it.
ABOUT_THE_TALK = frozenset(
    term
    for term in tokenize(
        "say said says tell told mention mentioned remember remind recall ask asked talk talked "
        "discuss discussed conversation chat previous earlier 说过 提过 聊过 讲过 记得 之前 上次"
    )
    if len(term) > 1  # CJK pairs only: a single character (上, 前) also says what was said
)

# Query postings from which scoring runs in numpy: below it the plain loop is as fast.
_VECTORIZED_POSTINGS = 512


class LexicalScores(Mapping[int, float]):
    """The scores of one query: the matching document ids, ascending, and their scores, as
    two aligned numpy arrays; readable as a mapping of id to score.

    A query over a long log matches thousands of documents, and recall only needs the
    best of them and the scores of its candidates: arrays answer both (`top`, `lookup`)
    without a dict of every match.
    """

    __slots__ = ("ids", "scores")

    def __init__(self, ids: np.ndarray, scores: np.ndarray) -> None:
        self.ids = ids
        """int64 document ids, ascending, each once."""
        self.scores = scores
        """float64 scores, aligned with `ids`."""

    @classmethod
    def of(cls, scores: Mapping[int, float]) -> LexicalScores:
        """`scores` as `LexicalScores` (returned as is when it already is)."""
        if isinstance(scores, LexicalScores):
            return scores
        import numpy as np

        ids = np.fromiter(scores.keys(), dtype=np.int64, count=len(scores))
        values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
        return cls.unsorted(ids, values)

    @classmethod
    def of_rows(cls, rows: Sequence[tuple[int, float]]) -> LexicalScores:
        """Scores from ``(id, score)`` rows of distinct ids, in any order (e.g. a query's)."""
        import numpy as np

        ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
        values = np.fromiter((row[1] for row in rows), dtype=np.float64, count=len(rows))
        return cls.unsorted(ids, values)

    @classmethod
    def unsorted(cls, ids: np.ndarray, values: np.ndarray) -> LexicalScores:
        """Scores of distinct `ids` in any order."""
        import numpy as np

        if len(ids) > 1 and not bool(np.all(ids[1:] > ids[:-1])):
            order = np.argsort(ids, kind="stable")
            ids, values = ids[order], values[order]
        return cls(ids, values)

    def __len__(self) -> int:
        return len(self.ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def __getitem__(self, doc_id: int) -> float:
        position = int(self.ids.searchsorted(doc_id))
        if position < len(self.ids) and self.ids[position] == doc_id:
            return float(self.scores[position])
        raise KeyError(doc_id)

    def __repr__(self) -> str:
        return f"LexicalScores({dict(self)!r:.200})"

    def best(self) -> float:
        """The best score (0.0 when nothing matched)."""
        return float(self.scores.max()) if len(self.scores) else 0.0

    def top(self, k: int) -> np.ndarray:
        """The ids of the `k` best scores (in no order), found without sorting them all; of
        equal scores at the boundary, the smaller ids."""
        import numpy as np

        if len(self.ids) <= k:
            return self.ids
        if k <= 0:
            return self.ids[:0]
        scores = self.scores
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = np.flatnonzero(scores > kth)
        ties = np.flatnonzero(scores == kth)[: k - len(above)]
        return self.ids[np.concatenate((above, ties))]

    def lookup(self, doc_ids: np.ndarray) -> np.ndarray:
        """The score of each of `doc_ids` (an int64 array), 0.0 for one that did not match."""
        import numpy as np

        if not len(self.ids) or not len(doc_ids):
            return np.zeros(len(doc_ids), dtype=np.float64)
        positions = np.minimum(self.ids.searchsorted(doc_ids), len(self.ids) - 1)
        return np.where(self.ids[positions] == doc_ids, self.scores[positions], 0.0)

    def only(self, keep: Callable[[int], bool]) -> LexicalScores:
        """The scores of the documents `keep` accepts."""
        import numpy as np

        mask = np.fromiter((keep(doc_id) for doc_id in self.ids.tolist()), dtype=bool, count=len(self.ids))
        return self if bool(mask.all()) else LexicalScores(self.ids[mask], self.scores[mask])


def no_scores() -> LexicalScores:
    """Scores of a query that matched nothing."""
    import numpy as np

    return LexicalScores(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64))


class CollectionStats:
    """BM25's statistics of a collection for one query: documents, their total length, and
    how many documents hold each query term. Collections add up: the statistics of a
    user's sessions together score every session's documents on one scale."""

    __slots__ = ("documents", "frequencies", "total_length")

    def __init__(self, documents: int, total_length: int, frequencies: Mapping[str, int]) -> None:
        self.documents = documents
        self.total_length = total_length
        self.frequencies = dict(frequencies)

    def __add__(self, other: CollectionStats) -> CollectionStats:
        frequencies = dict(self.frequencies)
        for term, count in other.frequencies.items():
            frequencies[term] = frequencies.get(term, 0) + count
        return CollectionStats(
            self.documents + other.documents, self.total_length + other.total_length, frequencies
        )

    def __repr__(self) -> str:
        return f"CollectionStats({self.documents} documents, {self.frequencies!r:.80})"

    @property
    def average(self) -> float:
        """The average document length (1.0 for an empty collection)."""
        return self.total_length / self.documents if self.documents and self.total_length else 1.0

    def idf(self, term: str) -> float:
        frequency = self.frequencies.get(term, 0)
        return math.log(1.0 + (self.documents - frequency + 0.5) / (frequency + 0.5))


def information(query_tokens: Iterable[str], collection: CollectionStats) -> dict[str, float]:
    """The query's informative terms and the information (idf) each carries, as
    `BM25Index.coverage` counts them: words about the conversation itself are left out, and
    pairs of CJK characters the collection never saw."""
    return {
        term: collection.idf(term)
        for term in set(query_tokens)
        if term not in ABOUT_THE_TALK and (collection.frequencies.get(term) or not CJK_PAIR.fullmatch(term))
    }


def add_posting(
    postings: dict[str, dict[int, int]], arrays: dict[str, Any], doc_id: int, counts: Mapping[str, int]
) -> None:
    """Enter a document's term `counts` in `postings` (term -> doc id -> count) and drop the
    `arrays` made of the postings it changes. The hot loop of indexing a history in a new
    process: no empty dict is made for a term that has one, nor a lookup in empty `arrays`."""
    for term, count in counts.items():
        docs = postings.get(term)
        if docs is None:
            postings[term] = {doc_id: count}
        else:
            docs[doc_id] = count
    if arrays:
        for term in counts:
            arrays.pop(term, None)


class BM25Index:
    """Okapi BM25 over documents keyed by int ids, updated in place.

    Adding or removing a document costs O(its length); scoring a query costs
    O(postings of the query's terms), in numpy when they are many (the arrays of a
    term are kept until a document with that term is added or removed; the scores
    are the same, bit for bit). Not thread-safe: the owner serializes access.

    Example::

        index = BM25Index()
        index.add(1, tokenize("My dog is called Duoduo"))
        index.search(tokenize("what is my dog called?"), top_k=5)  # [(1, 0.57...)]
    """

    def __init__(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, dict[int, int]] = {}
        self._lengths: dict[int, int] = {}
        self._terms: dict[int, tuple[str, ...]] = {}
        self._total_length = 0
        # term -> (doc ids, frequencies, document lengths) of its postings, as arrays
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}

    def __len__(self) -> int:
        return len(self._lengths)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._lengths

    def add(self, doc_id: int, tokens: Sequence[str]) -> None:
        """Index a document; re-adding an id replaces the old document."""
        if doc_id in self._lengths:
            self.remove(doc_id)
        counts = Counter(tokens)
        add_posting(self._postings, self._arrays, doc_id, counts)
        self._terms[doc_id] = tuple(counts)
        self._lengths[doc_id] = len(tokens)
        self._total_length += len(tokens)

    def remove(self, doc_id: int) -> None:
        """Forget a document (unknown ids are ignored)."""
        length = self._lengths.pop(doc_id, None)
        if length is None:
            return
        self._total_length -= length
        for term in self._terms.pop(doc_id, ()):
            self._arrays.pop(term, None)
            docs = self._postings.get(term)
            if docs is not None:
                docs.pop(doc_id, None)
                if not docs:
                    del self._postings[term]

    def clear(self) -> None:
        self._postings.clear()
        self._lengths.clear()
        self._terms.clear()
        self._arrays.clear()
        self._total_length = 0

    def idf(self, term: str) -> float:
        documents = len(self._lengths)
        frequency = len(self._postings.get(term, ()))
        return math.log(1.0 + (documents - frequency + 0.5) / (frequency + 0.5))

    def collection(self, query_tokens: Iterable[str]) -> CollectionStats:
        """This index's statistics for the query's terms: what `scores` reads, and what
        several indexes add up (`CollectionStats.__add__`) to score as one collection."""
        terms = set(query_tokens)
        return CollectionStats(
            len(self._lengths),
            self._total_length,
            {term: len(self._postings.get(term, ())) for term in terms},
        )

    def scores(self, query_tokens: Iterable[str], collection: CollectionStats | None = None) -> LexicalScores:
        """BM25 score of every document that shares a term with the query.

        With `collection` (the statistics of a larger collection this index is part
        of, e.g. every session of one user) the idf and average length are that
        collection's, so scores of its parts are on one scale.
        """
        if not self._lengths:
            return no_scores()
        if collection is None:
            average = self._total_length / len(self._lengths) or 1.0
            idf_of = self.idf
        else:
            average, idf_of = collection.average, collection.idf
        terms = [(term, docs) for term in set(query_tokens) if (docs := self._postings.get(term))]
        if sum(len(docs) for _, docs in terms) >= _VECTORIZED_POSTINGS:
            return self._vector_scores(terms, average, idf_of)
        k1, b = self.k1, self.b
        out: dict[int, float] = {}
        for term, docs in terms:
            idf = idf_of(term)
            for doc_id, frequency in docs.items():
                norm = k1 * (1.0 - b + b * self._lengths[doc_id] / average)
                out[doc_id] = out.get(doc_id, 0.0) + idf * frequency * (k1 + 1.0) / (frequency + norm)
        return LexicalScores.of(out)

    def coverage(
        self, query_tokens: Iterable[str], collection: CollectionStats | None = None
    ) -> LexicalScores:
        """For each document sharing a term with the query, the share of the query's
        information (the idf of its distinct terms) that the document holds.

        An absolute measure (1.0: every term of the query), unlike a score divided by
        the best one: a document matching only "many" of "How many bikes do I own?"
        covers little of it however it ranks. Terms the collection never saw count at
        the idf of a term in no document, except pairs of CJK characters: a query's
        pairs that span two words ("叫什" of "叫什么名字") are in no document of any history.
        Words about the conversation itself ("What did I *say*...", 提过) are not counted:
        they ask where to look, not what to find.
        """
        collection = collection or self.collection(query_tokens)
        weights = information(query_tokens, collection)
        total = sum(weights.values())
        if not total or not self._lengths:
            return no_scores()
        import numpy as np

        ids, parts = [], []
        for term, weight in weights.items():
            docs = self._postings.get(term)
            if docs:
                ids.append(self._term_arrays(term, docs)[0])
                parts.append(np.full(len(docs), weight / total))
        if not ids:
            return no_scores()
        unique, inverse = np.unique(np.concatenate(ids), return_inverse=True)
        return LexicalScores(
            unique, np.bincount(inverse, weights=np.concatenate(parts), minlength=len(unique))
        )

    def _term_arrays(self, term: str, docs: dict[int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(doc ids, frequencies, document lengths) of a term's postings, kept until a
        document with the term is added or removed."""
        import numpy as np

        arrays = self._arrays.get(term)
        if arrays is None:
            count = len(docs)
            arrays = self._arrays[term] = (
                np.fromiter(docs.keys(), dtype=np.int64, count=count),
                np.fromiter(docs.values(), dtype=np.float64, count=count),
                np.fromiter((self._lengths[d] for d in docs), dtype=np.float64, count=count),
            )
            for array in arrays:  # a query's scores may hand the ids out as they are
                array.flags.writeable = False
        return arrays

    def _vector_scores(
        self, terms: list[tuple[str, dict[int, int]]], average: float, idf_of: Callable[[str], float]
    ) -> LexicalScores:
        """`scores` in numpy: the same operations in the same order, so the same floats."""
        import numpy as np

        k1, b = self.k1, self.b
        ids, parts = [], []
        for term, docs in terms:
            doc_ids, frequency, lengths = self._term_arrays(term, docs)
            norm = k1 * (1.0 - b + b * lengths / average)
            ids.append(doc_ids)
            parts.append(idf_of(term) * frequency * (k1 + 1.0) / (frequency + norm))
        if len(ids) == 1:
            return LexicalScores.unsorted(ids[0], parts[0])
        # bincount adds each document's parts in term order, as the loop above does.
        unique, inverse = np.unique(np.concatenate(ids), return_inverse=True)
        sums = np.bincount(inverse, weights=np.concatenate(parts), minlength=len(unique))
        return LexicalScores(unique, sums)

    def full_match(self, query_tokens: Iterable[str]) -> float:
        """The score of a document of average length holding each query term once.

        Raw BM25 scores depend on the collection (a term is rarer in a long
        log): divided by this, scores of different collections compare.
        """
        if not self._lengths:
            return 0.0
        return sum(self.idf(term) for term in set(query_tokens))

    def search(self, query_tokens: Iterable[str], top_k: int) -> list[tuple[int, float]]:
        """The `top_k` best (id, score) pairs, best first."""
        scored = self.scores(query_tokens)
        return sorted(scored.items(), key=lambda item: (-item[1], item[0]))[:top_k]


class LexicalIndex(Protocol):
    """Documents (messages or exchanges, keyed by an int id) found by their words.

    Recall adds each document once, removes the ones the log no longer holds,
    and asks for the scores of a query: any relevance where higher is better
    and a document sharing no term with the query is absent (recall divides by
    the best score of the query, so the scale is free). Not thread-safe: recall
    calls it under the session's lock.
    """

    def add(self, doc_id: int, text: str) -> None:
        """Index `text` under `doc_id`, replacing what the id held."""
        ...

    def remove(self, doc_id: int) -> None:
        """Forget a document (unknown ids are ignored)."""
        ...

    def clear(self) -> None: ...

    def scores(self, query: str) -> Mapping[int, float]:
        """The relevance of every document that shares a term with `query` (any mapping;
        the indexes here return `LexicalScores`)."""
        ...


@runtime_checkable
class JointLexicalIndex(LexicalIndex, Protocol):
    """A `LexicalIndex` that can score as part of a larger collection: recall adds up the
    `collection` statistics of every session of a user and scores each session with the
    sum, so that one ranking covers the user's whole history (`BM25TextIndex`)."""

    def collection(self, query: str) -> CollectionStats:
        """This index's statistics for the terms of `query`."""
        ...

    def scores(self, query: str, collection: CollectionStats | None = None) -> Mapping[int, float]: ...

    def coverage(self, query: str, collection: CollectionStats | None = None) -> Mapping[int, float]:
        """The share of the query's information each matching document holds (0..1)."""
        ...


class BM25TextIndex:
    """The in-process `LexicalIndex`: `tokenize`, then Okapi BM25 (`BM25Index`).

    Example::

        index = BM25TextIndex()
        index.add(1, "My dog is called Duoduo")
        index.scores("what is my dog called?")  # {1: 0.57...}
    """

    def __init__(self) -> None:
        self.bm25 = BM25Index()

    def __len__(self) -> int:
        return len(self.bm25)

    def add(self, doc_id: int, text: str) -> None:
        self.bm25.add(doc_id, tokenize(text))

    def add_terms(self, doc_id: int, terms: Sequence[str]) -> None:
        """`add` of a text whose terms (``tokenize(text)``) are known."""
        self.bm25.add(doc_id, terms)

    def remove(self, doc_id: int) -> None:
        self.bm25.remove(doc_id)

    def clear(self) -> None:
        self.bm25.clear()

    def scores(self, query: str, collection: CollectionStats | None = None) -> LexicalScores:
        """BM25 scores of `query` (with `collection`: on that collection's scale)."""
        return self.bm25.scores(query_terms(query), collection)

    def collection(self, query: str) -> CollectionStats:
        """See `BM25Index.collection` (`JointLexicalIndex`)."""
        return self.bm25.collection(query_terms(query))

    def coverage(self, query: str, collection: CollectionStats | None = None) -> LexicalScores:
        """See `BM25Index.coverage` (`JointLexicalIndex`)."""
        return self.bm25.coverage(query_terms(query), collection)

    def full_match(self, query: str) -> float:
        """See `BM25Index.full_match`: what puts this index's scores on a scale shared with
        other sessions' (recall across a user's sessions); optional for a `LexicalIndex`."""
        return self.bm25.full_match(query_terms(query))


def joint_kinds(lexical: tuple[LexicalIndex, LexicalIndex]) -> dict[str, bool]:
    """Which of a mirror's two lexical indexes (messages, exchanges) can score as part of
    a user's collection (checked once: a protocol check costs more than the query it guards)."""
    return {
        "messages": isinstance(lexical[0], JointLexicalIndex),
        "exchanges": isinstance(lexical[1], JointLexicalIndex),
    }
