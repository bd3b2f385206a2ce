"""`ContextView`: a built context as a person reads it, the one account every surface renders.

A `BuiltContext` already says where each token went (`SectionReport`), which
messages the model gets, which earlier turns recall brought back (`RecalledItem`)
and what was left out (`Dropped`). This module only arranges those facts:

- the budget split by section, used and free, as segments of one bar;
- the messages in prompt order, each labelled with the section it belongs to;
- each recalled item with why it was chosen: its score, the session and date it
  comes from, and the words it shares with the query (worked out here with
  recall's own tokenizer, since an item does not record which terms matched);
- what was left out, and why.

Nothing here reads a store: the view is made from the context alone, so the
notebook, the terminal and the web page show the same numbers for one build.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .._language import CJK_RANGES

if TYPE_CHECKING:
    from .._context.report import BuiltContext
    from .._recall.render import RecalledItem

__all__ = [
    "SECTION_ORDER",
    "BarSegment",
    "ContextView",
    "LeftOut",
    "MessageRow",
    "RecallRow",
    "context_view",
    "format_time",
    "shared_words",
]

SECTION_ORDER = ("system", "facts", "summary", "recall", "window", "query", "overhead")
"""Sections in prompt order, as `BuiltContext.sections` reports them; "free" follows them on a bar."""

SECTION_MEANING = {
    "system": "the configured system prompt",
    "facts": "core facts about the user",
    "summary": "the rolling summary of turns that left the window",
    "recall": "earlier turns recalled for the query",
    "window": "the newest turns, whole",
    "query": "the new user message",
    "overhead": "reply priming, message framing, memory tags and separators",
    "free": "budget left unused",
}

_WORD = re.compile(rf"[{CJK_RANGES}]+|[^\W_]+(?:'[^\W_]+)*")
_CJK = re.compile(rf"[{CJK_RANGES}]")


@dataclasses.dataclass(frozen=True)
class BarSegment:
    """One section's part of the budget bar: its tokens, its cap, and its share of the budget."""

    name: str
    tokens: int
    cap: int | None
    items: int
    note: str
    share: float
    """``tokens / budget``, between 0 and 1."""

    @property
    def meaning(self) -> str:
        return SECTION_MEANING.get(self.name, self.name)


@dataclasses.dataclass(frozen=True)
class MessageRow:
    """A message the model gets, in prompt order, with the section it belongs to."""

    position: int
    role: str
    section: str
    text: str
    seq: int | None = None
    tokens: int | None = None
    """The message's stored count (window messages); None where only the section is counted."""


@dataclasses.dataclass(frozen=True)
class RecallRow:
    """A recalled item and why it was chosen."""

    seqs: tuple[int, ...]
    session: str
    """The session it was said in: ``"this session"`` or another session of the user."""
    date: str
    score: float
    tokens: int
    text: str
    words: tuple[str, ...]
    """Query words the item also holds (by recall's tokenizer: stems, CJK characters and pairs)."""

    @property
    def why(self) -> str:
        """The reason in words: what matched, as far as the item tells."""
        if self.words:
            return "shares " + ", ".join(repr(word) for word in self.words) + " with the query"
        return "no word in common with the query: found by meaning, or as a neighbour of a match"


@dataclasses.dataclass(frozen=True)
class LeftOut:
    """Something the context did not take, and why (a `Dropped`)."""

    section: str
    what: str
    tokens: int
    reason: str


@dataclasses.dataclass(frozen=True)
class ContextView:
    """Everything the inspector shows about one `BuiltContext` (see the module docstring)."""

    budget: int
    used: int
    free: int
    segments: tuple[BarSegment, ...]
    """Sections with tokens, in prompt order, then ``"free"`` when some budget is left."""
    sections: tuple[BarSegment, ...]
    """Every reported section, also those with no tokens (the table under the bar)."""
    messages: tuple[MessageRow, ...]
    recalled: tuple[RecallRow, ...]
    left_out: tuple[LeftOut, ...]
    query: str | None
    memory_placement: str

    @property
    def headline(self) -> str:
        """``"412 of 1024 tokens used, 612 free"``: the line every surface starts with."""
        return f"{self.used} of {self.budget} tokens used, {self.free} free"

    def as_dict(self) -> dict[str, Any]:
        """The view as plain data (JSON-ready), e.g. for a test or a page that renders it itself."""
        return dataclasses.asdict(self)


def format_time(timestamp: float | None) -> str:
    """``2023-05-08 14:03`` in UTC, or ``-`` for no time: one format on every surface."""
    if timestamp is None:
        return "-"
    return datetime.fromtimestamp(timestamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M")


def shared_words(query: str, text: str) -> tuple[str, ...]:
    """The words of `query` that `text` holds too, as recall's tokenizer sees them.

    A Latin word counts when one of its stems occurs in `text` (``"dogs"`` matches
    ``"dog"``) and is shown as the query spells it; a run of CJK characters shows
    the characters and pairs that occur in both.
    """
    from .._recall.lexical import tokenize  # the recall package loads numpy: only when asked

    present = set(tokenize(text))
    found: dict[str, None] = {}
    for word in _WORD.findall(query):
        terms = tokenize(word)
        if _CJK.match(word):
            found.update((term, None) for term in terms if term in present)
        elif any(term in present for term in terms):
            found[word] = None
    return tuple(found)


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = " ".join(
            part if isinstance(part, str) else str(part.get("text", f"[{part.get('type', 'part')}]"))
            for part in content
        )
    else:
        text = "" if content is None else str(content)
    calls = message.get("tool_calls")
    if calls:
        names = ", ".join(str(call.get("function", {}).get("name", "?")) for call in calls)
        text = f"{text} [tool calls: {names}]".strip()
    return text


def _message_rows(context: BuiltContext) -> tuple[MessageRow, ...]:
    """The messages in prompt order: [system] [memory] window... [query]."""
    messages = context.messages
    sections: list[str] = []
    if context.system_text:
        in_system = context.memory_placement == "system" and bool(context.memory_text)
        sections.append("system + memory" if in_system else "system")
    if context.memory_message is not None:
        sections.append("memory")
    sections.extend("window" for _ in context.window)
    has_query = any(s.name == "query" and s.items for s in context.sections)
    if has_query:
        sections.append("query")
    if len(sections) != len(messages):  # a context assembled some other way: say so, not guess
        sections = ["message"] * len(messages)
    window_start = len(messages) - len(context.window) - (1 if has_query else 0)
    rows = []
    for position, (message, section) in enumerate(zip(messages, sections, strict=True)):
        stored = (
            context.window[position - window_start]
            if section == "window" and 0 <= position - window_start < len(context.window)
            else None
        )
        rows.append(
            MessageRow(
                position=position + 1,
                role=str(message.get("role", "?")),
                section=section,
                text=_message_text(message),
                seq=stored.seq if stored is not None else None,
                tokens=stored.token_count if stored is not None else None,
            )
        )
    return tuple(rows)


def _recall_rows(recalled: Sequence[RecalledItem], query: str | None) -> tuple[RecallRow, ...]:
    rows = []
    for item in recalled:
        date = item.time_label.strip("[]") if item.time_label else format_time(item.timestamp)
        rows.append(
            RecallRow(
                seqs=tuple(item.seqs),
                session="this session" if item.session_id is None else item.session_id,
                date=date,
                score=float(item.score),
                tokens=item.token_count,
                text=item.text,
                words=shared_words(query, item.text) if query else (),
            )
        )
    return tuple(rows)


def context_view(context: BuiltContext) -> ContextView:
    """The `ContextView` of `context` (see the module docstring)."""
    budget = max(1, context.budget)
    by_name = {report.name: report for report in context.sections}
    ordered = [by_name[name] for name in SECTION_ORDER if name in by_name]
    ordered += [report for report in context.sections if report.name not in SECTION_ORDER]
    sections = tuple(
        BarSegment(r.name, r.tokens, r.cap, r.items, r.note, min(1.0, max(0, r.tokens) / budget))
        for r in ordered
    )
    free = max(0, context.budget - context.token_count)
    segments = [segment for segment in sections if segment.tokens > 0]
    if free:
        segments.append(BarSegment("free", free, None, 0, "", free / budget))
    query = None
    if any(s.name == "query" and s.items for s in context.sections) and context.messages:
        query = _message_text(context.messages[-1])
    return ContextView(
        budget=context.budget,
        used=context.token_count,
        free=free,
        segments=tuple(segments),
        sections=sections,
        messages=_message_rows(context),
        recalled=_recall_rows(context.recalled, query),
        left_out=tuple(LeftOut(d.section, d.what, d.tokens, d.reason) for d in context.dropped),
        query=query,
        memory_placement=context.memory_placement,
    )
