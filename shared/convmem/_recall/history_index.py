"""The keyword index of one user's history in this process: `HistoryIndex`.

Recall ranks a user's sessions as one history (one set of BM25 statistics over
all of them). Each mirrored session keeps its documents here rather than in an
index of its own: one index per unit kind (the passages of messages, the
exchanges) holds every mirrored session of the user, each session in a *slot*
(a document of slot ``s`` has the id ``s << SLOT_SHIFT | its id in the
session``). A search then scores the whole history in one pass over the
postings of the query's terms, whatever the number of sessions, and splits the
scores by slot afterwards.

A session's mirror writes through a `SlotView` (a `LexicalIndex` of one slot and
kind), takes a slot when it is first read and gives it back when it is dropped
or forgotten; a view whose slot was given back does nothing, so a mirror dropped
while a search still held it can never write into the slot of the session that
took it next.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np

from .lexical import CollectionStats, LexicalScores, add_posting, no_scores, query_terms, tokenize
from .scoring import TermPostings, bm25, collection_of, coverage, full_match

__all__ = ["MAX_SLOTS", "SLOT_SHIFT", "HistoryIndex", "SlotView", "slot_of"]

# A document's id in its session (a passage: seq << 8 | part, seqs below 2**40) fits in 48 bits.
SLOT_SHIFT = 48
MAX_SLOTS = 1 << (63 - SLOT_SHIFT)
_LOCAL_MASK = (1 << SLOT_SHIFT) - 1
KINDS = ("messages", "exchanges")


def slot_of(doc_ids: np.ndarray) -> np.ndarray:
    """The slots of joint document ids."""
    return doc_ids >> SLOT_SHIFT


class _Postings:
    """The documents of one unit kind across the slots, by term (guarded by the history's lock)."""

    def __init__(self) -> None:
        self.postings: dict[str, dict[int, int]] = {}
        self.lengths: dict[int, int] = {}
        self.terms: dict[int, tuple[str, ...]] = {}
        self.slot_docs: dict[int, set[int]] = {}
        self.slot_length: Counter[int] = Counter()
        self._arrays: dict[str, TermPostings] = {}

    def add(self, doc_id: int, tokens: Sequence[str]) -> None:
        if doc_id in self.lengths:
            self.remove(doc_id)
        counts = Counter(tokens)
        add_posting(self.postings, self._arrays, doc_id, counts)
        self.terms[doc_id] = tuple(counts)
        self.lengths[doc_id] = len(tokens)
        slot = doc_id >> SLOT_SHIFT
        self.slot_docs.setdefault(slot, set()).add(doc_id)
        self.slot_length[slot] += len(tokens)

    def remove(self, doc_id: int) -> None:
        length = self.lengths.pop(doc_id, None)
        if length is None:
            return
        slot = doc_id >> SLOT_SHIFT
        self.slot_docs[slot].discard(doc_id)
        self.slot_length[slot] -= length
        for term in self.terms.pop(doc_id, ()):
            self._arrays.pop(term, None)
            docs = self.postings.get(term)
            if docs is not None:
                docs.pop(doc_id, None)
                if not docs:
                    del self.postings[term]

    def clear_slot(self, slot: int) -> None:
        for doc_id in list(self.slot_docs.get(slot, ())):
            self.remove(doc_id)
        self.slot_docs.pop(slot, None)
        self.slot_length.pop(slot, None)

    def totals(self, slots: Collection[int]) -> tuple[int, int]:
        """Documents and total length of `slots`."""
        return (
            sum(len(self.slot_docs.get(slot, ())) for slot in slots),
            sum(self.slot_length.get(slot, 0) for slot in slots),
        )

    def term_postings(self, term: str) -> TermPostings | None:
        found = self._arrays.get(term)
        if found is None:
            docs = self.postings.get(term)
            if not docs:
                return None
            count = len(docs)
            found = self._arrays[term] = TermPostings(
                np.fromiter(docs.keys(), dtype=np.int64, count=count),
                np.fromiter(docs.values(), dtype=np.float64, count=count),
                np.fromiter((self.lengths[d] for d in docs), dtype=np.float64, count=count),
            )
        return found

    def postings_of(self, terms: Iterable[str], slots: np.ndarray | None) -> dict[str, TermPostings]:
        """The postings of `terms`, of `slots` only (None: of every slot)."""
        out: dict[str, TermPostings] = {}
        for term in terms:
            found = self.term_postings(term)
            if found is None:
                continue
            if slots is not None:
                found = found.only(np.isin(found.ids >> SLOT_SHIFT, slots))
            if len(found.ids):
                out[term] = found
        return out


class HistoryFound:
    """What one query finds in a history, for each unit kind: the scores of its documents
    (joint ids) on the scale of the slots searched, and those slots' statistics."""

    __slots__ = ("collections", "coverage", "scores")

    def __init__(
        self,
        scores: dict[str, LexicalScores],
        collections: dict[str, CollectionStats],
        coverage: LexicalScores,
    ) -> None:
        self.scores = scores
        self.collections = collections
        self.coverage = coverage


class HistoryIndex:
    """The passages and exchanges of every mirrored session of one user, by slot.

    Thread-safe: the sessions of one user are mirrored (and written through their
    views) under their own locks, so the index takes one of its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kinds = {kind: _Postings() for kind in KINDS}
        self._free: list[int] = []
        self._next_slot = 0
        self._leases: dict[int, object] = {}

    def __len__(self) -> int:
        """How many slots are taken."""
        return len(self._leases)

    def acquire(self) -> tuple[SlotView, SlotView] | None:
        """Views of a new slot (messages, exchanges), or None when every slot is taken."""
        with self._lock:
            if self._free:
                slot = self._free.pop()
            elif self._next_slot < MAX_SLOTS:
                slot, self._next_slot = self._next_slot, self._next_slot + 1
            else:
                return None
            lease = self._leases[slot] = object()
        return SlotView(self, "messages", slot, lease), SlotView(self, "exchanges", slot, lease)

    def release(self, slot: int, lease: object) -> None:
        """Give a slot back: its documents go, and the views of this lease do nothing from now on."""
        with self._lock:
            if self._leases.get(slot) is not lease:
                return
            del self._leases[slot]
            for postings in self._kinds.values():
                postings.clear_slot(slot)
            self._free.append(slot)

    def _holds(self, slot: int, lease: object) -> bool:
        return self._leases.get(slot) is lease

    # -- writing, through a view (the history's lock taken here) -------------------------

    def _add(self, kind: str, slot: int, lease: object, doc_id: int, tokens: Sequence[str]) -> None:
        with self._lock:
            if self._holds(slot, lease):
                self._kinds[kind].add(slot << SLOT_SHIFT | doc_id, tokens)

    def _remove(self, kind: str, slot: int, lease: object, doc_id: int) -> None:
        with self._lock:
            if self._holds(slot, lease):
                self._kinds[kind].remove(slot << SLOT_SHIFT | doc_id)

    def _clear(self, kind: str, slot: int, lease: object) -> None:
        with self._lock:
            if self._holds(slot, lease):
                self._kinds[kind].clear_slot(slot)

    def _size(self, kind: str, slot: int) -> int:
        with self._lock:
            return len(self._kinds[kind].slot_docs.get(slot, ()))

    # -- reading ---------------------------------------------------------------------------

    def find(self, query: str, views: Sequence[SlotView], kinds: Collection[str]) -> HistoryFound:
        """Score `query` over the documents of the slots of `views` (one collection) for each
        of `kinds`, and the keyword coverage of the messages' passages."""
        terms = query_terms(query)
        distinct = list(dict.fromkeys(terms))
        scores: dict[str, LexicalScores] = {}
        collections: dict[str, CollectionStats] = {}
        found_coverage = no_scores()
        with self._lock:
            live = {
                view.slot for view in views if view.history is self and self._holds(view.slot, view.lease)
            }
            wanted = np.array(sorted(live), dtype=np.int64)
            every = len(wanted) == len(self._leases) and all(s in self._leases for s in wanted.tolist())
            for kind in kinds:
                postings = self._kinds[kind]
                found = postings.postings_of(distinct, None if every else wanted)
                documents, length = postings.totals(wanted.tolist())
                collection = collection_of(documents, length, found, terms)
                collections[kind] = collection
                scores[kind] = bm25(list(set(terms)), found, collection) if documents else no_scores()
                if kind == "messages" and documents:
                    found_coverage = coverage(terms, found, collection)
        return HistoryFound(scores, collections, found_coverage)

    def slot_scores(
        self, kind: str, slot: int, query: str, collection: CollectionStats | None
    ) -> LexicalScores:
        """One slot's scores (ids in the session), on `collection`'s scale or its own."""
        terms = query_terms(query)
        with self._lock:
            postings = self._kinds[kind]
            found = postings.postings_of(dict.fromkeys(terms), np.array([slot], dtype=np.int64))
            if collection is None:
                collection = collection_of(*postings.totals([slot]), found, terms)
            if not collection.documents:
                return no_scores()
            scores = bm25(list(set(terms)), found, collection)
        return LexicalScores(scores.ids & _LOCAL_MASK, scores.scores)

    def slot_coverage(self, slot: int, query: str, collection: CollectionStats | None) -> LexicalScores:
        terms = query_terms(query)
        with self._lock:
            postings = self._kinds["messages"]
            found = postings.postings_of(dict.fromkeys(terms), np.array([slot], dtype=np.int64))
            if collection is None:
                collection = collection_of(*postings.totals([slot]), found, terms)
            scores = coverage(terms, found, collection)
        return LexicalScores(scores.ids & _LOCAL_MASK, scores.scores)

    def slot_collection(self, kind: str, slot: int, query: str) -> CollectionStats:
        terms = query_terms(query)
        with self._lock:
            postings = self._kinds[kind]
            found = postings.postings_of(dict.fromkeys(terms), np.array([slot], dtype=np.int64))
            return collection_of(*postings.totals([slot]), found, terms)


class SlotView:
    """The `LexicalIndex` (and `JointLexicalIndex`) of one session's documents of one kind
    in a `HistoryIndex`: what the session's mirror adds to and searches."""

    def __init__(self, history: HistoryIndex, kind: str, slot: int, lease: object) -> None:
        self.history = history
        self.kind = kind
        self.slot = slot
        self.lease = lease

    def __repr__(self) -> str:
        return f"SlotView({self.kind!r}, slot {self.slot})"

    def __len__(self) -> int:
        return self.history._size(self.kind, self.slot)

    @property
    def alive(self) -> bool:
        return self.history._holds(self.slot, self.lease)

    def release(self) -> None:
        self.history.release(self.slot, self.lease)

    def add(self, doc_id: int, text: str) -> None:
        self.history._add(self.kind, self.slot, self.lease, doc_id, tokenize(text))

    def add_terms(self, doc_id: int, terms: Sequence[str]) -> None:
        """`add` of a text whose terms (``tokenize(text)``) are known."""
        self.history._add(self.kind, self.slot, self.lease, doc_id, terms)

    def remove(self, doc_id: int) -> None:
        self.history._remove(self.kind, self.slot, self.lease, doc_id)

    def clear(self) -> None:
        self.history._clear(self.kind, self.slot, self.lease)

    def scores(self, query: str, collection: CollectionStats | None = None) -> LexicalScores:
        return self.history.slot_scores(self.kind, self.slot, query, collection)

    def collection(self, query: str) -> CollectionStats:
        return self.history.slot_collection(self.kind, self.slot, query)

    def coverage(self, query: str, collection: CollectionStats | None = None) -> LexicalScores:
        return self.history.slot_coverage(self.slot, query, collection)

    def full_match(self, query: str) -> float:
        return full_match(query_terms(query), self.collection(query))


def split_by_slot(scores: LexicalScores, shift: int, slots: Sequence[int]) -> Mapping[int, LexicalScores]:
    """`scores` of joint ids (``slot << shift | id``), ascending, as the scores of each of
    `slots` with the ids in its session (a negative slot has none)."""
    mask = (1 << shift) - 1
    ids, values = scores.ids, scores.scores
    starts = np.array([max(slot, 0) for slot in slots], dtype=np.int64) << shift
    lows = np.searchsorted(ids, starts).tolist()
    highs = np.searchsorted(ids, starts + (1 << shift)).tolist()
    out: dict[int, LexicalScores] = {}
    for slot, lo, hi in zip(slots, lows, highs, strict=True):
        out[slot] = LexicalScores(ids[lo:hi] & mask, values[lo:hi]) if hi > lo and slot >= 0 else no_scores()
    return out
