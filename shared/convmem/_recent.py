"""Reading the newest turns of a session's log, in O(window) whatever the log's length.

The facade reads them to build a context; the derived state reads them to
know where the recent window starts (what lies before it is evicted and due
for the summary). Both read the log the same way, so they agree on the window.
"""

from __future__ import annotations

from ._errors import InvalidMessageError
from ._models import Message, Role, Turn, group_turns
from ._store import Store

__all__ = ["recent_turns", "window_start"]


def recent_turns(
    store: Store, session_id: str, max_turns: int, *, max_tokens: int | None = None
) -> list[Turn]:
    """The newest `max_turns` complete turns of a session, oldest first.

    Reading stops early once the turns read hold more than `max_tokens`. An
    earlier question whose answer (``reply_to_seq``) was written among these
    turns comes with them, so interleaved turns are never split.
    """
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns <= 0:
        raise InvalidMessageError(f"max_turns must be a positive int, got {max_turns!r}")
    chunk = 2 * max_turns + 2  # a turn is usually a question and an answer
    messages = store.tail(session_id, chunk)
    reached_start = len(messages) < chunk
    while messages:
        users = [i for i, m in enumerate(messages) if m.role is Role.USER]
        enough_tokens = max_tokens is not None and sum(m.token_count or 0 for m in messages) > max_tokens
        if users and (len(users) >= max_turns or enough_tokens):
            start = _with_answered_questions(messages, users[-min(max_turns, len(users))])
            if start is not None:
                return group_turns(messages[start:])
            if reached_start:
                return group_turns(messages[users[-min(max_turns, len(users))] :])
        if reached_start:
            break
        chunk *= 2
        older = store.tail(session_id, chunk, before_seq=messages[0].seq)
        reached_start = len(older) < chunk
        messages = older + messages
    return group_turns(messages)[-max_turns:]


def _with_answered_questions(messages: list[Message], start: int) -> int | None:
    """Move `start` back to the earliest question that a message from `start` on answers
    (``reply_to_seq``), so interleaved turns stay whole; None when that question was not read."""
    first_seq = messages[0].seq or 0
    earliest = min(
        (m.reply_to_seq for m in messages[start:] if m.reply_to_seq is not None),
        default=None,
    )
    while earliest is not None and earliest < (messages[start].seq or 0):
        if earliest < first_seq:
            return None
        start = next(i for i, m in enumerate(messages) if (m.seq or 0) >= earliest)
        earliest = min(
            (m.reply_to_seq for m in messages[start:] if m.reply_to_seq is not None),
            default=None,
        )
    return start


def window_start(store: Store, session_id: str, keep_recent_turns: int) -> int | None:
    """First seq of the last `keep_recent_turns` turns (None for an empty session):
    every message before it has left the recent window."""
    turns = recent_turns(store, session_id, keep_recent_turns)
    return turns[0].first_seq if turns else None
