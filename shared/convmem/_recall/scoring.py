"""Okapi BM25 and keyword coverage computed from postings arrays.

Whoever holds the postings (a user's history in this process, `history_index`; a
store's own tables, read for one query) hands them here as arrays: for each query
term, the documents holding it, the term's count in each and each document's
length, plus the collection's size. The scores are those of `BM25Index` over the
same documents, with the same k1, b and idf, so a ranking does not depend on
where the index is kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from .lexical import CollectionStats, LexicalScores, information, no_scores

__all__ = [
    "K1",
    "B",
    "TermPostings",
    "bm25",
    "collection_of",
    "coverage",
    "full_match",
    "largest_share",
    "unheard",
]

# BM25Index's defaults: the one BM25 of recall.
K1 = 1.2
B = 0.75


@dataclasses.dataclass(frozen=True)
class TermPostings:
    """The documents holding one term: ids, the term's count in each, their lengths."""

    ids: np.ndarray  # int64
    counts: np.ndarray  # float64
    lengths: np.ndarray  # float64

    def only(self, mask: np.ndarray) -> TermPostings:
        return TermPostings(self.ids[mask], self.counts[mask], self.lengths[mask])


def collection_of(
    documents: int, total_length: int, postings: Mapping[str, TermPostings], terms: Iterable[str]
) -> CollectionStats:
    """The collection's statistics for `terms`: a term's document frequency is how many
    documents its postings hold."""
    return CollectionStats(
        documents,
        total_length,
        {term: (len(postings[term].ids) if term in postings else 0) for term in set(terms)},
    )


def bm25(
    terms: Sequence[str], postings: Mapping[str, TermPostings], collection: CollectionStats
) -> LexicalScores:
    """The BM25 score of every document holding one of `terms` (each document's parts
    added in the order of `terms`, as `BM25Index.scores` adds them)."""
    average = collection.average
    ids, parts = [], []
    for term in terms:
        found = postings.get(term)
        if found is None or not len(found.ids):
            continue
        norm = K1 * (1.0 - B + B * found.lengths / average)
        ids.append(found.ids)
        parts.append(collection.idf(term) * found.counts * (K1 + 1.0) / (found.counts + norm))
    if not ids:
        return no_scores()
    if len(ids) == 1:
        return LexicalScores.unsorted(ids[0], parts[0])
    unique, inverse = np.unique(np.concatenate(ids), return_inverse=True)
    return LexicalScores(unique, np.bincount(inverse, weights=np.concatenate(parts), minlength=len(unique)))


def coverage(
    terms: Iterable[str], postings: Mapping[str, TermPostings], collection: CollectionStats
) -> LexicalScores:
    """For each document holding a query term, the share of the query's information (the
    idf of its distinct terms) it holds: `BM25Index.coverage` from postings."""
    weights = information(terms, collection)
    total = sum(weights.values())
    if not total or not collection.documents:
        return no_scores()
    ids, parts = [], []
    for term, weight in weights.items():
        found = postings.get(term)
        if found is not None and len(found.ids):
            ids.append(found.ids)
            parts.append(np.full(len(found.ids), weight / total))
    if not ids:
        return no_scores()
    unique, inverse = np.unique(np.concatenate(ids), return_inverse=True)
    return LexicalScores(unique, np.bincount(inverse, weights=np.concatenate(parts), minlength=len(unique)))


def largest_share(terms: Iterable[str], collection: CollectionStats) -> float | None:
    """The greatest share of the query's information one of its terms carries (`coverage`'s
    scale): a document whose coverage is above it holds two of the query's terms or more.
    None when the query has fewer than three informative terms."""
    weights = information(terms, collection)
    total = sum(weights.values())
    if len(weights) < 3 or not total or not collection.documents:
        return None
    return max(weights.values()) / total


def unheard(terms: Iterable[str], collection: CollectionStats) -> tuple[float, frozenset[str]]:
    """The share of the query's information (`coverage`'s scale) carried by its terms that
    no document of the collection holds, and those terms. Numbers are left out: in a query
    they are values ("turning 30"), not words of its subject."""
    weights = information(terms, collection)
    total = sum(weights.values())
    if not total or not collection.documents:
        return 0.0, frozenset()
    never = frozenset(t for t in weights if not t.isdigit() and not collection.frequencies.get(t))
    return sum(weights[t] for t in never) / total, never


def full_match(terms: Iterable[str], collection: CollectionStats) -> float:
    """`BM25Index.full_match`: the score of a document of average length holding each
    query term once."""
    if not collection.documents:
        return 0.0
    return sum(collection.idf(term) for term in set(terms))
