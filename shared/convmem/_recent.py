"""Reading the newest turns of a session's log, in O(window) whatever the log's length.

The facade reads them to build a context; the derived state reads them to
know where the recent window starts (what lies before it is evicted and due
for the summary). Both read the log the same way, so they agree on the window.
"""

from __future__ import annotations

from ._errors import InvalidMessageError
from ._models import Role, Turn, group_turns
from ._store import Store

__all__ = ["recent_turns", "window_start"]


def recent_turns(
    store: Store, session_id: str, max_turns: int, *, max_tokens: int | None = None
) -> list[Turn]:
    """The newest `max_turns` complete turns of a session, oldest first.

    Reading stops early once the turns read hold more than `max_tokens`.
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
            return group_turns(messages[users[-min(max_turns, len(users))] :])
        if reached_start:
            break
        chunk *= 2
        older = store.tail(session_id, chunk, before_seq=messages[0].seq)
        reached_start = len(older) < chunk
        messages = older + messages
    return group_turns(messages)[-max_turns:]


def window_start(store: Store, session_id: str, keep_recent_turns: int) -> int | None:
    """First seq of the last `keep_recent_turns` turns (None for an empty session):
    every message before it has left the recent window."""
    turns = recent_turns(store, session_id, keep_recent_turns)
    return turns[0].first_seq if turns else None
