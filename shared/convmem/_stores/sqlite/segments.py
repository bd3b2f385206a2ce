"""Recall's postings in a SQLite file, kept in segments written whole.

Each write of a session's new messages adds one *segment* to its owner's history: a
row per term, ``(history, segment, term) -> postings``, the term's documents in that
write, packed. The rows of one write are neighbours in the table whatever the size of
the history, so a write touches about as many pages at a user's 400th session as at
the first. (Postings kept term by term put each new row beside its term's older rows,
on pages all over the table: the more sessions a user had, the more pages each write
touched.)

Segments are merged `FANOUT` at a time into one of the next level, so a history of N
writes has fewer than `FANOUT` segments per level and about log(N) / log(FANOUT)
levels; a search reads its terms' rows from each of them. A merge only joins packed
rows, and rewrites each posting once per level. A segment of `SEALED` entries or more
is merged no further: a merge joins at most `FANOUT` segments below that size, so no
write waits on one much longer than tens of milliseconds, however long the history;
a history of N entries has about N / `SEALED` / `FANOUT` sealed segments or fewer.

A term's packed postings: a little-endian int64, how many of the entries are passages;
then the entries, passages first and exchanges after, each `ENTRY_FIELDS` (key, count,
length). An exchange that gains messages after it was written (the answer comes in a
later write than the question) gets entries in the new segment for the terms it
gained, whose counts add to the earlier ones, and its new length in that segment's
row of the term ``""`` (no term is empty). Exchanges only grow, so an exchange's
length is the largest found for it.

Rows are read ``CAST(postings AS BLOB)``: a value of another type written from outside is
then told damaged by its size instead of being refused by the driver's decoding. The
tables are made with the others (`convmem._stores.sqlite.lexical`). Each
segment's row in ``recall_segments`` lists the slots it holds rows of, so that
deleting a session rewrites only the segments that hold it.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ..._recall.index_rows import EXCHANGE_KIND, KEY_SHIFT, PASSAGE_KIND, PostingColumns
from .connection import in_lists

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "ENTRY_SIZE",
    "FANOUT",
    "LENGTHS",
    "SEALED",
    "DamagedPostings",
    "drop_slots",
    "read_postings",
    "write_segment",
]

ENTRY_FIELDS = (("key", "<i8"), ("count", "<i4"), ("length", "<i4"))
ENTRY_SIZE = 16
"""Bytes of one entry (numpy is imported by recall's first write or search, not with the store)."""
FANOUT = 8
SEALED = 16384
LENGTHS = ""
"""The term whose row holds the new lengths of the exchanges that grew in the segment."""
_HEADER = 8
_IN_CHUNK = 400


@functools.cache
def _entry() -> np.dtype[Any]:
    import numpy as np

    return np.dtype(list(ENTRY_FIELDS))


def _pack(entries: Sequence[tuple[int, int, int]]) -> bytes:
    """(key, count, length) entries as packed bytes, without a header."""
    import numpy as np

    return np.array(entries, dtype=_entry()).tobytes()


def _row(passages: int, entries: bytes) -> bytes:
    """A packed row: its count of passages, then its entries (passages first)."""
    return passages.to_bytes(_HEADER, "little") + entries


class DamagedPostings(ValueError):
    """A packed row that no write could have made (its size, or its count of passages)."""


def _head(blob: bytes) -> int:
    """How many entries of a packed row are passages (checked against its size)."""
    if not isinstance(blob, bytes):
        raise DamagedPostings(f"a packed row of type {type(blob).__name__}, not bytes")
    head = int.from_bytes(blob[:_HEADER], "little")
    size, odd = divmod(len(blob) - _HEADER, ENTRY_SIZE)
    if odd or size < 1 or head > size:
        raise DamagedPostings(f"a packed row of {len(blob)} bytes says {head} passages")
    return head


def _split(blob: bytes) -> tuple[int, np.ndarray]:
    """(how many entries are passages, the entries) of a packed row."""
    import numpy as np

    return _head(blob), np.frombuffer(blob, dtype=_entry(), offset=_HEADER)


def _join(blobs: Sequence[bytes]) -> bytes:
    """One packed row holding the entries of `blobs` (rows of one term)."""
    if len(blobs) == 1:
        return blobs[0]
    passages, exchanges, count = [], [], 0
    for blob in blobs:
        head = _head(blob)
        cut = _HEADER + head * ENTRY_SIZE
        passages.append(blob[_HEADER:cut])
        exchanges.append(blob[cut:])
        count += head
    return _row(count, b"".join(passages) + b"".join(exchanges))


def _slots_text(slots: Iterable[int]) -> str:
    return ",".join(str(slot) for slot in sorted(set(slots)))


def _slots_of(text: str) -> set[int]:
    return {int(part) for part in text.split(",") if part}


# -- writing ----------------------------------------------------------------------------


def write_segment(
    conn: sqlite3.Connection,
    history: int,
    slots: Collection[int],
    passages: Iterable[tuple[int, dict[str, int], int]],
    exchanges: Iterable[tuple[int, dict[str, int], int, bool]],
) -> None:
    """Add the postings of one write (keys already in `slots`: one session's, or several
    written together) as a new segment, then merge full levels."""
    by_term: dict[str, tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]] = {}
    for key, counts, length in passages:
        for term, count in counts.items():
            by_term.setdefault(term, ([], []))[0].append((key, count, length))
    grown: list[tuple[int, int, int]] = []
    for key, counts, length, new in exchanges:
        for term, count in counts.items():
            by_term.setdefault(term, ([], []))[1].append((key, count, length))
        if not new:
            grown.append((key, 0, length))
    if grown:
        by_term.setdefault(LENGTHS, ([], []))[1].extend(grown)
    if not by_term:
        return
    segment = _next_segment(conn, history)
    terms = sorted(by_term.items())
    packed = _pack([entry for _, (p, x) in terms for entry in (*p, *x)])
    conn.execute(
        "INSERT INTO recall_segments (history, segment, level, entries, slots) VALUES (?, ?, 0, ?, ?)",
        (history, segment, len(packed) // ENTRY_SIZE, _slots_text(slots)),
    )
    rows, at = [], 0
    for term, (p, x) in terms:  # each term's entries, cut from the one array of them all
        end = at + (len(p) + len(x)) * ENTRY_SIZE
        rows.append((history, segment, term, _row(len(p), packed[at:end])))
        at = end
    conn.executemany(
        "INSERT INTO recall_segment_terms (history, segment, term, postings) VALUES (?, ?, ?, ?)", rows
    )
    _merge_full_levels(conn, history)


def _next_segment(conn: sqlite3.Connection, history: int) -> int:
    (segment,) = conn.execute(
        "SELECT COALESCE(MAX(segment) + 1, 0) FROM recall_segments WHERE history = ?", (history,)
    ).fetchone()
    return int(segment)


def _merge_full_levels(conn: sqlite3.Connection, history: int) -> None:
    rows = conn.execute(
        "SELECT segment, level, entries, slots FROM recall_segments WHERE history = ? AND entries < ?",
        (history, SEALED),
    ).fetchall()
    by_level: dict[int, list[tuple[int, int, str]]] = {}
    for segment, level, entries, slots in rows:
        by_level.setdefault(int(level), []).append((int(segment), int(entries), slots))
    level = 0
    while len(by_level.get(level, ())) >= FANOUT:
        merged = _merge(conn, history, by_level.pop(level), level + 1)
        if merged[1] < SEALED:
            by_level.setdefault(level + 1, []).append(merged)
        level += 1


def _merge(
    conn: sqlite3.Connection, history: int, segments: Sequence[tuple[int, int, str]], level: int
) -> tuple[int, int, str]:
    numbers = [segment for segment, _, _ in segments]
    marks = ",".join("?" * len(numbers))
    by_term: dict[str, list[bytes]] = {}
    for term, blob in conn.execute(
        f"SELECT term, CAST(postings AS BLOB) FROM recall_segment_terms WHERE history = ? AND segment IN ({marks}) "
        "ORDER BY segment",
        (history, *numbers),
    ):
        by_term.setdefault(term, []).append(blob)
    segment = _next_segment(conn, history)
    entries = sum(count for _, count, _ in segments)
    slots = _slots_text(slot for _, _, text in segments for slot in _slots_of(text))
    conn.execute(
        f"DELETE FROM recall_segment_terms WHERE history = ? AND segment IN ({marks})", (history, *numbers)
    )
    conn.execute(
        f"DELETE FROM recall_segments WHERE history = ? AND segment IN ({marks})", (history, *numbers)
    )
    conn.execute(
        "INSERT INTO recall_segments (history, segment, level, entries, slots) VALUES (?, ?, ?, ?, ?)",
        (history, segment, level, entries, slots),
    )
    conn.executemany(
        "INSERT INTO recall_segment_terms (history, segment, term, postings) VALUES (?, ?, ?, ?)",
        [(history, segment, term, _join(blobs)) for term, blobs in sorted(by_term.items())],
    )
    return segment, entries, slots


def drop_slots(conn: sqlite3.Connection, history: int, slots: Collection[int]) -> None:
    """Delete the postings of `slots`: each segment that holds some is rewritten once
    without them (with ``secure_delete`` on, nothing of them is left in the file).
    Raises `DamagedPostings` for a damaged row met on the way."""
    import numpy as np

    gone = np.array(sorted(slots), dtype=np.int64)
    for segment, text in conn.execute(
        "SELECT segment, slots FROM recall_segments WHERE history = ?", (history,)
    ).fetchall():
        held = _slots_of(text)
        if held.isdisjoint(slots):
            continue
        held.difference_update(slots)
        if not held:
            conn.execute(
                "DELETE FROM recall_segment_terms WHERE history = ? AND segment = ?", (history, segment)
            )
            conn.execute("DELETE FROM recall_segments WHERE history = ? AND segment = ?", (history, segment))
            continue
        rows = conn.execute(
            "SELECT term, CAST(postings AS BLOB) FROM recall_segment_terms WHERE history = ? AND segment = ?",
            (history, segment),
        ).fetchall()
        # The segment's rows read as one array, to find the few that hold the slots at once.
        heads = [_head(blob) for _, blob in rows]
        whole = np.frombuffer(b"".join(blob[_HEADER:] for _, blob in rows), dtype=_entry())
        sizes = np.array([(len(blob) - _HEADER) // ENTRY_SIZE for _, blob in rows], dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        hit = np.isin(whole["key"] >> KEY_SHIFT, gone)
        hits = np.add.reduceat(hit.astype(np.int64), starts) if rows else sizes  # no rows: none to rewrite
        kept, emptied = [], []
        for at in np.flatnonzero(hits).tolist():
            term, head = rows[at][0], heads[at]
            entries = whole[starts[at] : starts[at] + sizes[at]]
            other = ~hit[starts[at] : starts[at] + sizes[at]]
            if not other.any():
                emptied.append((history, segment, term))
                continue
            passages, exchanges = entries[:head][other[:head]], entries[head:][other[head:]]
            kept.append(
                (_row(len(passages), passages.tobytes() + exchanges.tobytes()), history, segment, term)
            )
        removed = int(hit.sum())
        conn.executemany(
            "DELETE FROM recall_segment_terms WHERE history = ? AND segment = ? AND term = ?", emptied
        )
        conn.executemany(
            "UPDATE recall_segment_terms SET postings = ? WHERE history = ? AND segment = ? AND term = ?",
            kept,
        )
        conn.execute(
            "UPDATE recall_segments SET slots = ?, entries = entries - ? WHERE history = ? AND segment = ?",
            (_slots_text(held), removed, history, segment),
        )


# -- reading ----------------------------------------------------------------------------


def read_postings(
    read: Callable[[str, Sequence[Any]], list[tuple[Any, ...]]], history: int, terms: Sequence[str]
) -> PostingColumns:
    """The postings of `terms` in the history: each document once (an exchange's counts
    summed over the segments that hold it, its length the newest), keys ascending."""
    import numpy as np

    rows: list[tuple[Any, ...]] = []
    asked = [LENGTHS, *dict.fromkeys(term for term in terms if term != LENGTHS)]
    for chunk, marks in in_lists(asked, _IN_CHUNK):
        rows.extend(
            read(
                # CROSS JOIN keeps this order: each segment, then its rows of each term.
                "SELECT t.term, CAST(t.postings AS BLOB) FROM recall_segments AS s "
                "CROSS JOIN recall_segment_terms AS t ON t.history = s.history AND t.segment = s.segment "
                f"AND t.term IN ({marks}) WHERE s.history = ?",
                (*chunk, history),
            )
        )
    by_term: dict[str, list[bytes]] = {}
    for term, blob in rows:
        by_term.setdefault(term, []).append(blob)
    lengths = by_term.pop(LENGTHS, None)
    grown = _summed(_split(_join(lengths))[1]) if lengths else None
    columns: dict[tuple[int, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for term, blobs in by_term.items():
        head, entries = _split(_join(blobs))
        passages, exchanges = entries[:head], entries[head:]
        if len(passages):  # one entry per passage
            if not _ascending(passages["key"]):  # joined from several writes
                passages = passages[np.argsort(passages["key"], kind="stable")]
            columns[PASSAGE_KIND, term] = (passages["key"], passages["count"], passages["length"])
        if len(exchanges):
            keys, counts, lengths_now = _summed(exchanges)
            if grown is not None:
                place = np.minimum(np.searchsorted(grown[0], keys), len(grown[0]) - 1)
                hit = grown[0][place] == keys
                lengths_now[hit] = np.maximum(lengths_now[hit], grown[2][place[hit]])
            columns[EXCHANGE_KIND, term] = (keys, counts, lengths_now)
    return PostingColumns(columns)


def _summed(entries: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Keys (ascending), summed counts and largest lengths of `entries` (an exchange's
    entries from several segments)."""
    import numpy as np

    keys = entries["key"]
    if _ascending(keys):
        return keys.copy(), entries["count"].astype(np.int64), entries["length"].astype(np.int64)
    keys, at = np.unique(keys, return_inverse=True)
    counts = np.bincount(at, weights=entries["count"], minlength=len(keys)).astype(np.int64)
    lengths = np.zeros(len(keys), dtype=np.int64)
    np.maximum.at(lengths, at, entries["length"])
    return keys, counts, lengths


def _ascending(keys: np.ndarray) -> bool:
    """Strictly ascending: each key once, in order."""
    return len(keys) < 2 or bool((keys[1:] > keys[:-1]).all())
