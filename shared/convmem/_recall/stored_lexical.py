"""The write buffer of a lexical index a store keeps (`StoredLexicalIndex`): what recall
adds, removes and clears is written in one batch, checked against the log's generation.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping

__all__ = ["BufferedLexicalIndex", "document_digest", "replaces"]

logger = logging.getLogger("convmem")

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
