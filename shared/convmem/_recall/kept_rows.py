"""What a search of a history kept by a store shows, read from the store when rendering
asks for it: the candidates' messages (`Fetched`, the best read first, in batches), their
lines and excerpts, and the rendered lines kept across searches (`KeptLines`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import Protocol

from .._models import Message
from .index_rows import HistoryTables
from .passages import passage_spans
from .render import CachedLine, LineKey

__all__ = ["Excerpts", "Fetched", "KeptLines", "LineStore", "Lines"]


class LineStore(Protocol):
    """Where rendered lines are kept across searches (`KeptHistories`)."""

    def line(self, key: tuple[object, ...]) -> CachedLine | None: ...

    def keep_line(self, key: tuple[object, ...], line: CachedLine) -> None: ...


# Messages read at once while rendering: the best candidates are read before the first line.
_FETCH_AHEAD = 64


class Fetched(Mapping[int, Message]):
    """The messages of a search, by shown key, read from the store as rendering asks for
    them: the best candidates first in one read, the rest a batch at a time."""

    def __init__(self, tables: HistoryTables, number: int | None, stable_of: Mapping[int, int]) -> None:
        self.tables = tables
        self.number = number
        self.stable_of = stable_of
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
        for key, message in self.tables.messages(self.number, list(stable)).items():
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
