"""Tool calls and their results, in an order chat APIs accept.

OpenAI and Anthropic refuse a history in which a call has no id or shares
its id with another call of the same message, a tool result answers no
earlier call, or a call is not answered before the next message. What can
only be a caller's mistake is refused when it is added (`check_tool_calls`
on every store append, `check_tool_results` against the log in the memory).
What can legitimately be stored, a call whose tool never returned because the
process stopped first, is mended in each built context by
`repair_tool_exchanges`, which reports what it removed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence

from ._errors import InvalidMessageError
from ._models import Message, Role

__all__ = ["Repair", "check_tool_calls", "check_tool_results", "repair_tool_exchanges", "unanswered_calls"]


def check_tool_calls(messages: Sequence[Message]) -> None:
    """Refuse a message whose tool calls chat APIs could never pair with results:
    a call without an id, or two calls of one message with the same id."""
    for index, message in enumerate(messages):
        seen: set[str] = set()
        for number, call in enumerate(message.tool_calls):
            call_id = call.get("id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidMessageError(
                    f"message {index} of the append: tool_calls[{number}] ({call.get('name')!r:.40}) has no "
                    "id; a tool result names the call it answers by its id, so give every call one "
                    "(nothing was stored)"
                )
            if call_id in seen:
                raise InvalidMessageError(
                    f"message {index} of the append: two tool calls share the id {call_id!r:.60}; each call "
                    "of a message needs its own id (nothing was stored)"
                )
            seen.add(call_id)


def unanswered_calls(messages: Iterable[Message]) -> set[str]:
    """Ids of the tool calls in `messages` (oldest first) that no later tool result answers."""
    waiting: set[str] = set()
    for message in messages:
        if message.role is Role.TOOL and message.tool_call_id is not None:
            waiting.discard(message.tool_call_id)
        for call in message.tool_calls:
            if isinstance(call.get("id"), str):
                waiting.add(call["id"])
    return waiting


def check_tool_results(messages: Sequence[Message], waiting: set[str]) -> list[int]:
    """Positions of the tool results in `messages` that answer no call: neither one of
    `waiting` (calls already stored and not answered yet) nor an earlier call of `messages`.
    A call answered once is no longer waiting, so a second result for it is listed too."""
    open_calls = set(waiting)
    orphans: list[int] = []
    for index, message in enumerate(messages):
        if message.role is Role.TOOL:
            if message.tool_call_id in open_calls:
                open_calls.discard(message.tool_call_id)
            else:
                orphans.append(index)
        for call in message.tool_calls:
            if isinstance(call.get("id"), str):
                open_calls.add(call["id"])
    return orphans


@dataclasses.dataclass(frozen=True)
class Repair:
    """One change `repair_tool_exchanges` made: the messages concerned and why."""

    messages: tuple[Message, ...]
    tokens: int
    reason: str


def repair_tool_exchanges(messages: Sequence[Message]) -> tuple[tuple[Message, ...], tuple[Repair, ...]]:
    """`messages` (a window, oldest first) made valid for chat APIs, and what was changed.

    Each assistant message with tool calls is followed directly by one result
    per call (results written later in the window are moved up to it; a call takes the
    first result of its id after it and before the id's next call). A call
    with no result in the window is removed from its message (the tool never
    returned: inventing a result would put words in the tool's mouth), and the
    message too when nothing else is left of it. A tool result that answers no
    earlier call, or a call answered already, is dropped. Token counts only
    shrink, so a window within its budget stays within it.
    """
    # Each id's results, and where its calls are made, in order: an id may be used again by a
    # later exchange (models that number their calls per turn), and a call's result comes
    # after it and before the id's next call.
    results: dict[str, list[Message]] = {}
    calls_at: dict[str, list[int]] = {}
    positions: dict[int, int] = {}
    for position, message in enumerate(messages):
        positions[id(message)] = position
        if message.role is Role.TOOL and message.tool_call_id is not None:
            results.setdefault(message.tool_call_id, []).append(message)
        for call in message.tool_calls:
            if isinstance(call.get("id"), str):
                calls_at.setdefault(call["id"], []).append(position)
    placed: set[int] = set()  # ids of result messages already placed after their call
    out: list[Message] = []
    repairs: list[Repair] = []
    for position, message in enumerate(messages):
        if message.role is Role.TOOL:
            if id(message) not in placed:
                repairs.append(Repair((message,), message.token_count or 0, _orphan_reason(message, out)))
            continue
        if not message.tool_calls:
            out.append(message)
            continue
        answered: list[dict[str, object]] = []
        dropped_calls: list[dict[str, object]] = []
        follow: list[Message] = []
        for call in message.tool_calls:
            call_id = call.get("id")
            found = results.get(call_id, ()) if isinstance(call_id, str) else ()
            until = next((at for at in calls_at.get(str(call_id), ()) if at > position), len(messages))
            result = next(
                (r for r in found if position < positions[id(r)] < until and id(r) not in placed), None
            )
            if result is not None:
                answered.append(call)
                follow.append(result)
                placed.add(id(result))
            else:
                dropped_calls.append(call)
        if dropped_calls:
            names = ", ".join(f"{c.get('name')!r} (id {c.get('id')!r})" for c in dropped_calls)
            reason = f"tool call {names} has no result in the log (the tool never returned); removed"
            if answered or message.text.strip():
                message = dataclasses.replace(message, tool_calls=tuple(answered))
                repairs.append(Repair((message,), 0, reason + " from its message"))
            else:
                repairs.append(Repair((message,), message.token_count or 0, reason + " with its message"))
                continue
        out.append(message)
        out.extend(follow)
    return tuple(out), tuple(repairs)


def _orphan_reason(message: Message, kept: Sequence[Message]) -> str:
    called = any(call.get("id") == message.tool_call_id for m in kept for call in m.tool_calls)
    if called:
        return f"a second tool result for call {message.tool_call_id!r:.40}; dropped"
    return f"tool result for call {message.tool_call_id!r:.40}, which is not in the context; dropped"
