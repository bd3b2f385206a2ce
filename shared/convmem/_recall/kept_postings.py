"""The postings of recent query terms, kept between searches of the histories stores keep.

A history's rows change only when a batch is written, so a long session's common terms
are read from the store once per batch, not once per search. Only the newest version
of each history's rows is kept: postings of an older version are never read again, and
a chat that goes on would otherwise fill the room with them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence

from .scoring import TermPostings

__all__ = ["POSTINGS_BYTES_KEPT", "PostingsCache"]

# Bytes of postings kept per Recall (per store): two million documents of a long history
# (24 bytes each in their arrays), or about 28,000 terms of small users' histories.
POSTINGS_BYTES_KEPT = 48_000_000

# What an entry costs beside its arrays' data, measured with tracemalloc (on CPython 3.11
# a term of a small history: 500 bytes kept with no postings, 1,100 with one kind and
# 1,570 with two; 3.10 costs a few percent more): its key and term, its dict and the
# cache's bookkeeping, and for each kind the TermPostings and its three array headers.
# Counting documents instead let a server of small users keep 20 times the room the
# bound meant.
_ENTRY_BYTES = 600
_KIND_BYTES = 600

_Key = tuple[object, ...]


class PostingsCache:
    """Postings by (store key, history, version of its rows, term), bounded in bytes
    (`POSTINGS_BYTES_KEPT`, 48 MB, by default), the least recently used first to go.
    Thread-safe.

    A term with no postings is kept too (as an empty dict, about 600 bytes), so a query
    word the history lacks is not looked for in the store again at every search."""

    def __init__(self, bytes_kept: int = POSTINGS_BYTES_KEPT) -> None:
        self.bytes_kept = bytes_kept
        self._lock = threading.Lock()
        self._postings: OrderedDict[_Key, dict[int, TermPostings]] = OrderedDict()
        self._bytes = 0
        # (store key, history) -> the version kept and the keys kept of it.
        self._versions: dict[_Key, tuple[object, set[_Key]]] = {}

    def __len__(self) -> int:
        """How many terms' postings are kept."""
        return len(self._postings)

    def kept(self) -> list[_Key]:
        """The keys kept, least recently used first."""
        with self._lock:
            return list(self._postings)

    def get(self, history: _Key, terms: Sequence[str]) -> dict[str, dict[int, TermPostings]]:
        """The postings (by kind) of those of `terms` kept for `history`, at its version."""
        found: dict[str, dict[int, TermPostings]] = {}
        with self._lock:
            for term in terms:
                key = (*history, term)
                entry = self._postings.get(key)
                if entry is not None:
                    self._postings.move_to_end(key)
                    found[term] = entry
        return found

    def put(self, history: _Key, postings: Mapping[str, dict[int, TermPostings]]) -> None:
        """Keep `postings` of `history` (store key, history number, version of its rows);
        those kept of an older version of the same history go."""
        which, version = history[:-1], history[-1]
        with self._lock:
            kept_version, keys = self._versions.get(which, (version, set()))
            if kept_version != version:
                for key in list(keys):
                    self._drop(key)
                keys = set()
            for term, by_kind in postings.items():
                size = _bytes_of(by_kind)
                if size > self.bytes_kept // 4:
                    continue  # a term of most documents: not worth a quarter of the room
                key = (*history, term)
                self._drop(key)
                self._postings[key] = by_kind
                self._bytes += size
                keys.add(key)
            if keys:
                self._versions[which] = (version, keys)
            while self._bytes > self.bytes_kept and self._postings:
                self._drop(next(iter(self._postings)))

    def _drop(self, key: _Key) -> None:
        """Forget the postings kept under `key`; the lock is held."""
        dropped = self._postings.pop(key, None)
        if dropped is None:
            return
        self._bytes -= _bytes_of(dropped)
        which = key[:-2]
        entry = self._versions.get(which)
        if entry is not None and entry[0] == key[-2]:
            entry[1].discard(key)
            if not entry[1]:
                del self._versions[which]


def _bytes_of(by_kind: Mapping[int, TermPostings]) -> int:
    """About what keeping `by_kind` costs, its arrays and the objects around them."""
    return _ENTRY_BYTES + sum(
        _KIND_BYTES + found.ids.nbytes + found.counts.nbytes + found.lengths.nbytes
        for found in by_kind.values()
    )
