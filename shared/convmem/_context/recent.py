"""Reading the newest turns of a session's log, in O(window) whatever the log's length.

The facade reads them to build a context; the derived state reads them to
know where the recent window starts (what lies before it is evicted and due
for the summary). Both read the log the same way, so they agree on the window.
"""

from __future__ import annotations

from .._errors import InvalidMessageError
from .._models import Message, Role, Turn, group_turns
from .._stores.base import Store

__all__ = ["recent_turns", "window_start"]

# Messages read at first when there is no turn cap; doubled until enough tokens are read.
_FIRST_CHUNK = 64


def recent_turns(
    store: Store, session_id: str, max_turns: int | None, *, max_tokens: int | None = None
) -> list[Turn]:
    """The newest `max_turns` complete turns of a session, oldest first.

    Reading stops early once the turns read hold more than `max_tokens`. With
    ``max_turns=None`` only `max_tokens` bounds the read (and it is required). An
    earlier question whose answer (``reply_to_seq``) was written among these
    turns comes with them, so interleaved turns are never split.
    """
    if max_turns is None:
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens <= 0:
            raise InvalidMessageError(
                f"max_tokens must be a positive int when max_turns is None, got {max_tokens!r}"
            )
    elif not isinstance(max_turns, int) or isinstance(max_turns, bool) or max_turns <= 0:
        raise InvalidMessageError(f"max_turns must be a positive int or None, got {max_turns!r}")
    chunk = _FIRST_CHUNK if max_turns is None else 2 * max_turns + 2  # a turn is usually Q + A
    messages = store.tail(session_id, chunk)
    reached_start = len(messages) < chunk
    while messages:
        users = [i for i, m in enumerate(messages) if m.role is Role.USER]
        enough_tokens = max_tokens is not None and sum(m.token_count or 0 for m in messages) > max_tokens
        enough_turns = max_turns is not None and len(users) >= max_turns
        if users and (enough_turns or enough_tokens):
            first = users[0] if max_turns is None else users[-min(max_turns, len(users))]
            start = _with_answered_questions(messages, first)
            if start is not None:
                return group_turns(messages[start:])
            if reached_start:
                return group_turns(messages[first:])
        if reached_start:
            break
        chunk *= 2
        older = store.tail(session_id, chunk, before_seq=messages[0].seq)
        reached_start = len(older) < chunk
        messages = older + messages
    turns = group_turns(messages)
    return turns if max_turns is None else turns[-max_turns:]


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


def window_start(
    store: Store, session_id: str, keep_recent_turns: int | None, *, window_tokens: int
) -> int | None:
    """First seq of the recent window (None for an empty session): every message
    before it has left the window and is due for the summary.

    With a turn cap the window is the last `keep_recent_turns` turns; without one
    (None) it is the newest turns whose stored tokens fit `window_tokens` (at
    least the newest turn).
    """
    if keep_recent_turns is not None:
        turns = recent_turns(store, session_id, keep_recent_turns)
        return turns[0].first_seq if turns else None
    turns = recent_turns(store, session_id, None, max_tokens=window_tokens)
    if not turns:
        return None
    start = turns[-1].first_seq
    used = 0
    for turn in reversed(turns):
        used += turn.token_count
        if used > window_tokens:
            break
        start = turn.first_seq
    return start
