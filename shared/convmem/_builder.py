"""The context builder: fits system prompt, facts, summary, recalled turns,
the recent window and the query into one token budget.

Sections, in prompt order, with how they are sized:

    system   mandatory                    the configured system prompt
    facts    up to its share              core facts about the user, newest first
    summary  up to its share              the rolling summary of evicted turns
    recall   up to its (chosen) share     earlier turns relevant to the query
    window   everything that is left      the newest turns, whole
    query    mandatory                    the new user message

Facts, summary and recall are rendered into one leading system message (one
message overhead instead of four). Every figure comes from counts stored with
the messages or from counting the few section texts; the final message list is
then counted once more as a whole, and trimmed if tokenizer boundary effects
pushed it over, so the budget holds exactly under the configured counter.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from ._errors import BudgetError
from ._language import SECTION_HEADERS as HEADERS
from ._models import Message, Role, Turn
from ._tokens import REPLY_PRIMING_TOKENS, TokenCounter
from ._window import Dropped, WindowSelection, select_window

__all__ = ["BuiltContext", "ContextBuilder", "ContextRequest", "RecallItem", "SectionReport"]

SECTION_ORDER = ("system", "facts", "summary", "recall", "window", "query")
_SEPARATOR = "\n\n"


@dataclasses.dataclass(frozen=True)
class RecallItem:
    """One recalled unit of earlier conversation, ready to render."""

    seqs: tuple[int, ...]
    text: str
    score: float = 0.0
    token_count: int | None = None


RecallFn = Callable[[frozenset[int], int], Sequence[RecallItem]]
"""(seqs already in the window, token cap) -> ranked items; called at most twice per build."""


@dataclasses.dataclass(frozen=True)
class ContextRequest:
    """Everything the builder needs; the memory facade gathers it from the store."""

    budget: int
    turns: Sequence[Turn]
    """Window candidates, oldest first (the newest turns of the log)."""
    keep_recent_turns: int
    language: str = "en"
    system_prompt: str | None = None
    query: str | None = None
    include_query: bool = True
    facts: Sequence[str] = ()
    """Fact lines, newest first."""
    summary: str | None = None
    summary_covers_through_seq: int = 0
    condense: Callable[[str, int], str] | None = None
    """Shortens a summary to a token cap at sentence boundaries, when it is over its share."""
    first_log_seq: int | None = None
    """Seq of the oldest message of the log, to tell whether history was omitted."""
    log_tokens: int = 0
    """Tokens of the whole log (stored counts), to report what lies before the candidates."""
    recall: RecallFn | None = None
    facts_share: float = 0.10
    summary_share: float = 0.20
    recall_share: float = 0.25
    recall_share_reason: str = "configured"
    prune_low_information: bool = True


@dataclasses.dataclass(frozen=True)
class SectionReport:
    name: str
    tokens: int
    cap: int | None
    items: int
    note: str = ""


@dataclasses.dataclass(frozen=True)
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
    recalled: tuple[RecallItem, ...] = ()
    language: str = "en"

    def section(self, name: str) -> SectionReport:
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


class ContextBuilder:
    """Builds a `BuiltContext` from a `ContextRequest` under a `TokenCounter`."""

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        # The same summary, fact lines, headers and system text come back on
        # every build of a session: count each distinct text once.
        self._count: Callable[[str], int] = functools.lru_cache(maxsize=2048)(counter.count_text)
        self._count_system: Callable[[str], int] = functools.lru_cache(maxsize=256)(
            lambda text: counter.count_message(Message(role=Role.SYSTEM, content=text))
        )

    def _system_tokens(self, text: str) -> int:
        return self._count_system(text) if text else 0

    def build(self, request: ContextRequest) -> BuiltContext:
        budget = request.budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise BudgetError(f"budget must be a positive int, got {budget!r}")
        headers = HEADERS.get(request.language, HEADERS["en"])
        system_prompt = (request.system_prompt or "").strip()
        query_message = None
        query_tokens = 0
        if request.query is not None and request.include_query:
            query_message = Message(role=Role.USER, content=request.query)
            query_tokens = self.counter.count_message(query_message)
        system_tokens = self._system_tokens(system_prompt)
        mandatory = REPLY_PRIMING_TOKENS + system_tokens + query_tokens
        if mandatory > budget:
            raise BudgetError(
                f"budget {budget} is smaller than the mandatory parts: system prompt {system_tokens} + "
                f"query {query_tokens} + reply priming {REPLY_PRIMING_TOKENS} = {mandatory} tokens; "
                "raise the budget or shorten the system prompt or query"
            )
        available = budget - mandatory
        # A system message that carries only sections still costs its overhead.
        overhead = 0 if system_prompt else self._system_tokens(" ") - self._count(" ")
        separator = self._count(_SEPARATOR)
        dropped: list[Dropped] = self._older_history(request)

        def section_cost(text: str) -> int:
            return self._count(text) + separator

        # facts: header + lines, newest first, up to the share
        facts_cap = int(available * request.facts_share)
        facts_lines: list[str] = []
        facts_tokens = 0
        if request.facts:
            header_cost = section_cost(headers["facts"])
            used = header_cost
            for line in request.facts:
                cost = self._count(line) + 1  # the newline before it
                if used + cost <= facts_cap:
                    facts_lines.append(line)
                    used += cost
                else:
                    dropped.append(Dropped("facts", repr(line[:40]), cost, "over the facts share"))
            facts_tokens = used if facts_lines else 0

        # summary: whole or not at all (summarizers keep it within the share)
        summary_cap = int(available * request.summary_share)
        summary_text = (request.summary or "").strip()
        summary_tokens = 0
        if summary_text:
            header_cost = section_cost(headers["summary"])
            summary_tokens = header_cost + section_cost(summary_text)
            room = summary_cap - header_cost - separator
            if summary_tokens > summary_cap and request.condense is not None and room > 0:
                summary_text = request.condense(summary_text, room).strip()
                summary_tokens = header_cost + section_cost(summary_text) if summary_text else 0
            if summary_tokens > summary_cap:
                dropped.append(
                    Dropped(
                        "summary", "rolling summary", summary_tokens, f"larger than its cap {summary_cap}"
                    )
                )
                summary_text, summary_tokens = "", 0

        fixed = facts_tokens + summary_tokens
        # Recall's share is of what facts and summary leave, so a share picked
        # per query (up to nearly all of it) still leaves the window its part.
        recall_cap = int((available - fixed) * request.recall_share) if request.recall else 0
        sections_present = bool(facts_lines or summary_text)
        window_cap = available - fixed - recall_cap - (overhead if sections_present or recall_cap else 0)
        window = select_window(
            request.turns,
            keep_recent_turns=request.keep_recent_turns,
            max_tokens=max(0, window_cap),
            prune_low_information=request.prune_low_information,
        )

        recalled: list[RecallItem] = []
        recall_tokens = 0
        if request.recall and recall_cap > 0:
            recalled, recall_tokens = self._fill_recall(request.recall, window.seqs, recall_cap, headers)
            spare = recall_cap - recall_tokens
            if spare > 0 and window.dropped:
                # Unused recall room goes back to the window; recalled items the
                # bigger window now holds are removed so nothing appears twice.
                window = select_window(
                    request.turns,
                    keep_recent_turns=request.keep_recent_turns,
                    max_tokens=max(0, window_cap + spare),
                    prune_low_information=request.prune_low_information,
                )
                recalled = [item for item in recalled if not set(item.seqs) & window.seqs]
                recall_tokens = self._recall_cost(recalled, headers)
        dropped.extend(window.dropped)

        omitted = self._history_omitted(request, window, recalled)
        return self._assemble(
            request=request,
            budget=budget,
            headers=headers,
            system_prompt=system_prompt,
            facts_lines=facts_lines,
            summary_text=summary_text,
            omitted=omitted,
            recalled=recalled,
            window=window,
            query_message=query_message,
            caps={"facts": facts_cap, "summary": summary_cap, "recall": recall_cap, "window": window_cap},
            dropped=dropped,
        )

    def _recall_cost(self, items: Sequence[RecallItem], headers: dict[str, str]) -> int:
        if not items:
            return 0
        return (
            self._count(headers["recall"])
            + self._count(_SEPARATOR)
            + sum(self._item_tokens(item) + 1 for item in items)
        )

    def _item_tokens(self, item: RecallItem) -> int:
        return item.token_count if item.token_count is not None else self._count(item.text)

    def _fill_recall(
        self, recall: RecallFn, window_seqs: frozenset[int], cap: int, headers: dict[str, str]
    ) -> tuple[list[RecallItem], int]:
        header = self._count(headers["recall"]) + self._count(_SEPARATOR)
        if cap <= header:
            return [], 0
        chosen: list[RecallItem] = []
        used = header
        for item in recall(window_seqs, cap - header):
            if set(item.seqs) & window_seqs:
                continue
            cost = self._item_tokens(item) + 1
            if used + cost <= cap:
                chosen.append(item)
                used += cost
        return chosen, used if chosen else 0

    @staticmethod
    def _older_history(request: ContextRequest) -> list[Dropped]:
        """What lies before the window candidates: never read, only reported."""
        if request.first_log_seq is None:
            return []
        start = request.turns[0].first_seq if request.turns else None
        if start is None or start <= request.first_log_seq:
            return []
        tokens = request.log_tokens - sum(t.token_count for t in request.turns)
        covered = request.summary_covers_through_seq
        how = f"summarized through seq {covered}" if covered else "not summarized"
        return [
            Dropped(
                "window",
                f"seq {request.first_log_seq}-{start - 1}",
                max(0, tokens),
                f"older than the recent window ({how})",
            )
        ]

    @staticmethod
    def _history_omitted(
        request: ContextRequest, window: WindowSelection, recalled: Sequence[RecallItem]
    ) -> bool:
        if request.first_log_seq is None:
            return False
        start = window.first_seq
        if start is None:
            start = (request.turns[-1].last_seq + 1) if request.turns else request.first_log_seq
        first_uncovered = max(request.summary_covers_through_seq + 1, request.first_log_seq)
        return start > first_uncovered

    def _render_system(
        self,
        system_prompt: str,
        headers: dict[str, str],
        facts_lines: Sequence[str],
        summary_text: str,
        omitted: bool,
        recalled: Sequence[RecallItem],
    ) -> str:
        blocks = []
        if system_prompt:
            blocks.append(system_prompt)
        if facts_lines:
            blocks.append(headers["facts"] + "\n" + "\n".join(facts_lines))
        if summary_text:
            blocks.append(headers["summary"] + _SEPARATOR + summary_text)
        if omitted and (summary_text or facts_lines or recalled):
            blocks.append(headers["omitted"])
        if recalled:
            blocks.append(headers["recall"] + _SEPARATOR + "\n".join(item.text for item in recalled))
        return _SEPARATOR.join(blocks)

    def _assemble(
        self,
        *,
        request: ContextRequest,
        budget: int,
        headers: dict[str, str],
        system_prompt: str,
        facts_lines: list[str],
        summary_text: str,
        omitted: bool,
        recalled: list[RecallItem],
        window: WindowSelection,
        query_message: Message | None,
        caps: dict[str, int],
        dropped: list[Dropped],
    ) -> BuiltContext:
        window_messages = list(window.messages)
        query_tokens = self.counter.count_message(query_message) if query_message else 0
        while True:
            system_text = self._render_system(
                system_prompt, headers, facts_lines, summary_text, omitted, recalled
            )
            system_tokens = self._system_tokens(system_text)
            window_tokens = sum(m.token_count or 0 for m in window_messages)
            total = REPLY_PRIMING_TOKENS + system_tokens + window_tokens + query_tokens
            if total <= budget:
                break
            # Tokenizer boundary effects can cost a few tokens more than the
            # per-section estimate: give up the least important item.
            if recalled:
                item = recalled.pop()
                dropped.append(Dropped("recall", f"seq {item.seqs[0]}", self._item_tokens(item), "final fit"))
            elif facts_lines:
                line = facts_lines.pop()
                dropped.append(Dropped("facts", repr(line[:40]), self._count(line), "final fit"))
            elif summary_text:
                dropped.append(Dropped("summary", "rolling summary", self._count(summary_text), "final fit"))
                summary_text = ""
            elif window_messages:
                removed = _drop_oldest_turn(window_messages)
                dropped.append(
                    Dropped(
                        "window",
                        f"seq {removed[0].seq}",
                        sum(m.token_count or 0 for m in removed),
                        "final fit",
                    )
                )
            else:  # pragma: no cover - mandatory parts were checked against the budget
                raise BudgetError(f"cannot fit the mandatory parts into {budget} tokens")

        messages: list[dict[str, Any]] = []
        if system_text:
            messages.append({"role": "system", "content": system_text})
        messages.extend(m.to_dict() for m in window_messages)
        if query_message is not None:
            messages.append(query_message.to_dict())

        prompt_tokens = self._system_tokens(system_prompt)
        facts_tokens = (
            self._block_tokens(headers["facts"] + "\n" + "\n".join(facts_lines)) if facts_lines else 0
        )
        summary_tokens = (
            self._block_tokens(headers["summary"] + _SEPARATOR + summary_text) if summary_text else 0
        )
        recall_tokens = self._recall_cost(recalled, headers)
        overhead_tokens = total - (
            prompt_tokens + facts_tokens + summary_tokens + recall_tokens + window_tokens + query_tokens
        )
        turns = sum(1 for m in window_messages if m.role is Role.USER)
        reports = (
            SectionReport(
                "system",
                prompt_tokens,
                None,
                1 if system_prompt else 0,
                "system prompt" if system_prompt else "no system prompt",
            ),
            SectionReport("facts", facts_tokens, caps["facts"], len(facts_lines)),
            SectionReport(
                "summary",
                summary_tokens,
                caps["summary"],
                1 if summary_text else 0,
                f"covers seq <= {request.summary_covers_through_seq}"
                if summary_text
                else ("earlier history omitted" if omitted else ""),
            ),
            SectionReport(
                "recall",
                recall_tokens,
                caps["recall"],
                len(recalled),
                f"share {request.recall_share:.2f} ({request.recall_share_reason})"
                if request.recall
                else request.recall_share_reason,
            ),
            SectionReport(
                "window",
                window_tokens,
                max(0, caps["window"]),
                len(window_messages),
                f"{turns} turns, keep_recent_turns={request.keep_recent_turns}",
            ),
            SectionReport("query", query_tokens, None, 1 if query_message else 0),
            SectionReport(
                "overhead",
                overhead_tokens,
                None,
                0,
                "reply priming, section separators, system message framing",
            ),
        )
        return BuiltContext(
            messages=messages,
            token_count=total,
            budget=budget,
            sections=reports,
            dropped=tuple(dropped),
            window=tuple(window_messages),
            system_text=system_text,
            recalled=tuple(recalled),
            language=request.language,
        )

    def _block_tokens(self, text: str) -> int:
        return self._count(text) + self._count(_SEPARATOR)


def _drop_oldest_turn(messages: list[Message]) -> list[Message]:
    """Remove the oldest turn of a window in place (so it still starts on a user message)."""
    end = 1
    while end < len(messages) and messages[end].role is not Role.USER:
        end += 1
    removed = messages[:end]
    del messages[:end]
    return removed
