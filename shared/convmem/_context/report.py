"""What a build returns: `BuiltContext`, the messages for a model and the account of
where every token went (`SectionReport` per section, `Dropped` per thing left out)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._models import Message
from .window import Dropped

if TYPE_CHECKING:  # recall loads numpy; a built context only carries its items
    from .._recall.render import RecalledItem

__all__ = ["BuiltContext", "SectionReport"]


@dataclasses.dataclass(frozen=True)
class SectionReport:
    """One section of a built context: its tokens, its cap (None: not capped), how many
    items it holds, and a note saying how it was sized (shown by ``explain()``)."""

    name: str
    tokens: int
    cap: int | None
    items: int
    note: str = ""


@dataclasses.dataclass(frozen=True, repr=False)
class BuiltContext:
    """A context ready for a chat model, and an account of how it was built.

    ``messages`` is a list of ``{"role", "content"}`` dicts (plus ``name``,
    ``tool_calls`` and ``tool_call_id`` where set) that a chat API accepts;
    ``token_count`` is what that list costs, reply priming included, and is
    never more than ``budget``.
    """

    messages: list[dict[str, Any]]
    token_count: int
    budget: int
    sections: tuple[SectionReport, ...]
    dropped: tuple[Dropped, ...]
    window: tuple[Message, ...]
    system_text: str
    """The content of the leading system message: the configured system prompt, plus
    the memory block only with ``memory_placement="system"``."""
    recalled: tuple[RecalledItem, ...] = ()
    """The recalled items in the recall section, as `Recall.search` found them."""
    language: str = "en"
    memory_text: str = ""
    """The memory block (facts, summary, omitted-history line, recalled turns) wrapped in
    ``<memory>…</memory>``, wherever it was placed; just the omitted-history line when
    that is all it says (no stored text, nothing to fence); "" when there is none."""
    memory_placement: str = "user"
    """Where `memory_text` is: ``"user"`` or ``"developer"`` (its own message, right
    before the window) or ``"system"`` (inside `system_text`)."""

    @property
    def memory_message(self) -> dict[str, Any] | None:
        """The message that carries the memory block, when it has one of its own."""
        if not self.memory_text or self.memory_placement == "system":
            return None
        return {"role": self.memory_placement, "content": self.memory_text}

    def section(self, name: str) -> SectionReport:
        """The report of section `name` (``system``, ``facts``, ``summary``, ``recall``,
        ``window``, ``query`` or ``overhead``)."""
        for report in self.sections:
            if report.name == name:
                return report
        raise KeyError(f"no section {name!r}; sections are {[s.name for s in self.sections]}")

    @property
    def report(self) -> dict[str, Any]:
        """Machine-readable account: tokens per section and what was dropped."""
        return {
            "budget": self.budget,
            "token_count": self.token_count,
            "sections": [dataclasses.asdict(s) for s in self.sections],
            "dropped": [dataclasses.asdict(d) for d in self.dropped],
        }

    def to_text(self) -> str:
        """The context as plain text (``role: content`` blocks), for completion-style models."""
        lines = []
        for message in self.messages:
            content = message.get("content")
            text = content if isinstance(content, str) else str(content)
            lines.append(f"{message['role']}: {text}")
        return "\n\n".join(lines)

    def explain(self) -> str:
        """A table of where every token went and what was left out, and why."""
        free = self.budget - self.token_count
        rows = [f"context: {self.token_count} of {self.budget} tokens used, {free} free"]
        rows.append(f"{'section':<9} {'tokens':>7} {'cap':>7} {'items':>6}  note")
        for report in self.sections:
            cap = "-" if report.cap is None else str(report.cap)
            rows.append(f"{report.name:<9} {report.tokens:>7} {cap:>7} {report.items:>6}  {report.note}")
        if self.dropped:
            rows.append(f"left out ({len(self.dropped)}):")
            shown = self.dropped[:12]
            for item in shown:
                rows.append(f"  {item.section:<8} {item.what} ({item.tokens} tokens): {item.reason}")
            if len(self.dropped) > len(shown):
                rows.append(f"  ... and {len(self.dropped) - len(shown)} more")
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.explain()

    def __repr__(self) -> str:
        return (
            f"<BuiltContext {self.token_count} of {self.budget} tokens: {len(self.messages)} messages, "
            f"{len(self.window)} in the window, {len(self.recalled)} recalled>"
        )

    def _repr_html_(self) -> str:
        """The inspector's picture of this build, for Jupyter: the budget bar, the messages
        by section, the recalled items with why, what was left out."""
        from .._inspect.html import render_html

        return render_html(self)
