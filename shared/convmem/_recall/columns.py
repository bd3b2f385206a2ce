"""What ranking reads of a session's log: unit ids and columns.

A *unit* is what gets a vector: a message (its id is its seq), or an exchange,
a user message with what follows it (its id packs its first seq and its
length, so an exchange that grows gets a new id: HNSW cannot overwrite a
vector in place). `LogColumns` holds what ranking reads of each mirrored
message as numpy arrays in log order.
"""

from __future__ import annotations

import numpy as np

from .config import RecallConfig

__all__ = [
    "EXCHANGE_SEQ_MASK",
    "LogColumns",
    "exchange_first_seq",
    "exchange_unit_id",
    "is_exchange_unit",
    "items_are_single_messages",
]

_EXCHANGE_FLAG = 1 << 62
_SEQ_BITS = 40
_MAX_SPAN = 255


def exchange_unit_id(first_seq: int, span: int) -> int:
    return _EXCHANGE_FLAG | (min(span, _MAX_SPAN) << _SEQ_BITS) | first_seq


def is_exchange_unit(unit_id: int) -> bool:
    return bool(unit_id & _EXCHANGE_FLAG)


# The bits of an exchange unit's id that hold its first seq.
EXCHANGE_SEQ_MASK = (1 << _SEQ_BITS) - 1


def exchange_first_seq(unit_id: int) -> int:
    return unit_id & EXCHANGE_SEQ_MASK


def items_are_single_messages(config: RecallConfig) -> bool:
    """Whether a recalled item is its message alone: not its exchange, no neighbours."""
    return config.granularity != "exchange" and not config.neighbour_radius


class LogColumns:
    """What ranking reads of each mirrored message, as numpy arrays in log order (by
    position in `SessionMirror.order`).

    A search reads hundreds of candidates at once: looking each up in dicts of
    `Message` objects costs more than ranking them. Messages are only ever appended,
    and an exchange's messages are consecutive, so its members are a range.
    """

    _COLUMNS = (
        ("seq", np.int64),
        ("timestamp", np.float64),
        ("episode", np.int64),
        ("exchange", np.int64),  # the first seq of the message's exchange
        ("members", np.int64),  # at an exchange's first message: how many messages it has
        ("candidate", np.bool_),  # recallable on its own: not small talk
    )

    def __init__(self) -> None:
        self.size = 0
        self._arrays: dict[str, np.ndarray] = {}
        self.clear()

    def clear(self) -> None:
        self.size = 0
        self._arrays = {name: np.zeros(0, dtype=dtype) for name, dtype in self._COLUMNS}

    def column(self, name: str) -> np.ndarray:
        return self._arrays[name][: self.size]

    def append(
        self, seq: int, timestamp: float, episode: int, exchange: int, exchange_at: int, candidate: bool
    ) -> None:
        """A message read after every one appended so far (its seq is greater), in the
        exchange that opens with seq `exchange` at position `exchange_at`."""
        if self.size == len(self._arrays["seq"]):
            capacity = max(64, 2 * self.size)
            for name, array in self._arrays.items():
                grown = np.zeros(capacity, dtype=array.dtype)
                grown[: self.size] = array[: self.size]
                self._arrays[name] = grown
        arrays, at = self._arrays, self.size
        arrays["seq"][at] = seq
        arrays["timestamp"][at] = timestamp
        arrays["episode"][at] = episode
        arrays["exchange"][at] = exchange
        arrays["members"][at] = 0
        arrays["candidate"][at] = candidate
        self.size += 1
        arrays["members"][exchange_at] += 1

    def positions(self, seqs: np.ndarray) -> np.ndarray:
        """The positions of those of `seqs` that are mirrored (an int64 array)."""
        column = self.column("seq")
        if not len(column) or not len(seqs):
            return np.zeros(0, dtype=np.int64)
        at = np.minimum(column.searchsorted(seqs), len(column) - 1)
        found: np.ndarray = at[column[at] == seqs]
        return found

    def exchange_positions(self, firsts: np.ndarray) -> np.ndarray:
        """The positions of every message of the exchanges that open at `firsts` (seqs)."""
        starts = self.positions(firsts)
        counts = self.column("members")[starts]
        total = int(counts.sum())
        if not total:
            return np.zeros(0, dtype=np.int64)
        # Each exchange's range start, start + 1, ...: one arange shifted per range.
        offsets = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
        return offsets + np.arange(total)
