"""The inspector's pictures for a terminal, drawn with rich (``convmem[cli]``).

The same `ContextView` as the notebook and the web page: the headline, the
budget bar by section, the section table, the messages with their section, the
recalled items with why they were chosen, and what was left out. Stored text
is printed as text: rich markup in it is never interpreted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._derived.facts import Fact
from .._models import Message
from .._stores.base import SessionStats
from .catalog import Page, SessionDetail, UserRow
from .html import SECTION_COLOURS
from .view import ContextView, format_time

__all__ = [
    "budget_bar",
    "context_picture",
    "facts_table",
    "messages_table",
    "session_picture",
    "sessions_table",
    "users_table",
]

BAR_WIDTH = 60


def _colour(section: str) -> str:
    return SECTION_COLOURS.get(section.split(" ")[0], "#4b5563")


def _label(section: str) -> Text:
    return Text(section, style=f"bold {_colour(section)}")


def _widths(shares: Sequence[float], width: int) -> list[int]:
    """Cells per segment: proportional, at least one each, adding up to `width` (largest remainders)."""
    exact = [share * width for share in shares]
    cells = [max(1, int(value)) for value in exact]
    by_remainder = sorted(range(len(exact)), key=lambda i: exact[i] - int(exact[i]), reverse=True)
    index = 0
    while sum(cells) < width and by_remainder:
        cells[by_remainder[index % len(by_remainder)]] += 1
        index += 1
    while sum(cells) > width and max(cells) > 1:
        cells[cells.index(max(cells))] -= 1
    return cells


def budget_bar(view: ContextView, width: int = BAR_WIDTH) -> Group:
    """The headline, the bar of the budget by section (free last) and its legend."""
    bar = Text()
    for segment, cells in zip(view.segments, _widths([s.share for s in view.segments], width), strict=True):
        bar.append("█" * cells, style=_colour(segment.name) if segment.name != "free" else "grey50")
    legend = Text()
    for segment in view.segments:
        colour = _colour(segment.name) if segment.name != "free" else "grey50"
        legend.append("■ ", style=colour)
        legend.append(f"{segment.name} {segment.tokens}   ")
    return Group(Text(view.headline, style="bold"), bar, legend)


def _sections(view: ContextView) -> Table:
    table = Table(title="sections", title_justify="left", expand=False)
    table.add_column("section")
    for name in ("tokens", "cap", "items"):
        table.add_column(name, justify="right")
    table.add_column("note", overflow="fold")
    for s in view.sections:
        table.add_row(
            _label(s.name), str(s.tokens), "-" if s.cap is None else str(s.cap), str(s.items), s.note
        )
    return table


def _messages(view: ContextView, max_chars: int) -> Table:
    table = Table(title=f"messages sent to the model ({len(view.messages)})", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("section")
    table.add_column("role")
    table.add_column("seq", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("content", overflow="fold")
    for m in view.messages:
        text = m.text if len(m.text) <= max_chars else m.text[: max_chars - 1] + "…"
        table.add_row(
            str(m.position),
            _label(m.section),
            m.role,
            "" if m.seq is None else str(m.seq),
            "" if m.tokens is None else str(m.tokens),
            Text(text),
        )
    return table


def _recalled(view: ContextView) -> RenderableType:
    if not view.recalled:
        return Text("Nothing was recalled for this build.", style="dim")
    table = Table(title=f"recalled ({len(view.recalled)})", title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("session")
    table.add_column("date")
    table.add_column("score", justify="right")
    table.add_column("tokens", justify="right")
    table.add_column("why chosen, and the text", overflow="fold")
    for item in view.recalled:
        body = Text(item.why, style="italic")
        body.append("\n")
        body.append(item.text)
        table.add_row(
            ", ".join(str(s) for s in item.seqs),
            Text(item.session),
            item.date,
            f"{item.score:.3f}",
            str(item.tokens),
            body,
        )
    return table


def _left_out(view: ContextView) -> RenderableType:
    if not view.left_out:
        return Text("Nothing was left out.", style="dim")
    table = Table(title=f"left out ({len(view.left_out)})", title_justify="left")
    table.add_column("section")
    table.add_column("what", overflow="fold")
    table.add_column("tokens", justify="right")
    table.add_column("why", overflow="fold")
    for d in view.left_out:
        table.add_row(_label(d.section), Text(d.what), str(d.tokens), Text(d.reason))
    return table


def context_picture(view: ContextView, *, max_chars: int = 400) -> Group:
    """Everything the notebook shows about a build, for a terminal; messages are cut at `max_chars`."""
    return Group(
        budget_bar(view),
        _sections(view),
        _messages(view, max_chars),
        _recalled(view),
        _left_out(view),
    )


def _page_caption(page: Page[Any], noun: str) -> str:
    if not page.total:
        return f"no {noun}"
    last = page.first + len(page.items) - 1
    return f"{noun} {page.first}-{last} of {page.total} (page {page.number} of {page.pages})"


def users_table(page: Page[UserRow]) -> Table:
    table = Table(title="users", caption=_page_caption(page, "users"), title_justify="left")
    table.add_column("user")
    for name in ("sessions", "messages", "tokens"):
        table.add_column(name, justify="right")
    table.add_column("first")
    table.add_column("last")
    for row in page.items:
        user = Text(row.user_id) if row.user_id is not None else Text("(no user)", style="dim")
        table.add_row(
            user,
            str(row.sessions),
            str(row.messages),
            str(row.tokens),
            format_time(row.first_at),
            format_time(row.last_at),
        )
    return table


def sessions_table(page: Page[SessionStats], user_id: str | None) -> Table:
    owner = "(no user)" if user_id is None else user_id
    table = Table(
        title=Text(f"sessions of {owner}"),
        caption=_page_caption(page, "sessions"),
        title_justify="left",
    )
    table.add_column("session")
    for name in ("messages", "last seq", "tokens"):
        table.add_column(name, justify="right")
    table.add_column("created")
    table.add_column("last write")
    for stats in page.items:
        table.add_row(
            Text(stats.session_id),
            str(stats.message_count),
            str(stats.last_seq),
            str(stats.total_tokens),
            format_time(stats.created_at),
            format_time(stats.updated_at),
        )
    return table


def messages_table(page: Page[Message], *, max_chars: int = 400) -> Table:
    first = (page.number - 1) * page.size + 1
    last = min(page.total, first + page.size - 1)
    caption = f"seqs {first}-{last} of {page.total} (page {page.number} of {page.pages})"
    table = Table(title="messages", caption=caption, title_justify="left")
    table.add_column("seq", justify="right")
    table.add_column("time")
    table.add_column("role")
    table.add_column("status")
    table.add_column("tokens", justify="right")
    table.add_column("content", overflow="fold")
    for message in page.items:
        text = message.text if len(message.text) <= max_chars else message.text[: max_chars - 1] + "…"
        speaker = f"{message.role.value} ({message.name})" if message.name else message.role.value
        table.add_row(
            str(message.seq),
            format_time(message.timestamp),
            Text(speaker),
            message.status.value,
            "" if message.token_count is None else str(message.token_count),
            Text(text),
        )
    return table


def facts_table(facts: Sequence[Fact], title: str) -> RenderableType:
    if not facts:
        return Text(f"{title}: none", style="dim")
    table = Table(title=Text(title), title_justify="left")
    table.add_column("key")
    table.add_column("value", overflow="fold")
    table.add_column("session")
    table.add_column("seq", justify="right")
    table.add_column("said", overflow="fold")
    for fact in facts:
        value = f"not {fact.value}" if fact.negated else fact.value
        table.add_row(
            Text(fact.key),
            Text(value),
            Text(fact.session_id or ""),
            "" if fact.seq is None else str(fact.seq),
            format_time(fact.timestamp),
        )
    return table


def session_picture(detail: SessionDetail) -> Group:
    """A session's stats, rolling summary and its own facts."""
    stats = detail.stats
    owner = stats.user_id if stats.user_id is not None else "(no user)"
    head = Text()
    head.append(f"session {stats.session_id}", style="bold")
    head.append(
        f"  user {owner} · {stats.message_count} messages · {stats.total_tokens} tokens · "
        f"created {format_time(stats.created_at)} · last write {format_time(stats.updated_at)}"
    )
    summary = detail.summary
    if summary.text.strip():
        summary_box: RenderableType = Panel(
            Text(summary.text),
            title=f"rolling summary (covers seq <= {summary.covers_through_seq})",
            title_align="left",
        )
    else:
        summary_box = Text("rolling summary: none yet", style="dim")
    return Group(head, summary_box, facts_table(detail.facts, "facts this session stated"))
