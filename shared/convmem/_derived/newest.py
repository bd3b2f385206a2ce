"""The newest messages of a session's log, as this process last read or appended them.

The summary's plan reads the log's newest messages after every append (where the
recent window starts) and the messages past the summary's watermark. Both were
either read by the previous plan or appended by this process since: `NewestMessages`
keeps them and answers the same reads, so a plan after an append reads nothing.

It answers a read only when it holds the whole answer: every stored message past
`complete_after` (0: the whole log) is held, so the newest `limit` messages before
a seq are held when at least `limit` of them are, or when the whole log is. Any
other read goes to the store, and what it returns is kept when it joins what is
held. An append that does not continue the held messages (another writer
appended in between) makes the holder useless, and the plan reads the store again.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._models import Message
from .._stores.base import Store

__all__ = ["NewestMessages"]

# Past this many messages held, the oldest go (down to what the summary has not covered).
_MAX_HELD = 512
_KEEP_NEWEST = 128


class NewestMessages:
    """A suffix of one session's log, and a read-through ``tail`` over it (see the module docstring)."""

    def __init__(self, store: Store, session_id: str) -> None:
        self.store = store
        self.session_id = session_id
        self.messages: list[Message] = []
        # Every stored message with a greater seq is in `messages`; None: nothing is known.
        self.complete_after: int | None = None

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        """`Store.tail`, from what is held when it holds the answer."""
        if session_id != self.session_id:
            return self.store.tail(session_id, limit, before_seq=before_seq)
        held = (
            self.messages if before_seq is None else [m for m in self.messages if (m.seq or 0) < before_seq]
        )
        if self.complete_after is not None and (len(held) >= limit or self.complete_after == 0):
            return held[-limit:]
        read = self.store.tail(session_id, limit, before_seq=before_seq)
        self._join(read, limit, before_seq)
        return read

    def _join(self, read: list[Message], limit: int, before_seq: int | None) -> None:
        """Keep what a read of the newest messages (before `before_seq`) returned, when it
        joins what is held into one suffix of the log."""
        complete_after = 0 if len(read) < limit else (read[0].seq or 1) - 1
        if before_seq is None:
            self.messages, self.complete_after = list(read), complete_after
        elif self.messages and before_seq == self.messages[0].seq:
            self.messages = [*read, *self.messages]
            self.complete_after = complete_after

    def after(self, seq: int) -> list[Message] | None:
        """Every stored message past `seq`, or None when not all of them are held."""
        if self.complete_after is None or self.complete_after > seq:
            return None
        return [m for m in self.messages if (m.seq or 0) > seq]

    def hold_after(self, seq: int, messages: list[Message]) -> None:
        """Keep `messages`, just read: every stored message past `seq`."""
        if self.complete_after is None or self.complete_after > seq:
            self.messages, self.complete_after = list(messages), seq

    def extend(self, appended: Sequence[Message]) -> bool:
        """Add messages this process appended; False (and nothing held any more) when they
        do not continue the held log."""
        last = (self.messages[-1].seq or 0) if self.messages else self.complete_after
        if (
            self.complete_after is None
            or last is None
            or not appended
            or any(m.seq != last + 1 + i for i, m in enumerate(appended))
        ):
            self.messages, self.complete_after = [], None
            return False
        self.messages.extend(appended)
        return True

    def trim(self, covered_through: int) -> None:
        """Let the oldest messages go once many are held, keeping those past `covered_through`
        (the summary's watermark) and the newest few."""
        if len(self.messages) <= _MAX_HELD:
            return
        keep = max(_KEEP_NEWEST, sum((m.seq or 0) > covered_through for m in self.messages))
        dropped = self.messages[: len(self.messages) - keep]
        if dropped:
            self.messages = self.messages[len(dropped) :]
            self.complete_after = dropped[-1].seq or 0
