"""Lexical matching: a CJK-aware tokenizer and a small incremental BM25 index.

Dense embeddings miss exact names, numbers and rare words; BM25 catches them,
and with no embedder at all it is the whole of recall. The index is
incremental (a document is added once, when its message is stored) because
rebuilding a BM25 model for every query costs O(history).

Recall reaches its lexical half through `LexicalIndex` (text in, scores out),
so an index a store keeps (`SQLiteLexicalIndex`: SQLite FTS5 in the store's
file) can replace `BM25TextIndex`, which keeps the terms in this process and
is rebuilt from the log on first use. An index a store keeps outlives the
process and is shared by every process using the file: it also follows the
log's generation (`StoredLexicalIndex`) and may say it lost its documents
(`LexicalIndexLost`), and then recall gives it every document again.

Tokens: Latin words are lowercased, stripped of possessives and a light
suffix (``running`` -> ``runn``, ``dogs`` -> ``dog``), and English stopwords
are dropped; Chinese, Japanese and Korean text has no spaces, so every CJK
character is a token and so is every pair of adjacent characters (``名字``),
except particles, pronouns and question words (``的``, ``我``, ``什么``), the
Chinese stopwords.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

from .._language import CJK_RANGES

logger = logging.getLogger("convmem")

__all__ = [
    "BM25Index",
    "BM25TextIndex",
    "BufferedLexicalIndex",
    "CollectionStats",
    "JointLexicalIndex",
    "LexicalIndex",
    "LexicalIndexLost",
    "LexicalScores",
    "StoredLexicalIndex",
    "query_terms",
    "tokenize",
]

_PIECES = re.compile(rf"[{CJK_RANGES}]+|[^\W_{CJK_RANGES}]+(?:'[^\W_{CJK_RANGES}]+)*")
_CJK_RUN = re.compile(rf"[{CJK_RANGES}]+")
_CJK_PAIR = re.compile(rf"[{CJK_RANGES}]{{2}}")

_STOPWORD_TEXT = """
    a about above after again against all also am an and any are as at be because been before being
    below between both but by can could did do does doing done down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its itself
    just me more most my myself no nor not now of off on once only or other our ours ourselves out
    over own same she should so some such than that the their theirs them themselves then there these
    they this those through to too under until up very was we were what when where which while who
    whom why will with would you your yours yourself yourselves oh ok okay yeah yes hey hi wow um uh
    really s t d ll m re ve im
"""
_STOPWORDS = frozenset(_STOPWORD_TEXT.split())
# Single characters so common in Chinese that matching them says nothing: particles,
# pronouns, question words and measure words (as "I", "what" and "a" are English stopwords).
# Pairs that hold them still count ("我的", "名字", "哪个城市" gives "城市").
_CJK_STOP_CHARS = frozenset("的了是吗呢吧啊呀哦嗯也就都还在和与及或我你您他她它们什么哪怎谁这那个有")
# Pairs that are only question words, pronouns or "now": in a question they ask, they match nothing.
_CJK_STOP_PAIRS = frozenset(
    "什么 怎么 怎样 哪个 哪里 哪儿 为什 为啥 我们 你们 他们 她们 这个 那个 一个 现在 有没 没有".split()  # noqa: SIM905 - a word list reads better as text
)

_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")
_KEEP_DOUBLE = frozenset("lsz")


@functools.lru_cache(maxsize=16384)  # a conversation reuses a few thousand words
def _stem(word: str) -> str:
    """A deliberately light stemmer: one common suffix, a doubled consonant, a final "e".

    ``running``/``run``, ``baked``/``baking``/``bake`` and ``parties``/``party``
    meet; Porter-style stemming would merge more forms, but also more unrelated
    words, and BM25 over chat turns only needs the common inflections to meet.
    """
    if len(word) <= 3 or not word.isascii() or not word.isalpha():
        return word
    stem = word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix in ("ies", "ied"):
                stem += "y"
            elif suffix == "s" and stem.endswith(("s", "u", "i")):
                stem = word  # "class", "status", "analysis"
            elif stem[-1] == stem[-2] and stem[-1] not in _KEEP_DOUBLE and stem[-1] not in "aeiou":
                stem = stem[:-1]  # "running" -> "run"
            break
    if len(stem) > 3 and stem.endswith("e"):
        stem = stem[:-1]
    return stem


def tokenize(text: str) -> list[str]:
    """Split text into BM25 terms (see the module docstring for the rules).

    >>> tokenize("Caroline's dogs were painting!")
    ['carolin', 'dog', 'paint']
    >>> tokenize("我的狗叫多多")
    ['狗', '叫', '多', '多', '我的', '的狗', '狗叫', '叫多', '多多']
    """
    tokens: list[str] = []
    for piece in _PIECES.findall(text.lower()):
        if _CJK_RUN.match(piece):
            tokens.extend(c for c in piece if c not in _CJK_STOP_CHARS)
            pairs = (piece[i : i + 2] for i in range(len(piece) - 1))
            tokens.extend(pair for pair in pairs if pair not in _CJK_STOP_PAIRS)
            continue
        for word in piece.split("'", 1)[:1]:  # "caroline's" -> "caroline"
            if word not in _STOPWORDS:
                tokens.append(_stem(word))
    return tokens


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
        for term, frequency in counts.items():
            self._postings.setdefault(term, {})[doc_id] = frequency
            self._arrays.pop(term, None)
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
        """
        collection = collection or self.collection(query_tokens)
        weights = {
            term: collection.idf(term)
            for term in set(query_tokens)
            if collection.frequencies.get(term) or not _CJK_PAIR.fullmatch(term)
        }
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


class LexicalIndexLost(Exception):
    """Raised by `LexicalIndex.scores` of an index kept outside the process when its
    documents are gone (its table was missing or corrupt and was rebuilt empty): the
    caller adds every document again (after `clear`) and asks once more."""


@runtime_checkable
class StoredLexicalIndex(LexicalIndex, Protocol):
    """A `LexicalIndex` that a store keeps, shared by the processes using it.

    Writes are checked against the log: `follow_log` names the generation (see
    `Store.stats`) of the log the documents added next come from, and nothing is
    written once the log has another generation, so text deleted by another
    process is never written back.
    """

    def follow_log(self, generation: str | None) -> None:
        """The documents added from now on come from the log of `generation`."""
        ...

    def flush(self) -> None:
        """Write what was added now (recall calls it where blocking I/O is allowed);
        `scores` writes anything left first."""
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


# Documents a store-kept index buffers before it writes them without waiting for a query.
_FLUSH_EVERY = 512


def document_digest(text: str) -> bytes:
    """What a store-kept index records of a document's text, to tell whether it changed."""
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()


def replaces(stored: tuple[bytes, int] | None, text: str) -> bool:
    """Whether `text` should replace the stored (digest, length) of its document: not
    when it is the same text, nor when the stored one is longer (read further)."""
    return stored is None or (stored[0] != document_digest(text) and stored[1] <= len(text))


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


_UNSET = _Unset()


class BufferedLexicalIndex:
    """The write buffer of a `StoredLexicalIndex`: what `add`, `remove` and `clear` ask
    for is kept until the subclass writes it (`_write_buffered`), in one batch.

    After `clear` the documents added again are all the session has: the next final
    write (`flush` or a query) deletes stored ones not added again, up to the last id
    added (a greater one was added by a process that read further). Not thread-safe:
    recall calls it under the session's lock.
    """

    def __init__(self, session_id: str, units: str) -> None:
        self.session_id = session_id
        self.units = units
        self._generation: str | _Unset | None = _UNSET
        self._pending: dict[int, str | None] = {}  # doc id -> text to write, or None to delete
        self._syncing = False  # after clear(): stored documents not added again are deleted
        self._confirmed: set[int] = set()  # doc ids added since clear(), already written
        self._last_added = -1  # the greatest doc id added since clear()

    def _write_buffered(self, *, final: bool) -> None:
        """Write the buffer (see `_changes` and `_written`); `final`: a sweep is due."""
        raise NotImplementedError

    def follow_log(self, generation: str | None) -> None:
        self._generation = generation

    def add(self, doc_id: int, text: str) -> None:
        self._pending[doc_id] = text
        self._last_added = max(self._last_added, doc_id)
        if len(self._pending) >= _FLUSH_EVERY:
            try:
                self._write_buffered(final=False)
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
            self._write_buffered(final=True)
        except Exception as exc:
            logger.debug("recall lexical index of %r not written yet: %s", self.session_id, exc)

    def _due(self, *, final: bool) -> bool | None:
        """Whether this write sweeps (True), only writes the buffer (False), or has nothing
        to do: an empty buffer and no sweep, or a log never read to check writes against."""
        sweep = final and self._syncing
        if not self._pending and not sweep:
            return None
        if not isinstance(self._generation, str) and self._generation is not None:
            return None  # the log was never read: nothing to check writes against
        return sweep

    def _wanted(self, *, sweep: bool) -> list[int] | None:
        """The doc ids whose stored (digest, length) the write needs (None: all of them)."""
        return None if sweep else list(self._pending)

    def _changes(
        self, stored: Mapping[int, tuple[bytes, int]], *, sweep: bool
    ) -> tuple[dict[int, str], list[int]]:
        """The documents to write (id -> text) and the ids to delete, given what is stored:
        text already stored (or stored longer) is left alone."""
        writes = {
            doc_id: text
            for doc_id, text in self._pending.items()
            if text is not None and replaces(stored.get(doc_id), text)
        }
        deletes = [doc_id for doc_id, text in self._pending.items() if text is None and doc_id in stored]
        if sweep:
            # Past the last document given: added by a process that has read further.
            kept = self._confirmed | self._pending.keys()
            deletes.extend(d for d in stored if d not in kept and d <= self._last_added)
        return writes, deletes

    def _written(self, *, sweep: bool) -> None:
        """The buffer is written: empty it (and end the sweep)."""
        if self._syncing:
            self._confirmed.update(doc_id for doc_id, text in self._pending.items() if text is not None)
        self._pending.clear()
        if sweep:
            self._syncing = False
            self._confirmed.clear()


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


@functools.lru_cache(maxsize=256)
def query_terms(query: str) -> tuple[str, ...]:
    """`tokenize` for a query, remembered: one question is scored against two indexes of
    each session it searches (a user's sessions: dozens)."""
    return tuple(tokenize(query))
