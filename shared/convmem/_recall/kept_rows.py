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
from typing import Any, Generic, Protocol, TypeVar

from .._models import Message
from .index_rows import HistoryTables
from .passages import passage_spans
from .render import CachedLine, LineKey

__all__ = ["Excerpts", "Fetched", "KeptLines", "LineStore", "Lines", "RowCache"]

# Unit rows kept across searches (small tuples, about 200 bytes each), and messages (up to
# a few kB of text each): a warm build reads neither again while its history is unchanged.
# 200 different questions to a history of 50 long chats read about 750 rows: this keeps
# what twenty such users come back to.
UNIT_ROWS_KEPT = 16384
MESSAGES_KEPT = 2048


class _Kept:
    """What is kept of one version: unit rows by key, exchange members by head key."""

    __slots__ = ("members", "rows")

    def __init__(self) -> None:
        self.rows: dict[int, tuple[Any, ...]] = {}
        self.members: dict[int, tuple[int, ...]] = {}

    def __len__(self) -> int:
        return len(self.rows) + len(self.members)

    def clear(self) -> None:
        self.rows.clear()
        self.members.clear()


class _Emptiable(Protocol):
    def __len__(self) -> int: ...

    def clear(self) -> None: ...


_Value = TypeVar("_Value", bound=_Emptiable)


class _Versions(Generic[_Value]):
    """What is kept of each version, the most recently used last, with how much it all
    holds and which versions are kept of each history, so that neither a new version nor
    making room walks every version kept (a server keeps thousands, one per user).

    A version names a history by its first two items when it is a tuple of three or more;
    what is kept of a version is counted by its ``len``, kept up to date by `grow`.
    The owner's lock is held around every call."""

    __slots__ = ("_of_history", "by_version", "held")

    def __init__(self) -> None:
        self.by_version: OrderedDict[object, _Value] = OrderedDict()
        self.held = 0
        self._of_history: dict[tuple[object, ...], set[object]] = {}

    def __len__(self) -> int:
        return len(self.by_version)

    def get(self, version: object) -> _Value | None:
        return self.by_version.get(version)

    def use(self, version: object) -> None:
        self.by_version.move_to_end(version)

    def start(self, version: object, value: _Value) -> _Value:
        """Keep `value` for `version`, the most recently used, and forget what is kept of
        the other versions of its history (no search asks for them again)."""
        if isinstance(version, tuple) and len(version) >= 3:
            for old in [v for v in self._of_history.get(version[:2], ()) if v != version]:
                self._forget(old, self.by_version.pop(old))
        self.by_version[version] = value
        self.held += len(value)
        history = _history_of(version)
        if history is not None:
            self._of_history.setdefault(history, set()).add(version)
        return value

    def grow(self, value: _Value, held_before: int) -> None:
        """`value` was added to; it held `held_before`."""
        self.held += len(value) - held_before

    def make_room(self, value: _Value, adding: int, bound: int) -> None:
        """Forget the least recently used versions until `adding` more fits in `bound`;
        reaching `value` (kept, about to be added to) empties it instead."""
        while self.held + adding > bound:
            oldest = next(iter(self.by_version.values()))
            if oldest is value:
                self.held -= len(value)
                value.clear()
                return
            version, oldest = self.by_version.popitem(last=False)
            self._forget(version, oldest)

    def _forget(self, version: object, value: _Value) -> None:
        """`version`, holding `value`, left `by_version`."""
        self.held -= len(value)
        history = _history_of(version)
        if history is not None:
            versions = self._of_history[history]
            versions.discard(version)
            if not versions:
                del self._of_history[history]


def _history_of(version: object) -> tuple[object, ...] | None:
    """The history a version of it is kept under: its first two items (a two-item tuple
    is its own), as a newer version of that history looks them up."""
    return version[:2] if isinstance(version, tuple) and len(version) >= 2 else None


class RowCache:
    """Unit rows and messages of kept histories, read once and kept (bounded, the least
    recently used version first out) under the version they were read at. Thread-safe.

    A unit row is kept under its history's version (`_Search.history`: any batch
    written, reset or dropped gives a new one), so rows are never served from an
    index that changed. A message is kept under that and the version of the logs
    searched (every session's generation, last seq, count and activity time, read
    with the build's stats): a status change, an edit, a deletion or a log started
    again gives a new one, so an edited or forgotten message is never served.

    A version is ``(store key, history number, ...)``: when one of a history is kept,
    what was kept of its older versions goes (no search asks for them again), so a
    server whose users write between builds does not keep their dead rows. Neither
    that nor keeping within the bounds looks at other histories' versions: a lookup
    costs the same with one user kept or thousands."""

    def __init__(self, *, rows_kept: int = UNIT_ROWS_KEPT, messages_kept: int = MESSAGES_KEPT) -> None:
        self.rows_kept = rows_kept
        self.messages_kept = messages_kept
        self._lock = threading.Lock()
        # By version, the most recently used last: a search looks up one version, so
        # recency is kept per version, not per row (a row's lookup is a plain dict get).
        self._rows: _Versions[_Kept] = _Versions()
        self._messages: _Versions[dict[int, Message]] = _Versions()

    def __len__(self) -> int:
        """Rows, exchanges and messages kept, all versions together."""
        with self._lock:
            return self._rows.held + self._messages.held

    def units(
        self, tables: HistoryTables, version: object, number: int, keys: Sequence[int], heads: Sequence[int]
    ) -> list[tuple[Any, ...]]:
        """`HistoryTables.units` of `keys` and of the exchanges opening at `heads`, reading
        only what is not kept for the history at `version`."""
        with self._lock:
            kept = self._rows.get(version)
            if kept is None:
                kept = self._rows.start(version, _Kept())
            else:
                self._rows.use(version)
            rows, members_of = kept.rows, kept.members
            found = {key: rows[key] for key in keys if key in rows}
            missing_keys = [key for key in keys if key not in rows]
            missing_heads = []
            for head in heads:
                members = members_of.get(head)
                if members is None or any(member not in rows for member in members):
                    missing_heads.append(head)
                else:
                    for member in members:
                        found[member] = rows[member]
        if not (missing_keys or missing_heads):
            return list(found.values())
        read = {int(row[0]): tuple(row) for row in tables.units(number, missing_keys, missing_heads)}
        found.update(read)
        ordered = sorted(read)
        added = {head: _members(read, ordered, head) for head in missing_heads}
        with self._lock:
            kept = self._rows.get(version)
            if kept is not None and len(read) + len(added) <= self.rows_kept:
                self._rows.make_room(kept, len(read) + len(added), self.rows_kept)
                held = len(kept)
                kept.rows.update(read)
                kept.members.update(added)
                self._rows.grow(kept, held)
        return list(found.values())

    def messages(self, version: object, keys: Sequence[int]) -> dict[int, Message]:
        """The messages kept of `keys` at `version` (the others must be read)."""
        with self._lock:
            kept = self._messages.get(version)
            if kept is None:
                return {}
            self._messages.use(version)
            return {key: kept[key] for key in keys if key in kept}

    def keep_messages(self, version: object, messages: Mapping[int, Message]) -> None:
        if len(messages) > self.messages_kept:
            return
        with self._lock:
            kept = self._messages.get(version)
            if kept is None:
                kept = self._messages.start(version, {})
            self._messages.use(version)
            self._messages.make_room(kept, len(messages), self.messages_kept)
            held = len(kept)
            kept.update(messages)
            self._messages.grow(kept, held)


def _members(rows: Mapping[int, tuple[Any, ...]], ordered: Sequence[int], head: int) -> tuple[int, ...]:
    """The keys of the exchange opening at `head` among `rows` (`ordered`: their keys,
    sorted), as `HistoryTables.units` reads them: from its first message's key to its
    last's, a session's keys being its slot's."""
    row = rows.get(head)
    if row is None:
        return ()
    last = head + int(row[9]) - int(row[3])
    return tuple(ordered[bisect.bisect_left(ordered, head) : bisect.bisect_right(ordered, last)])


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
        """These will be read, best first: read the first of them now."""
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
        self.spans: dict[int, tuple[int, int]] = {}

    def __getitem__(self, key: int) -> tuple[int, int]:
        span = self.spans.get(key)
        if span is None:
            part = self.parts[key]  # a message shown whole has none: not read, not split
            spans = passage_spans(self.fetched[key].text.strip())
            span = self.spans[key] = spans[min(part, len(spans) - 1)]
        return span

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
