"""The unit rows and messages a search of a kept history reads are kept between searches:
read once per version of the history, never served under another, and bounded."""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Sequence
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
    return sum(len(kept) for kept in cache._rows.by_version.values())


def _kept_messages(cache: RowCache) -> int:
    return sum(len(found) for found in cache._messages.by_version.values())


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
    assert set(cache._rows.by_version) == {other, ("store", 7, "b")}
    assert set(cache._messages.by_version) == {("store", 8, "a", "logs-1"), ("store", 7, "b", "logs-2")}
    assert _kept_rows(cache) == 2 and _kept_messages(cache) == 2
    reads = len(tables.unit_reads)
    cache.units(tables, other, 8, [SLOT | 5], [])  # type: ignore[arg-type]
    assert len(tables.unit_reads) == reads  # the other history's rows were kept


class _CountedStoreKey:
    """A store key that counts how often it is compared with another key."""

    comparisons = 0

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        _CountedStoreKey.comparisons += 1
        return isinstance(other, _CountedStoreKey) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_a_new_version_of_one_history_is_not_compared_with_other_histories() -> None:
    tables, cache = CountingTables(), RowCache()
    stores = [_CountedStoreKey(f"store-{n}") for n in range(500)]
    for number, store in enumerate(stores):
        cache.units(tables, (store, number, "a"), number, [SLOT | 5], [])  # type: ignore[arg-type]
        cache.keep_messages((store, number, "a", "logs"), {SLOT | 5: Message.create("user", "hi")})
    _CountedStoreKey.comparisons = 0
    cache.units(tables, (stores[7], 7, "b"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    cache.keep_messages((stores[7], 7, "b", "logs"), {SLOT | 5: Message.create("user", "hi")})
    assert _CountedStoreKey.comparisons <= 1  # not one per history kept
    assert len(cache._rows) == len(cache._messages) == 500  # its older version went


def _python_calls(action: Callable[[], object]) -> int:
    """How many Python functions (and generator steps) `action` runs."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event == "call"

    sys.setprofile(count)
    try:
        action()
    finally:
        sys.setprofile(None)
    return calls


def _full_of_histories(histories: int) -> tuple[CountingTables, RowCache]:
    """A cache holding one row and one message of each of `histories`, full."""
    tables, cache = CountingTables(), RowCache(rows_kept=histories, messages_kept=histories)
    for number in range(histories):
        cache.units(tables, ("store", number, "a"), number, [SLOT | 5], [])  # type: ignore[arg-type]
        cache.keep_messages(("store", number, "a", "logs"), {SLOT | 5: Message.create("user", "hi")})
    assert len(cache) == 2 * histories
    return tables, cache


def test_making_room_for_rows_costs_the_same_however_many_versions_are_kept() -> None:
    costs = []
    for histories in (50, 2000):
        tables, cache = _full_of_histories(histories)
        new = ("store", -1, "a")
        costs.append(_python_calls(lambda: cache.units(tables, new, 1, [SLOT | 5], [])))  # type: ignore[arg-type]  # noqa: B023
        assert len(cache._rows) == histories  # the least recently used went
    assert costs[0] == costs[1]


def test_making_room_for_messages_costs_the_same_however_many_versions_are_kept() -> None:
    costs = []
    for histories in (50, 2000):
        _, cache = _full_of_histories(histories)
        message = {SLOT | 5: Message.create("user", "hi")}
        costs.append(_python_calls(lambda: cache.keep_messages(("store", -1, "a", "logs"), message)))  # noqa: B023
        assert len(cache._messages) == histories
    assert costs[0] == costs[1]


def test_the_least_recently_used_version_goes_first() -> None:
    tables, cache = CountingTables(), RowCache(rows_kept=3)
    for name in ("a", "b", "c"):
        cache.units(tables, ("store", ord(name), "v1"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    cache.units(tables, ("store", ord("a"), "v1"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    cache.units(tables, ("store", ord("d"), "v1"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    reads = len(tables.unit_reads)
    for name in ("a", "c", "d"):
        cache.units(tables, ("store", ord(name), "v1"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    assert len(tables.unit_reads) == reads  # kept
    cache.units(tables, ("store", ord("b"), "v1"), 7, [SLOT | 5], [])  # type: ignore[arg-type]
    assert len(tables.unit_reads) == reads + 1  # went first


def test_what_is_counted_as_kept_is_what_is_kept_after_many_changes() -> None:
    tables, cache = CountingTables(), RowCache(rows_kept=50, messages_kept=20)
    chosen = random.Random(7)
    for _ in range(3000):
        number, version = chosen.randrange(12), chosen.choice("abc")
        keys = [SLOT | seq for seq in chosen.sample(range(4, 40), chosen.randrange(1, 8))]
        heads = [SLOT | 1] if chosen.random() < 0.3 else []
        cache.units(tables, ("store", number, version), number, keys, heads)  # type: ignore[arg-type]
        messages = {key: Message.create("user", "hi") for key in keys}
        cache.keep_messages(("store", number, version, chosen.choice("xy")), messages)
        assert len(cache) == _kept_rows(cache) + _kept_messages(cache)
        assert _kept_rows(cache) <= 50 and _kept_messages(cache) <= 20
