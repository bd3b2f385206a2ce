"""The recent window: the newest turns that fit, never splitting a tool exchange.

Turns are kept whole, newest first, so the window is a contiguous tail of the
log that starts on a user (or system) message. Only the newest turn may be
shortened, when it alone is larger than the window: its question is kept with
as many of its newest units as fit, where a unit is a single message or an
assistant tool-call message together with its tool results. A tool call whose
result never came (the process stopped first) is taken out of the window, and
the window says so (`repair_tool_exchanges`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ._models import Message, Role, Turn
from ._salience import is_low_information
from ._tool_sequence import repair_tool_exchanges

__all__ = ["Dropped", "WindowSelection", "select_window", "split_units"]


@dataclasses.dataclass(frozen=True)
class Dropped:
    """Something a context left out, and why (shown by `BuiltContext.explain`)."""

    section: str
    what: str
    tokens: int
    reason: str


@dataclasses.dataclass(frozen=True)
class WindowSelection:
    messages: tuple[Message, ...]
    tokens: int
    turns: int
    dropped: tuple[Dropped, ...]

    @property
    def first_seq(self) -> int | None:
        return self.messages[0].seq if self.messages else None

    @property
    def seqs(self) -> frozenset[int]:
        return frozenset(m.seq for m in self.messages if m.seq is not None)


def split_units(turn: Turn) -> list[tuple[Message, ...]]:
    """Split a turn into units that must be kept or dropped together."""
    units: list[tuple[Message, ...]] = []
    pending: list[Message] = []
    open_calls: set[str] = set()
    for message in turn.messages:
        if pending and message.role is Role.TOOL and (not open_calls or message.tool_call_id in open_calls):
            pending.append(message)
            continue
        if pending:
            units.append(tuple(pending))
            pending = []
        if message.role is Role.ASSISTANT and message.tool_calls:
            pending = [message]
            open_calls = {str(c.get("id")) for c in message.tool_calls if c.get("id")}
        else:
            units.append((message,))
    if pending:
        units.append(tuple(pending))
    return units


def _describe(messages: Sequence[Message]) -> str:
    first, last = messages[0].seq, messages[-1].seq
    span = f"seq {first}" if first == last else f"seq {first}-{last}"
    preview = next((m.text for m in messages if m.text), "")
    preview = preview if len(preview) <= 24 else preview[:23] + "…"
    return f"{span} {preview!r}" if preview else span


def select_window(
    turns: Sequence[Turn],
    *,
    keep_recent_turns: int,
    max_tokens: int,
    prune_low_information: bool = True,
) -> WindowSelection:
    """Choose the recent window from `turns` (oldest first) within `max_tokens`.

    1. Take the last `keep_recent_turns` turns (a leading turn that starts on an
       assistant or tool message is never eligible).
    2. If they do not all fit and pruning is on, drop low-information turns
       (oldest first, never the newest turn) until the rest fits or none are left.
    3. Keep turns newest first while they fit; stop at the first that does not.
    """
    dropped: list[Dropped] = []
    eligible = [t for t in turns if t.messages[0].role in (Role.USER, Role.SYSTEM)]
    for turn in turns:
        if turn.messages[0].role not in (Role.USER, Role.SYSTEM):
            dropped.append(
                Dropped("window", _describe(turn.messages), turn.token_count, "starts without a user message")
            )
    if len(eligible) > keep_recent_turns:
        # An older turn answered among the kept ones (interleaved, see `group_turns`) is kept
        # with them, as `recent_turns` reads it: else it would be neither windowed nor summarized.
        cut = len(eligible) - keep_recent_turns
        while cut > 0 and eligible[cut - 1].last_seq > eligible[cut].first_seq:
            cut -= 1
        for turn in eligible[:cut]:
            dropped.append(
                Dropped(
                    "window",
                    _describe(turn.messages),
                    turn.token_count,
                    f"older than keep_recent_turns={keep_recent_turns}",
                )
            )
        eligible = eligible[cut:]
    if not eligible or max_tokens <= 0:
        for turn in eligible:
            dropped.append(
                Dropped("window", _describe(turn.messages), turn.token_count, "no room for the window")
            )
        return WindowSelection((), 0, 0, tuple(dropped))

    if prune_low_information and sum(t.token_count for t in eligible) > max_tokens:
        total = sum(t.token_count for t in eligible)
        kept: list[Turn] = []
        for index, turn in enumerate(eligible):
            newest = index == len(eligible) - 1
            if total > max_tokens and not newest and is_low_information(turn):
                total -= turn.token_count
                dropped.append(
                    Dropped(
                        "window", _describe(turn.messages), turn.token_count, "low-information turn pruned"
                    )
                )
            else:
                kept.append(turn)
        eligible = kept

    chosen: list[Turn] = []
    used = 0
    last_dropped = -1  # eligible[: last_dropped + 1] did not fit
    for index in range(len(eligible) - 1, -1, -1):
        turn = eligible[index]
        if used + turn.token_count <= max_tokens:
            chosen.append(turn)
            used += turn.token_count
            continue
        if chosen:
            last_dropped = index
        else:  # the newest turn alone is larger than the window
            partial, notes = _shorten_newest(turn, max_tokens)
            dropped.extend(notes)
            if partial:
                chosen.append(Turn(partial))
                used += sum(m.token_count or 0 for m in partial)
            last_dropped = index - 1
        break
    for older in eligible[: last_dropped + 1]:
        dropped.append(
            Dropped("window", _describe(older.messages), older.token_count, "over the window's token share")
        )
    chosen.reverse()
    messages, repairs = repair_tool_exchanges([m for t in chosen for m in t.messages])
    for repair in repairs:
        dropped.append(Dropped("window", _describe(repair.messages), repair.tokens, repair.reason))
    if repairs:
        used = sum(m.token_count or 0 for m in messages)
    return WindowSelection(messages, used, len(chosen), tuple(dropped))


def _shorten_newest(turn: Turn, max_tokens: int) -> tuple[tuple[Message, ...], list[Dropped]]:
    """The question plus the newest units that fit, or nothing if the question alone is too big."""
    units = split_units(turn)
    head, rest = units[0], units[1:]
    head_tokens = sum(m.token_count or 0 for m in head)
    if head_tokens > max_tokens:
        return (), [
            Dropped(
                "window",
                _describe(turn.messages),
                turn.token_count,
                "the newest turn's question alone exceeds the window",
            )
        ]
    used = head_tokens
    kept: list[tuple[Message, ...]] = []
    skipped: list[Message] = []
    for unit in reversed(rest):
        cost = sum(m.token_count or 0 for m in unit)
        if not skipped and used + cost <= max_tokens:
            kept.append(unit)
            used += cost
        else:
            skipped.extend(unit)
    kept.reverse()
    dropped = []
    if skipped:
        skipped.sort(key=lambda m: m.seq or 0)
        dropped.append(
            Dropped(
                "window",
                _describe(skipped),
                sum(m.token_count or 0 for m in skipped),
                "middle of the newest turn, over the window's token share",
            )
        )
    return tuple(head) + tuple(m for unit in kept for m in unit), dropped
