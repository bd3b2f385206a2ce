"""What a search of a history kept by a store shows, read from the store when rendering
asks for it: the candidates' messages (`Fetched`, the best read first, in batches), their
lines and excerpts, the rendered lines kept across searches (`KeptLines`), and the unit
rows and messages kept across searches while the history and its logs are unchanged
(`RowCache`)."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Any, Protocol

from .._models import Message
from .index_rows import HistoryTables
from .passages import passage_spans
from .render import CachedLine, LineKey

__all__ = ["Excerpts", "Fetched", "KeptLines", "LineStore", "Lines", "RowCache"]

# Unit rows kept across searches (small tuples, about 200 bytes each), and messages (up to
# a few kB of text each): a warm build reads neither again while its history is unchanged.
UNIT_ROWS_KEPT = 32768
MESSAGES_KEPT = 2048


class RowCache:
    """Unit rows and messages of kept histories, read once and kept (bounded, least
    recently used first out) under the version they were read at. Thread-safe.

    A unit row is kept under its history's version (`_Search.history`: any batch
    written, reset or dropped gives a new one), so rows are never served from an
    index that changed. A message is kept under that and the version of the logs
    searched (every session's generation, last seq, count and activity time, read
    with the build's stats): a status change, an edit, a deletion or a log started
    again gives a new one, so an edited or forgotten message is never served."""

    def __init__(self, *, rows_kept: int = UNIT_ROWS_KEPT, messages_kept: int = MESSAGES_KEPT) -> None:
        self.rows_kept = rows_kept
        self.messages_kept = messages_kept
        self._lock = threading.Lock()
        self._rows: OrderedDict[tuple[object, int], tuple[Any, ...]] = OrderedDict()
        # Exchange head -> the keys of its members, under the history's version.
        self._members: OrderedDict[tuple[object, int], tuple[int, ...]] = OrderedDict()
        self._messages: OrderedDict[tuple[object, int], Message] = OrderedDict()

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows) + len(self._members) + len(self._messages)

    def units(
        self, tables: HistoryTables, version: object, number: int, keys: Sequence[int], heads: Sequence[int]
    ) -> list[tuple[Any, ...]]:
        """`HistoryTables.units` of `keys` and of the exchanges opening at `heads`, reading
        only what is not kept for the history at `version`."""
        found: dict[int, tuple[Any, ...]] = {}
        missing_keys: list[int] = []
        missing_heads: list[int] = []
        with self._lock:
            for key in keys:
                row = self._rows.get((version, key))
                if row is None:
                    missing_keys.append(key)
                else:
                    self._rows.move_to_end((version, key))
                    found[key] = row
            for head in heads:
                members = self._members.get((version, head))
                rows = [self._rows.get((version, member)) for member in members or ()]
                if members is None or any(row is None for row in rows):
                    missing_heads.append(head)
                    continue
                self._members.move_to_end((version, head))
                for member, row in zip(members, rows, strict=True):
                    assert row is not None
                    self._rows.move_to_end((version, member))
                    found[member] = row
        if missing_keys or missing_heads:
            read = {int(row[0]): tuple(row) for row in tables.units(number, missing_keys, missing_heads)}
            found.update(read)
            ordered = sorted(read)
            with self._lock:
                for key, row in read.items():
                    self._rows[(version, key)] = row
                for head in missing_heads:
                    self._members[(version, head)] = _members(read, ordered, head)
                _trim(self._rows, self.rows_kept)
                _trim(self._members, self.rows_kept)
        return list(found.values())

    def messages(self, version: object, keys: Sequence[int]) -> dict[int, Message]:
        """The messages kept of `keys` at `version` (the others must be read)."""
        found: dict[int, Message] = {}
        with self._lock:
            for key in keys:
                message = self._messages.get((version, key))
                if message is not None:
                    self._messages.move_to_end((version, key))
                    found[key] = message
        return found

    def keep_messages(self, version: object, messages: Mapping[int, Message]) -> None:
        with self._lock:
            for key, message in messages.items():
                self._messages[(version, key)] = message
            _trim(self._messages, self.messages_kept)


def _members(rows: Mapping[int, tuple[Any, ...]], ordered: Sequence[int], head: int) -> tuple[int, ...]:
    """The keys of the exchange opening at `head` among `rows` (`ordered`: their keys,
    sorted), as `HistoryTables.units` reads them: from its first message's key to its
    last's, a session's keys being its slot's."""
    row = rows.get(head)
    if row is None:
        return ()
    last = head + int(row[9]) - int(row[3])
    return tuple(ordered[bisect.bisect_left(ordered, head) : bisect.bisect_right(ordered, last)])


def _trim(entries: OrderedDict[Any, Any], kept: int) -> None:
    while len(entries) > kept:
        entries.popitem(last=False)


class LineStore(Protocol):
    """Where rendered lines are kept across searches (`KeptHistories`)."""

    def line(self, key: tuple[object, ...]) -> CachedLine | None: ...

    def keep_line(self, key: tuple[object, ...], line: CachedLine) -> None: ...


# Messages read at once while rendering: the best candidates are read before the first line.
_FETCH_AHEAD = 64


class Fetched(Mapping[int, Message]):
    """The messages of a search, by shown key, read from the store as rendering asks for
    them: the best candidates first in one read, the rest a batch at a time."""

    def __init__(
        self,
        tables: HistoryTables,
        number: int | None,
        stable_of: Mapping[int, int],
        kept: RowCache | None = None,
        version: object = None,
    ) -> None:
        self.tables = tables
        self.number = number
        self.stable_of = stable_of
        self.kept = kept if version is not None else None
        self.version = version
        self.found: dict[int, Message] = {}
        self.tried: set[int] = set()
        self.order: list[int] = []

    def prefetch(self, shown: Sequence[int]) -> None:
        """Rendering will read these, best first: read the first of them now."""
        self.order = list(shown)
        self._read(self.order[:_FETCH_AHEAD])

    def _read(self, wanted: Sequence[int]) -> None:
        todo = [key for key in wanted if key not in self.tried and key in self.stable_of]
        if not todo or self.number is None:
            return
        self.tried.update(todo)
        stable = {self.stable_of[key]: key for key in todo}
        known = self.kept.messages(self.version, list(stable)) if self.kept is not None else {}
        missing = [key for key in stable if key not in known]
        read = self.tables.messages(self.number, missing) if missing else {}
        if self.kept is not None and read:
            self.kept.keep_messages(self.version, read)
        for key, message in (*known.items(), *read.items()):
            self.found[stable[key]] = message

    def __getitem__(self, key: int) -> Message:
        if key not in self.found and key not in self.tried:
            at = self.order.index(key) if key in self.order else len(self.order)
            self._read([key, *self.order[at : at + _FETCH_AHEAD]])
        return self.found[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self.stable_of)

    def __len__(self) -> int:
        return len(self.stable_of)


class Lines(Mapping[int, str]):
    """``Speaker: text`` of a shown key (for choosing the section's language)."""

    def __init__(self, fetched: Fetched) -> None:
        self.fetched = fetched

    def __getitem__(self, key: int) -> str:
        message = self.fetched[key]
        text = message.text.strip()
        return f"{message.name}: {text}" if message.name else text

    def __iter__(self) -> Iterator[int]:
        return iter(self.fetched)

    def __len__(self) -> int:
        return len(self.fetched)


class Excerpts(Mapping[int, tuple[int, int]]):
    """The span of the passage to show of each long candidate (computed when rendered)."""

    def __init__(self, fetched: Fetched, parts: Mapping[int, int]) -> None:
        self.fetched = fetched
        self.parts = parts

    def __getitem__(self, key: int) -> tuple[int, int]:
        spans = passage_spans(self.fetched[key].text.strip())
        return spans[min(self.parts[key], len(spans) - 1)]

    def __contains__(self, key: object) -> bool:
        return key in self.parts

    def __iter__(self) -> Iterator[int]:
        return iter(self.parts)

    def __len__(self) -> int:
        return len(self.parts)


class KeptLines(MutableMapping[LineKey, CachedLine]):
    """Rendering's line cache over `KeptHistories`' lines, under keys that do not change
    between searches (the history and the message's key: a session indexed afresh gets a
    new slot, so an edited message is never served an old line)."""

    def __init__(self, kept: LineStore, history: tuple[object, ...], stable_of: Mapping[int, int]) -> None:
        self.kept = kept
        self.history = history
        self.stable_of = stable_of

    def _key(self, key: LineKey) -> tuple[object, ...]:
        name, language, shown = key
        return (*self.history, self.stable_of[shown], name, language)

    def __getitem__(self, key: LineKey) -> CachedLine:
        found = self.kept.line(self._key(key))
        if found is None:
            raise KeyError(key)
        return found

    def __setitem__(self, key: LineKey, value: CachedLine) -> None:
        self.kept.keep_line(self._key(key), value)

    def __delitem__(self, key: LineKey) -> None:
        raise KeyError(key)

    def __iter__(self) -> Iterator[LineKey]:
        return iter(())

    def __len__(self) -> int:
        return 0
