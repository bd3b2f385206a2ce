"""The unit rows and messages a search of a kept history reads are kept between searches:
read once per version of the history, never served under another, and bounded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from convmem import Message
from convmem._recall.index_rows import KEY_SHIFT
from convmem._recall.kept_rows import Fetched, RowCache


def _row(key: int, exchange: int | None = None, last: int | None = None) -> tuple[Any, ...]:
    seq = key & ((1 << KEY_SHIFT) - 1)
    exchange = seq if exchange is None else exchange
    return (key, 0.0, 0, exchange, 0, True, None, True, False, seq if last is None else last)


class CountingTables:
    """Unit rows of one history: an exchange of seqs 1-3 in slot 1, single messages after."""

    def __init__(self) -> None:
        slot = 1 << KEY_SHIFT
        self.rows = {slot | 1: _row(slot | 1, 1, 3), slot | 2: _row(slot | 2, 1), slot | 3: _row(slot | 3, 1)}
        self.rows.update({slot | seq: _row(slot | seq) for seq in range(4, 40)})
        self.unit_reads: list[tuple[list[int], list[int]]] = []
        self.message_reads: list[list[int]] = []

    def units(self, history: int, keys: Sequence[int], exchanges: Sequence[int]) -> list[tuple[Any, ...]]:
        self.unit_reads.append((list(keys), list(exchanges)))
        found = [self.rows[key] for key in keys if key in self.rows]
        for head in exchanges:
            row = self.rows[head]
            found.extend(self.rows[k] for k in range(head, head + row[9] - row[3] + 1) if k in self.rows)
        return found

    def messages(self, history: int, keys: Sequence[int]) -> dict[int, Message]:
        self.message_reads.append(list(keys))
        return {key: Message.create("user", f"message {key & 0xFFFF}") for key in keys}


SLOT = 1 << KEY_SHIFT


def _keys(rows: Sequence[tuple[Any, ...]]) -> list[int]:
    return sorted(int(row[0]) for row in rows)


def test_rows_read_once_are_served_again_without_a_read() -> None:
    tables, cache = CountingTables(), RowCache()
    first = cache.units(tables, "v1", 7, [SLOT | 5, SLOT | 6], [SLOT | 1])  # type: ignore[arg-type]
    again = cache.units(tables, "v1", 7, [SLOT | 6, SLOT | 5], [SLOT | 1])  # type: ignore[arg-type]
    assert _keys(first) == _keys(again) == [SLOT | 1, SLOT | 2, SLOT | 3, SLOT | 5, SLOT | 6]
    assert len(tables.unit_reads) == 1


def test_only_what_is_not_kept_is_read() -> None:
    tables, cache = CountingTables(), RowCache()
    cache.units(tables, "v1", 7, [SLOT | 5], [])  # type: ignore[arg-type]
    found = cache.units(tables, "v1", 7, [SLOT | 5, SLOT | 8], [])  # type: ignore[arg-type]
    assert _keys(found) == [SLOT | 5, SLOT | 8]
    assert tables.unit_reads[-1] == ([SLOT | 8], [])


def test_rows_kept_under_one_version_of_the_history_are_not_served_under_another() -> None:
    tables, cache = CountingTables(), RowCache()
    cache.units(tables, "v1", 7, [SLOT | 5], [])  # type: ignore[arg-type]
    cache.units(tables, "v2", 7, [SLOT | 5], [])  # type: ignore[arg-type]
    assert len(tables.unit_reads) == 2


def _kept_rows(cache: RowCache) -> int:
    return sum(kept.size() for kept in cache._rows.values())


def _kept_messages(cache: RowCache) -> int:
    return sum(len(found) for found in cache._messages.values())


def test_kept_rows_and_messages_stay_within_their_bounds() -> None:
    tables, cache = CountingTables(), RowCache(rows_kept=4, messages_kept=3)
    for seq in range(4, 40):
        cache.units(tables, "v1", 7, [SLOT | seq], [])  # type: ignore[arg-type]
        assert _kept_rows(cache) <= 4
    for seq in range(4, 40):
        cache.units(tables, f"v{seq}", 7, [SLOT | seq], [])  # type: ignore[arg-type]
        assert _kept_rows(cache) <= 4
    for seq in range(4, 40):
        Fetched(tables, 7, {SLOT | seq: SLOT | seq}, cache, f"logs-{seq % 5}").prefetch([SLOT | seq])  # type: ignore[arg-type]
        assert _kept_messages(cache) <= 3
    Fetched(tables, 7, {SLOT | s: SLOT | s for s in range(4, 40)}, cache, "logs").prefetch(  # type: ignore[arg-type]
        [SLOT | s for s in range(4, 40)]
    )
    assert _kept_messages(cache) <= 3 and len(cache) <= 4 + 3


def test_the_most_recently_read_rows_are_kept() -> None:
    tables, cache = CountingTables(), RowCache(rows_kept=4)
    for seq in range(4, 40):
        cache.units(tables, "v1", 7, [SLOT | seq], [])  # type: ignore[arg-type]
    cache.units(tables, "v1", 7, [], [SLOT | 1])  # type: ignore[arg-type]
    reads = len(tables.unit_reads)
    assert _keys(cache.units(tables, "v1", 7, [SLOT | 2, SLOT | 3], [SLOT | 1])) == [
        SLOT | 1,
        SLOT | 2,
        SLOT | 3,
    ]  # type: ignore[arg-type]
    assert len(tables.unit_reads) == reads


def test_messages_are_read_once_per_version_of_the_logs() -> None:
    tables, cache = CountingTables(), RowCache()
    keys = {SLOT | 5: SLOT | 5, SLOT | 6: SLOT | 6}
    for version in ("logs-1", "logs-1", "logs-2"):
        fetched = Fetched(tables, 7, keys, cache, version)  # type: ignore[arg-type]
        fetched.prefetch(list(keys))
        assert fetched[SLOT | 5].text == "message 5"
    assert len(tables.message_reads) == 2


def test_without_a_version_of_the_logs_messages_are_read_every_time() -> None:
    tables, cache = CountingTables(), RowCache()
    keys = {SLOT | 5: SLOT | 5}
    for _ in range(2):
        Fetched(tables, 7, keys, cache, None).prefetch(list(keys))  # type: ignore[arg-type]
    assert len(tables.message_reads) == 2 and len(cache) == 0


def test_a_new_version_of_a_history_drops_what_was_kept_of_its_older_ones() -> None:
    tables, cache = CountingTables(), RowCache()
    other = ("store", 8, "a")  # another history of the same store: kept
    cache.units(tables, other, 8, [SLOT | 5], [])  # type: ignore[arg-type]
    cache.units(tables, ("store", 7, "a"), 7, [SLOT | 5, SLOT | 6], [])  # type: ignore[arg-type]
    Fetched(tables, 7, {SLOT | 5: SLOT | 5}, cache, ("store", 7, "a", "logs-1")).prefetch([SLOT | 5])  # type: ignore[arg-type]
    Fetched(tables, 8, {SLOT | 5: SLOT | 5}, cache, ("store", 8, "a", "logs-1")).prefetch([SLOT | 5])  # type: ignore[arg-type]
    assert _kept_rows(cache) == 3 and _kept_messages(cache) == 2
    # History 7 changes: its rows and messages of the old version are never asked again.
    cache.units(tables, ("store", 7, "b"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    Fetched(tables, 7, {SLOT | 5: SLOT | 5}, cache, ("store", 7, "b", "logs-2")).prefetch([SLOT | 5])  # type: ignore[arg-type]
    assert set(cache._rows) == {other, ("store", 7, "b")}
    assert set(cache._messages) == {("store", 8, "a", "logs-1"), ("store", 7, "b", "logs-2")}
    assert _kept_rows(cache) == 2 and _kept_messages(cache) == 2
    reads = len(tables.unit_reads)
    cache.units(tables, other, 8, [SLOT | 5], [])  # type: ignore[arg-type]
    assert len(tables.unit_reads) == reads  # the other history's rows were kept
