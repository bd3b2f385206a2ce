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
import functools
from collections.abc import Sequence

from .._models import Message, Role, Turn
from .._salience import is_low_information
from .._tool_sequence import repair_tool_exchanges

__all__ = ["Dropped", "WindowCandidates", "WindowChooser", "WindowSelection", "select_window", "split_units"]


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

    @functools.cached_property
    def seqs(self) -> frozenset[int]:
        """The seqs it holds (worked out once: a build asks for every recalled item)."""
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


def _opens_the_log(turn: Turn) -> bool:
    """Whether `turn` is what the assistant said first in a session, before any user message."""
    first = turn.messages[0]
    return first.role is Role.ASSISTANT and first.seq == 1


def _no_question_first(turn: Turn) -> Dropped:
    """The note that `turn`, which starts on an assistant or tool message, was left out."""
    return Dropped("window", _describe(turn.messages), turn.token_count, "starts without a user message")


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
    """Choose the recent window from `turns` (oldest first) within `max_tokens`
    (see `WindowCandidates.select`, which a build asks several times)."""
    return WindowCandidates(
        turns, keep_recent_turns=keep_recent_turns, prune_low_information=prune_low_information
    ).select(max_tokens)


class WindowCandidates:
    """The turns a window is chosen from, with what every choice re-reads worked out once.

    A build chooses its window two or three times, at different sizes (with
    and without the line saying history was left out, then with the room
    recall left), from the same turns. Which turns are eligible, which are
    low-information and how each is described do not depend on the size, so
    they are computed once per set of turns, as a choice first needs them.
    """

    def __init__(
        self, turns: Sequence[Turn], *, keep_recent_turns: int, prune_low_information: bool = True
    ) -> None:
        self.turns = turns
        self.prune_low_information = prune_low_information
        dropped: list[Dropped] = []
        eligible = [t for t in turns if t.messages[0].role in (Role.USER, Role.SYSTEM)]
        # The conversation's opening, said by the assistant before the user spoke (a
        # greeting): kept when the whole conversation fits, as a chat would show it.
        self._opening = turns[0] if turns and _opens_the_log(turns[0]) else None
        for turn in turns:
            if turn.messages[0].role not in (Role.USER, Role.SYSTEM) and turn is not self._opening:
                dropped.append(_no_question_first(turn))
        if len(eligible) > keep_recent_turns:
            # An older turn answered among the kept ones (interleaved, see `group_turns`) is kept
            # with them, as `recent_turns` reads it: else it would be neither windowed nor summarized.
            cut = len(eligible) - keep_recent_turns
            while cut > 0 and eligible[cut - 1].last_seq > eligible[cut].first_seq:
                cut -= 1
            if self._opening is not None:  # older turns are left out: so is the opening
                dropped.append(_no_question_first(self._opening))
                self._opening = None
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
        self._eligible = eligible
        self._tokens = [turn.token_count for turn in eligible]
        self._total = sum(self._tokens)
        self._always_dropped = tuple(dropped)
        self._low_information: list[bool | None] = [None] * len(eligible)
        self._dropped: dict[tuple[int, str], Dropped] = {}

    def _dropped_turn(self, index: int, reason: str) -> Dropped:
        """The note that eligible turn `index` was left out for `reason` (made once)."""
        note = self._dropped.get((index, reason))
        if note is None:
            turn = self._eligible[index]
            note = self._dropped[(index, reason)] = Dropped(
                "window", _describe(turn.messages), self._tokens[index], reason
            )
        return note

    def _is_low_information(self, index: int) -> bool:
        flag = self._low_information[index]
        if flag is None:
            flag = self._low_information[index] = is_low_information(self._eligible[index])
        return flag

    def select(self, max_tokens: int) -> WindowSelection:
        """The window within `max_tokens`:

        1. Only the last `keep_recent_turns` turns are eligible (a leading turn
           that starts on an assistant or tool message never is, but for the
           conversation's opening by the assistant: it is kept when every other
           turn is and it fits too, so a window that cuts into the log never
           starts on an assistant message).
        2. If they do not all fit and pruning is on, low-information turns are
           dropped (oldest first, never the newest turn) until the rest fits or
           none are left.
        3. Turns are kept newest first while they fit, stopping at the first that
           does not.
        """
        dropped = list(self._always_dropped)
        eligible = self._eligible
        opening = self._opening
        if not eligible or max_tokens <= 0:
            dropped.extend(
                self._dropped_turn(index, "no room for the window") for index in range(len(eligible))
            )
            if opening is not None:
                dropped.append(_no_question_first(opening))
            return WindowSelection((), 0, 0, tuple(dropped))

        indices: Sequence[int] = range(len(eligible))
        if self.prune_low_information and self._total > max_tokens:
            total = self._total
            newest = len(eligible) - 1
            kept: list[int] = []
            for index in indices:
                if total > max_tokens and index != newest and self._is_low_information(index):
                    total -= self._tokens[index]
                    dropped.append(self._dropped_turn(index, "low-information turn pruned"))
                else:
                    kept.append(index)
            indices = kept

        chosen: list[Turn] = []
        used = 0
        first_kept = 0  # indices[:first_kept] did not fit
        for position in range(len(indices) - 1, -1, -1):
            index = indices[position]
            cost = self._tokens[index]
            if used + cost <= max_tokens:
                chosen.append(eligible[index])
                used += cost
                continue
            if chosen:
                first_kept = position + 1
            else:  # the newest turn alone is larger than the window
                partial, notes = _shorten_newest(eligible[index], max_tokens)
                dropped.extend(notes)
                if partial:
                    chosen.append(Turn(partial))
                    used += sum(m.token_count or 0 for m in partial)
                first_kept = position
            break
        dropped.extend(
            self._dropped_turn(indices[position], "over the window's token share")
            for position in range(first_kept)
        )
        if opening is not None:
            whole = len(chosen) == len(eligible) and chosen[-1] is eligible[0]
            if whole and used + opening.token_count <= max_tokens:
                chosen.append(opening)
                used += opening.token_count
            else:
                dropped.append(_no_question_first(opening))
        chosen.reverse()
        messages, repairs = repair_tool_exchanges([m for t in chosen for m in t.messages])
        for repair in repairs:
            dropped.append(Dropped("window", _describe(repair.messages), repair.tokens, repair.reason))
        if repairs:
            used = sum(m.token_count or 0 for m in messages)
        return WindowSelection(messages, used, len(chosen), tuple(dropped))


class WindowChooser:
    """Chooses windows for a session's builds, preparing each list of turns once.

    A build chooses from the same turns two or three times, and builds between two
    writes to the log share one list of turns (see the facade's window cache).
    """

    def __init__(self, *, keep_recent_turns: int | None, prune_low_information: bool) -> None:
        self.keep_recent_turns = keep_recent_turns
        self.prune_low_information = prune_low_information
        self._candidates: WindowCandidates | None = None

    def select(self, turns: Sequence[Turn], max_tokens: int) -> WindowSelection:
        """The window of `turns` within `max_tokens` (see `WindowCandidates.select`)."""
        cached = self._candidates
        if cached is None or cached.turns is not turns:
            cached = self._candidates = WindowCandidates(
                turns,
                keep_recent_turns=self.keep_recent_turns or max(1, len(turns)),
                prune_low_information=self.prune_low_information,
            )
        return cached.select(max(0, max_tokens))


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
