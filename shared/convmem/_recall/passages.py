"""Passages of long messages: what keyword search scores and recall shows of them.

An assistant's 3,000-token answer is not one unit of memory: the question it
answers is usually about one paragraph of it. A message longer than
`LONG_MESSAGE_CHARS` is split into passages of about `PASSAGE_CHARS` at
paragraph, then sentence, then word boundaries; each passage is a document of
its own in the keyword index (so a long message is not scored against its
whole length), and recall renders the passage that matched, marked as an
excerpt, instead of the whole message. A shorter message is one passage.

A passage's document id packs its message's seq and its number:
``seq << PART_BITS | part``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from .lexical import LexicalScores

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "LONG_MESSAGE_CHARS",
    "PART_BITS",
    "PASSAGE_CHARS",
    "best_message_scores",
    "best_of_each_message",
    "excerpt_text",
    "passage_id",
    "passage_spans",
]

# A message longer than this (about 300 tokens of English) is searched and shown by passages.
LONG_MESSAGE_CHARS = 1200
# The length passages aim at (about 150 tokens): a paragraph or a few sentences.
PASSAGE_CHARS = 600
PART_BITS = 8
_MAX_PARTS = (1 << PART_BITS) - 1
_ELLIPSIS = "…"

# Where a passage may end, best first: a blank line, a line break, a sentence end, a space.
_BREAKS = (
    re.compile(r"\n\s*\n"),
    re.compile(r"\n"),
    re.compile(r"(?<=[.!?;:])\s+|(?<=[。！？；])"),
    re.compile(r"\s+"),
)


def passage_id(seq: int, part: int) -> int:
    return seq << PART_BITS | part


def passage_spans(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each passage of `text` (one span for a text that is not long).

    Passages cover the text in order, without gaps; each ends at the best
    boundary between half and one and a half times the target length, so no
    passage is longer than 1.5 x the target (an unbroken run of characters is
    cut at the target). A text of more than 255 targets gets longer passages.
    """
    if len(text) <= LONG_MESSAGE_CHARS:
        return [(0, len(text))]
    target = max(PASSAGE_CHARS, -(-len(text) // _MAX_PARTS))
    spans = []
    start = 0
    while len(text) - start > target * 3 // 2:
        spans.append((start, _cut(text, start, target)))
        start = spans[-1][1]
    spans.append((start, len(text)))
    return spans


def _cut(text: str, start: int, target: int) -> int:
    """Where the passage that opens at `start` ends: the boundary of the best kind between
    half and one and a half times `target`, the one nearest `target` of that kind."""
    low, high = start + target // 2, start + target * 3 // 2
    for pattern in _BREAKS:
        ends = [match.end() for match in pattern.finditer(text, low, high)]
        if ends:
            return min(ends, key=lambda end: abs(end - start - target))
    return start + target


def excerpt_text(text: str, span: tuple[int, int]) -> str:
    """The passage of `text` at `span`, stripped, with an ellipsis where it was cut off."""
    start, end = span
    body = text[start:end].strip()
    before = _ELLIPSIS if start > 0 else ""
    after = _ELLIPSIS if end < len(text.rstrip()) else ""
    return f"{before}{body}{after}"


def best_of_each_message(
    scores: LexicalScores, passages: Mapping[int, Sequence[tuple[int, int]]] | None
) -> tuple[LexicalScores, dict[int, int]]:
    """Passage scores as message scores (each message's best passage), and the best
    passage of each long message that matched (`passages` None: of every message that
    matched, for scores of several sessions whose long messages the caller sorts out)."""
    if not len(scores):
        return scores, {}
    seqs = scores.ids >> PART_BITS
    if passages is not None and not passages:  # every message is one passage: one id per message
        return LexicalScores(seqs, scores.scores), {}
    seqs, ids, values, first = _best_first(scores)
    best_parts = ids[first] & ((1 << PART_BITS) - 1)
    parts = {
        seq: part
        for seq, part in zip(seqs[first].tolist(), best_parts.tolist(), strict=True)
        if passages is None or seq in passages
    }
    return LexicalScores(seqs[first], values[first]), parts


def best_message_scores(scores: LexicalScores) -> LexicalScores:
    """Passage scores as message scores (each message's best passage), without which
    passage that was (`best_of_each_message`)."""
    if not len(scores):
        return scores
    seqs, _, values, first = _best_first(scores)
    return LexicalScores(seqs[first], values[first])


def _best_first(scores: LexicalScores) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The passages' message keys, ids and scores, best first within each message, and
    where each message's rows start."""
    import numpy as np  # loaded with the first search, not with the stores that split passages

    seqs = scores.ids >> PART_BITS
    order = np.lexsort((-scores.scores, seqs))
    seqs, ids, values = seqs[order], scores.ids[order], scores.scores[order]
    first = np.flatnonzero(np.concatenate(([True], seqs[1:] != seqs[:-1])))
    return seqs, ids, values, first
