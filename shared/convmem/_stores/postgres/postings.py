"""How recall's keyword index is laid out in PostgreSQL rows: the posting blocks of
``lexical_postings`` (`encode_postings`), the terms and repeats of a ``lexical_docs`` row
(`document_terms`), and the lexeme that marks one index's documents (`lexical_tag`).

`convmem._stores.postgres.lexical_queries` reads and writes these rows;
`convmem._stores.postgres.lexical` ranks with them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Sequence

# The lexeme every document of one (session, kind) holds besides its terms: until migration 7
# it let the GIN index on terms find one session's matches; searches read lexical_postings
# since migration 7, and rows keep the lexeme so that rows of every version look alike. A space
# never occurs in a term; `lexical_tag` is the same in Python. Only migration 6 computes it in SQL.
_LEXICAL_TAG_SQL = "' ' || md5(kind || ' ' || session_id)"


# Marks a term a document holds more than once: "term" + REPEATED is then one of its lexemes,
# and its count is in the document's repeats.
REPEATED = "\x1e"
# Separates the terms of a document as written (``docs``' terms) and the entries of its repeats.
SEPARATOR = "\x1f"


# Documents per row of lexical_postings: a search reads a term's rows, a write rewrites the rows
# of the blocks its documents fall in.
POSTINGS_BLOCK_BITS = 8


@dataclasses.dataclass(frozen=True)
class LexicalMatches:
    """What `_Queries.lexical_matches` read: the index's number of documents and their total
    length, and for each query term found, its posting blocks (see `encode_postings`)."""

    documents: int
    total_length: int
    postings: dict[str, list[bytes]]


def encode_postings(entries: Sequence[tuple[int, int, int]]) -> bytes:
    """(doc id, term count, document length) entries, by doc id, as one ``bytea``: the ids as
    big-endian int64, then the counts, then the lengths, as big-endian int32 (what SQL's
    ``int8send`` and ``int4send`` make, which migration 7 uses)."""
    size = len(entries)
    ids, counts, lengths = zip(*entries, strict=True) if entries else ((), (), ())
    return struct.pack(f">{size}q{size}i{size}i", *ids, *counts, *lengths)


def decode_postings(blob: bytes) -> list[tuple[int, int, int]]:
    """The entries `encode_postings` made `blob` of."""
    size = len(blob) // 16
    values = struct.unpack(f">{size}q{size}i{size}i", blob)
    return list(zip(values[:size], values[size : 2 * size], values[2 * size :], strict=True))


def document_terms(lexemes: Sequence[str], repeats: str | None) -> dict[str, int]:
    """A document's terms and how often it holds each, from its lexemes (the index's own and
    the marks of repeated terms left out) and its repeats ("term\\x1ecount\\x1f...")."""
    counts = {term: 1 for term in lexemes if not term.startswith(" ") and REPEATED not in term}
    for entry in (repeats or "").split(SEPARATOR):
        term, mark, count = entry.partition(REPEATED)
        if mark and term in counts:
            counts[term] = int(count)
    return counts


def _index_lock(schema: str, session_id: str, kind: str) -> int:
    """The advisory lock key the writers of one keyword index take turns on."""
    digest = hashlib.blake2b(f"{schema}\x00{kind}\x00{session_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def lexical_tag(session_id: str, kind: str) -> str:
    """The lexeme that marks the documents of `session_id`'s index of `kind` (see ``_LEXICAL_TAG_SQL``)."""
    return " " + hashlib.md5(f"{kind} {session_id}".encode(), usedforsecurity=False).hexdigest()
