"""HTML pictures of a built context: the notebook display and the web page's fragments.

`render_html` is what ``BuiltContext._repr_html_`` returns: one self-contained
fragment (its own ``<style>``, no script) with the budget bar, the section
table, the messages, the recalled items and what was left out. The web page
(`convmem._inspect.web`) puts the same fragments on its pages, so both show
one `ContextView` the same way.

Every text that comes from a store (messages, summaries, facts, ids) is user
input: it goes through `escape` and nothing else reaches the markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .view import ContextView, context_view

if TYPE_CHECKING:
    from .._context.report import BuiltContext

__all__ = [
    "SECTION_COLOURS",
    "STYLE",
    "budget_bar",
    "context_fragment",
    "escape",
    "left_out_table",
    "messages_table",
    "recalled_list",
    "render_html",
    "sections_table",
]

SECTION_COLOURS = {
    "system": "#6b7280",
    "facts": "#d97706",
    "summary": "#7c3aed",
    "recall": "#059669",
    "window": "#2563eb",
    "query": "#db2777",
    "overhead": "#9ca3af",
    "free": "#e5e7eb",
}
"""One colour per section, the same on the bar, the legend and the message labels."""

STYLE = """
.cm { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px; color: #111827;
      line-height: 1.4; max-width: 1100px; }
.cm h3 { font-size: 14px; margin: 14px 0 6px; }
.cm .cm-headline { font-weight: 600; margin: 4px 0 6px; }
.cm .cm-bar { display: flex; height: 22px; border-radius: 4px; overflow: hidden; border: 1px solid #d1d5db; }
.cm .cm-bar span { display: block; height: 100%; min-width: 2px; }
.cm .cm-legend { display: flex; flex-wrap: wrap; gap: 4px 14px; margin: 6px 0; }
.cm .cm-swatch { display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px;
                 vertical-align: middle; }
.cm table { border-collapse: collapse; margin: 4px 0; width: 100%; }
.cm th, .cm td { text-align: left; padding: 3px 8px; border-bottom: 1px solid #e5e7eb; vertical-align: top; }
.cm th { background: #f9fafb; font-weight: 600; }
.cm td.cm-num, .cm th.cm-num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.cm .cm-text { white-space: pre-wrap; word-break: break-word; max-height: 24em; overflow: auto; margin: 0;
               font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 12px; }
.cm .cm-label { display: inline-block; padding: 0 6px; border-radius: 8px; color: #fff; font-size: 11px;
                white-space: nowrap; }
.cm .cm-why { color: #374151; }
.cm .cm-muted { color: #6b7280; }
"""


def escape(value: object) -> str:
    """`value` as text safe inside HTML elements and quoted attributes."""
    return html.escape(str(value), quote=True)


def _colour(section: str) -> str:
    return SECTION_COLOURS.get(section.split(" ")[0], "#4b5563")


def _label(section: str) -> str:
    return f'<span class="cm-label" style="background:{_colour(section)}">{escape(section)}</span>'


def _table(headers: Iterable[tuple[str, bool]], rows: Iterable[Iterable[tuple[str, bool]]], css: str) -> str:
    """A table; each header and cell is (markup, numeric). Cells must already be escaped."""
    head = "".join(f"<th{' class=cm-num' if numeric else ''}>{text}</th>" for text, numeric in headers)
    body = "".join(
        "<tr>" + "".join(f"<td{' class=cm-num' if n else ''}>{cell}</td>" for cell, n in row) + "</tr>"
        for row in rows
    )
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def budget_bar(view: ContextView) -> str:
    """The headline, one bar of the budget split by section (free last), and its legend."""
    parts = []
    legend = []
    for segment in view.segments:
        width = max(segment.share * 100, 0.3)
        title = f"{segment.name}: {segment.tokens} tokens ({segment.meaning})"
        parts.append(
            f'<span class="cm-seg cm-seg-{escape(segment.name)}" title="{escape(title)}" '
            f'style="width:{width:.2f}%;background:{_colour(segment.name)}"></span>'
        )
        legend.append(
            f'<span><span class="cm-swatch" style="background:{_colour(segment.name)}"></span>'
            f"{escape(segment.name)} {segment.tokens}</span>"
        )
    return (
        f'<div class="cm-headline">{escape(view.headline)}</div>'
        f'<div class="cm-bar" role="img" aria-label="{escape(view.headline)}">{"".join(parts)}</div>'
        f'<div class="cm-legend">{"".join(legend)}</div>'
    )


def sections_table(view: ContextView) -> str:
    rows = (
        [
            (_label(s.name), False),
            (str(s.tokens), True),
            ("-" if s.cap is None else str(s.cap), True),
            (str(s.items), True),
            (escape(s.note), False),
        ]
        for s in view.sections
    )
    headers = [("section", False), ("tokens", True), ("cap", True), ("items", True), ("note", False)]
    return _table(headers, rows, "cm-sections")


def messages_table(view: ContextView) -> str:
    rows = (
        [
            (str(m.position), True),
            (_label(m.section), False),
            (escape(m.role), False),
            ("" if m.seq is None else str(m.seq), True),
            ("" if m.tokens is None else str(m.tokens), True),
            (f'<div class="cm-text">{escape(m.text)}</div>', False),
        ]
        for m in view.messages
    )
    headers = [
        ("#", True),
        ("section", False),
        ("role", False),
        ("seq", True),
        ("tokens", True),
        ("content", False),
    ]
    return _table(headers, rows, "cm-messages")


def recalled_list(view: ContextView) -> str:
    if not view.recalled:
        return '<p class="cm-muted cm-recalled">Nothing was recalled for this build.</p>'
    rows = (
        [
            (escape(", ".join(str(s) for s in item.seqs)), True),
            (escape(item.session), False),
            (escape(item.date), False),
            (f"{item.score:.3f}", True),
            (str(item.tokens), True),
            (
                f'<div class="cm-why">{escape(item.why)}</div><div class="cm-text">{escape(item.text)}</div>',
                False,
            ),
        ]
        for item in view.recalled
    )
    headers = [
        ("seq", True),
        ("session", False),
        ("date", False),
        ("score", True),
        ("tokens", True),
        ("why chosen, and the text", False),
    ]
    return _table(headers, rows, "cm-recalled")


def left_out_table(view: ContextView) -> str:
    if not view.left_out:
        return '<p class="cm-muted cm-left-out">Nothing was left out.</p>'
    rows = (
        [
            (_label(d.section), False),
            (escape(d.what), False),
            (str(d.tokens), True),
            (escape(d.reason), False),
        ]
        for d in view.left_out
    )
    headers = [("section", False), ("what", False), ("tokens", True), ("why", False)]
    return _table(headers, rows, "cm-left-out")


def context_fragment(view: ContextView) -> str:
    """Bar, sections, messages, recalled items and left-out list, without the style."""
    return (
        budget_bar(view)
        + sections_table(view)
        + f"<h3>Messages sent to the model ({len(view.messages)})</h3>"
        + messages_table(view)
        + f"<h3>Recalled ({len(view.recalled)})</h3>"
        + recalled_list(view)
        + f"<h3>Left out ({len(view.left_out)})</h3>"
        + left_out_table(view)
    )


def render_html(context: BuiltContext) -> str:
    """The notebook picture of `context`: a self-contained HTML fragment (no script)."""
    return f'<div class="cm"><style>{STYLE}</style>{context_fragment(context_view(context))}</div>'
