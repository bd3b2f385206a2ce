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
from typing import NamedTuple

import numpy as np

from .lexical import CollectionStats, LexicalScores, information, no_scores

__all__ = [
    "K1",
    "TWO_TERMS_CHANCE",
    "B",
    "ChanceShare",
    "TermPostings",
    "bm25",
    "chance_share",
    "collection_of",
    "coverage",
    "full_match",
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


TWO_TERMS_CHANCE = 0.4
"""Of a query of two informative terms, the share one of them carries when its idf is two
thirds of the other's (2 / (2 + 3)): a word carrying less is the far commoner of the two."""


class ChanceShare(NamedTuple):
    """What one of a query's terms in common may hold of it by chance (`chance_share`)."""

    share: float
    """`coverage`'s scale: a document that holds more holds more than one term by chance."""
    terms: int
    """The query's informative terms: two, or three or more."""


def chance_share(terms: Iterable[str], collection: CollectionStats) -> ChanceShare | None:
    """The share of the query's information (`coverage`'s scale) that a document holding one
    of its terms by chance may hold. Of three informative terms or more, the greatest share
    one of them carries: a document above it holds two or more. Of two, `TWO_TERMS_CHANCE`:
    a document holding only the far commoner of them ("know" of "How does GPS know where I
    am?", about 30% of it in a long history) holds that much or less; one holding a word
    about as informative as the other (two thirds of its idf or more), either of them or
    both, holds more. None for a query of one informative term, which a document holds
    whole or not at all."""
    weights = information(terms, collection)
    total = sum(weights.values())
    if len(weights) < 2 or not total or not collection.documents:
        return None
    if len(weights) == 2:
        return ChanceShare(TWO_TERMS_CHANCE, 2)
    return ChanceShare(max(weights.values()) / total, len(weights))


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
