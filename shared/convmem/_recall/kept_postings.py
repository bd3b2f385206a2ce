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

__all__ = ["POSTINGS_KEPT", "PostingsCache"]

# Postings kept (per Recall), in documents: about 24 bytes each.
POSTINGS_KEPT = 2_000_000

_Key = tuple[object, ...]


class PostingsCache:
    """Postings by (store key, history, version of its rows, term), bounded in documents,
    the least recently used first to go. Thread-safe."""

    def __init__(self, documents: int = POSTINGS_KEPT) -> None:
        self.documents = documents
        self._lock = threading.Lock()
        self._postings: OrderedDict[_Key, dict[int, TermPostings]] = OrderedDict()
        self._size = 0
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
                size = 1 + sum(len(p.ids) for p in by_kind.values())
                if size > self.documents // 4:
                    continue  # a term of most documents: not worth a quarter of the room
                key = (*history, term)
                self._drop(key)
                self._postings[key] = by_kind
                self._size += size
                keys.add(key)
            if keys:
                self._versions[which] = (version, keys)
            while self._size > self.documents and self._postings:
                self._drop(next(iter(self._postings)))

    def _drop(self, key: _Key) -> None:
        """Forget the postings kept under `key`; the lock is held."""
        dropped = self._postings.pop(key, None)
        if dropped is None:
            return
        self._size -= 1 + sum(len(p.ids) for p in dropped.values())
        which = key[:-2]
        entry = self._versions.get(which)
        if entry is not None and entry[0] == key[-2]:
            entry[1].discard(key)
            if not entry[1]:
                del self._versions[which]
