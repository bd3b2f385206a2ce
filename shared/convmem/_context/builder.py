"""The context builder: fits system prompt, facts, summary, recalled turns,
the recent window and the query into one token budget.

Sections, in prompt order, with how they are sized:

    system   mandatory                    the configured system prompt
    facts    up to its share              core facts about the user, newest first
    summary  up to its share              the rolling summary of evicted turns
    recall   up to its (chosen) share     earlier turns relevant to the query
    window   everything that is left      the newest turns, whole
    query    mandatory                    the new user message

The memory block's framing comes out of the window's part; what the window
cannot pay of it (when only its newest turn fits, or none) comes out of
recall's, and what the window's whole turns leave of its part (less than the
next turn) goes to recall, which gives back what it does not fill.

Facts, summary and recall come from user and assistant text, so they are
data, not instructions: they are rendered into one memory block, wrapped in
``<memory>…</memory>`` with a line saying so, and placed by
``MemoryConfig.memory_placement``: by default in a user-role message between
the system prompt and the window (the system message holds only the
configured system prompt), or in a developer message, or appended to the
system message. Stored text is neutralised first (`neutralise_stored_text`),
so it can never open or close a section. Whenever turns of the log are
neither in the window nor covered by the summary (nor recalled), the block
says that earlier conversation was left out. Every figure comes from counts stored with
the messages or from counting the few section texts; the final message list is
then counted once more as a whole, and trimmed if tokenizer boundary effects
pushed it over, so the budget holds exactly under the configured counter.

The builder only does arithmetic and rendering; the facade runs the steps
and hands it data. Recall must know which turns the window holds, and the
window's size depends on recall's share, so a build is two steps with the
recall search between them::

    plan = builder.plan(request)              # sections sized, window chosen
    items = recall.search(..., exclude_seqs=plan.window_seqs, max_tokens=plan.recall_room)
    context = builder.assemble(plan, items)   # recall fitted, room it left given back to the window

A summary longer than its share of this budget is shortened beforehand, by
the summarizer, to `ContextBuilder.summary_room` tokens.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig
from .._derived.state import Summary
from .._errors import BudgetError
from .._language import MEMORY_CLOSE, MEMORY_OPEN, chat_api_message, neutralise_stored_text
from .._language import SECTION_HEADERS as HEADERS
from .._models import Message, Role, Turn
from .._tokens import REPLY_PRIMING_TOKENS, TextTokenCounter, TokenCounter, count_pieces, line_pieces
from .window import Dropped, WindowCandidates, WindowSelection

if TYPE_CHECKING:  # recall loads numpy; the builder only passes its items along
    from .._recall.render import RecalledItem

__all__ = ["BuiltContext", "ContextBuilder", "ContextPlan", "ContextRequest", "SectionReport"]

_SEPARATOR = "\n\n"


@dataclasses.dataclass(frozen=True)
class ContextRequest:
    """What one build needs beyond the `MemoryConfig`; the facade gathers it from the store."""

    budget: int
    turns: Sequence[Turn]
    """Window candidates, oldest first (the newest turns of the log)."""
    language: str = "en"
    """Language of the section headers (decided once per build, as for the fact lines)."""
    query: str | None = None
    include_query: bool = True
    facts: Sequence[str] = ()
    """Fact lines, newest first."""
    summary: Summary = dataclasses.field(default_factory=Summary)
    """The rolling summary, already shortened to `ContextBuilder.summary_room` if it was over."""
    first_log_seq: int | None = None
    """Seq of the oldest message of the log, to tell whether history was omitted."""
    log_tokens: int = 0
    """Tokens of the whole log (stored counts), to report what lies before the candidates."""
    recall_share: float | None = None
    """Recall's share of what facts and summary leave; None when this build recalls nothing."""
    recall_reason: str = "no recall"
    """Why recall got that share (or none), for ``explain()``."""
    summary_share: float | None = None
    """The summary's share in this build when it is not the config's (see
    `MemoryConfig.past_summary_share`); None: ``config.summary_share``."""
    summary_reason: str = ""
    """Why the summary got `summary_share`, for ``explain()``."""


@dataclasses.dataclass(frozen=True)
class ContextPlan:
    """A build between its two steps: every section sized and the window chosen.

    Recall may fill `recall_room` tokens with items outside `window_seqs`;
    `ContextBuilder.assemble` then finishes the build.
    """

    request: ContextRequest
    headers: Mapping[str, str]
    system_prompt: str
    query_message: Message | None
    facts_lines: tuple[str, ...]
    summary_text: str
    caps: Mapping[str, int]
    """Token caps of the facts, summary, recall and window sections."""
    window: WindowSelection
    dropped: tuple[Dropped, ...]
    recall_room: int
    """Tokens the recalled items may take (the recall cap less its header); 0: nothing to search."""

    @property
    def window_seqs(self) -> frozenset[int]:
        """Seqs the window holds, which recall must not bring back."""
        return self.window.seqs


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
    """Builds a session's contexts under its `MemoryConfig` and `TokenCounter`
    (see the module docstring for the steps)."""

    def __init__(self, config: MemoryConfig, counter: TokenCounter) -> None:
        self.config = config
        self.counter = counter
        # The same summary, fact lines, headers and system text come back on
        # every build of a session: count each distinct text once.
        self._count: Callable[[str], int] = functools.lru_cache(maxsize=2048)(counter.count_text)
        self._candidates: WindowCandidates | None = None
        # Whether a message costs its framing plus its text counted alone, as
        # `TextTokenCounter` counts it unless a subclass counts messages its own way.
        kind = type(counter)
        self._framing_plus_text = isinstance(counter, TextTokenCounter) and all(
            getattr(kind, name) is getattr(TextTokenCounter, name)
            for name in ("count_message", "count_fields", "count_content")
        )
        self._count_system: Callable[[str], int] = functools.lru_cache(maxsize=256)(
            lambda text: counter.count_message(Message(role=Role.SYSTEM, content=text))
        )
        self._count_user: Callable[[str], int] = functools.lru_cache(maxsize=256)(
            lambda text: counter.count_message(Message(role=Role.USER, content=text))
        )

    def _system_tokens(self, text: str) -> int:
        return self._count_system(text) if text else 0

    def _memory_message_tokens(self, text: str) -> int:
        """What the memory block costs as a message of its own (user or developer)."""
        if not text:
            return 0
        if self.config.memory_placement == "developer":
            return self._count_system(text) - self._count("system") + self._count("developer")
        return self._count_user(text)

    def _pieces_tokens(self, pieces: Sequence[str], message: Callable[[str], int]) -> int:
        """What a message whose content is ``"".join(pieces)`` costs, `message` counting
        such a message from its text. A counter that counts a message as its framing
        plus its text counts the pieces (`count_pieces`), not the joined text again."""
        if not self._framing_plus_text:
            return message("".join(pieces))
        return message(" ") - self._count(" ") + count_pieces(self.counter, pieces, count=self._count)

    def _framing_cost(self, headers: Mapping[str, str], system_prompt: str) -> int:
        """Tokens the memory block costs beyond its sections: tags, note, message framing."""
        tags = (
            self._count(f"{MEMORY_OPEN}\n{headers['memory_note']}")
            + self._count(_SEPARATOR)
            + self._count(f"\n{MEMORY_CLOSE}")
        )
        if self.config.memory_placement != "system":
            return tags + self._memory_message_tokens(" ") - self._count(" ")
        if system_prompt:
            return tags + self._count(_SEPARATOR)
        return tags + self._system_tokens(" ") - self._count(" ")

    def _section_cost(self, text: str) -> int:
        return self._count(text) + self._count(_SEPARATOR)

    def _summary_tokens(self, text: str, headers: Mapping[str, str]) -> int:
        return self._section_cost(headers["summary"]) + self._section_cost(text) if text else 0

    def _available(self, request: ContextRequest) -> tuple[str, Message | None, int]:
        """The system prompt, the query message and the tokens the mandatory parts leave."""
        budget = request.budget
        if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
            raise BudgetError(f"budget must be a positive int, got {budget!r}")
        system_prompt = (self.config.system_prompt or "").strip()
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
        return system_prompt, query_message, budget - mandatory

    def _summary_share(self, request: ContextRequest) -> float:
        return self.config.summary_share if request.summary_share is None else request.summary_share

    def summary_room(self, request: ContextRequest) -> int | None:
        """How many tokens the summary's text may take in this build, when it takes more
        and there is room to shorten it into; None when it fits as it is (or cannot)."""
        text = request.summary.text.strip()
        if not text:
            return None
        _, _, available = self._available(request)
        headers = HEADERS.get(request.language, HEADERS["en"])
        cap = int(available * self._summary_share(request))
        room = cap - self._section_cost(headers["summary"]) - self._count(_SEPARATOR)
        return room if self._summary_tokens(text, headers) > cap and room > 0 else None

    def plan(self, request: ContextRequest) -> ContextPlan:
        """Size facts, summary and recall, and choose the window in what they leave."""
        system_prompt, query_message, available = self._available(request)
        headers = HEADERS.get(request.language, HEADERS["en"])
        dropped: list[Dropped] = self._older_history(request)

        # facts: header + lines, newest first, up to the share
        facts_cap = int(available * self.config.facts_share)
        facts_lines: list[str] = []
        facts_tokens = 0
        if request.facts:
            used = self._section_cost(headers["facts"])
            for line in map(neutralise_stored_text, request.facts):
                cost = self._count(line) + 1  # the newline before it
                if used + cost <= facts_cap:
                    facts_lines.append(line)
                    used += cost
                else:
                    dropped.append(Dropped("facts", repr(line[:40]), cost, "over the facts share"))
            facts_tokens = used if facts_lines else 0

        # summary: whole or not at all (summarizers keep it within the share)
        summary_cap = int(available * self._summary_share(request))
        summary_text = neutralise_stored_text(request.summary.text.strip())
        summary_tokens = self._summary_tokens(summary_text, headers)
        if summary_tokens > summary_cap:
            dropped.append(
                Dropped("summary", "rolling summary", summary_tokens, f"larger than its cap {summary_cap}")
            )
            summary_text, summary_tokens = "", 0

        fixed = facts_tokens + summary_tokens
        # Recall's share is of what facts and summary leave, so a share picked
        # per query (up to nearly all of it) still leaves the window its part.
        share = request.recall_share
        recall_cap = int((available - fixed) * share) if share is not None else 0
        window_cap = available - fixed - recall_cap
        candidates_tokens = sum(turn.token_count for turn in request.turns)
        if (
            facts_lines
            or summary_text
            or recall_cap
            or candidates_tokens > window_cap
            or (
                self.config.keep_recent_turns is not None
                and len(request.turns) > self.config.keep_recent_turns
            )
            or self._older_uncovered(request)
        ):
            # The memory block will be there: its framing, and the line saying that
            # history was left out, come out of the window's part.
            framing = self._framing_cost(headers, system_prompt) + self._section_cost(headers["omitted"])
            window = self._select_window(request.turns, window_cap - framing)
            if not window.messages and request.turns:
                # The newest turn outranks the framing: when only it fits, it stays.
                window = self._select_window(request.turns, window_cap)
            # What the window's part cannot pay of the framing (the newest turn kept, or
            # a window too small for it) comes out of recall's: otherwise recall fills
            # room that the final fit takes back, an item at a time from the end of the log.
            unpaid = window.tokens + framing - window_cap
            if unpaid > 0:
                recall_cap = max(0, recall_cap - unpaid)
            window_cap = max(window.tokens, window_cap - framing)
        else:
            window = self._select_window(request.turns, window_cap)
        if share is not None and window.tokens < window_cap:
            # The window keeps whole turns: what they leave of its part is less than the
            # next turn, so only recall can use it (and `assemble` gives back what it leaves).
            recall_cap += window_cap - window.tokens
            window_cap = window.tokens
        recall_header = self._section_cost(headers["recall"])
        return ContextPlan(
            request=request,
            headers=headers,
            system_prompt=system_prompt,
            query_message=query_message,
            facts_lines=tuple(facts_lines),
            summary_text=summary_text,
            caps={"facts": facts_cap, "summary": summary_cap, "recall": recall_cap, "window": window_cap},
            window=window,
            dropped=tuple(dropped),
            recall_room=recall_cap - recall_header if recall_cap > recall_header else 0,
        )

    def assemble(self, plan: ContextPlan, recalled: Sequence[RecalledItem] = ()) -> BuiltContext:
        """Finish a build: fit the recalled items (ranked, best first) into recall's cap,
        give the room they leave back to the window, render and count the messages."""
        window = plan.window
        chosen: list[RecalledItem] = []
        recall_cap = plan.caps["recall"]
        if recall_cap > 0:
            chosen = self._fit_recall(recalled, window.seqs, recall_cap, plan.headers)
            spare = recall_cap - self._recall_cost(chosen, plan.headers)
            if spare > 0 and window.dropped:
                # Unused recall room goes back to the window; recalled items the
                # bigger window now holds are removed so nothing appears twice.
                window = self._select_window(plan.request.turns, plan.caps["window"] + spare)
                chosen = [item for item in chosen if not set(item.local_seqs) & window.seqs]
        return self._assemble(plan, window, chosen, [*plan.dropped, *window.dropped])

    def _select_window(self, turns: Sequence[Turn], max_tokens: int) -> WindowSelection:
        # A build chooses from the same turns two or three times, and builds between
        # two writes to the log share one list of turns: prepare each list once.
        cached = self._candidates
        if cached is None or cached.turns is not turns:
            cached = self._candidates = WindowCandidates(
                turns,
                keep_recent_turns=self.config.keep_recent_turns or max(1, len(turns)),
                prune_low_information=self.config.prune_low_information,
            )
        return cached.select(max(0, max_tokens))

    def recall_cost(self, items: Sequence[RecalledItem], plan: ContextPlan) -> int:
        """Tokens `items` take in the recall section of `plan` (its header included)."""
        return self._recall_cost(items, plan.headers)

    def _recall_cost(self, items: Sequence[RecalledItem], headers: Mapping[str, str]) -> int:
        if not items:
            return 0
        return self._section_cost(headers["recall"]) + sum(item.token_count + 1 for item in items)

    def _fit_recall(
        self,
        recalled: Sequence[RecalledItem],
        window_seqs: frozenset[int],
        cap: int,
        headers: Mapping[str, str],
    ) -> list[RecalledItem]:
        used = self._section_cost(headers["recall"])
        chosen: list[RecalledItem] = []
        if cap <= used:
            return chosen
        for item in recalled:
            if set(item.local_seqs) & window_seqs:
                continue
            cost = item.token_count + 1
            if used + cost <= cap:
                chosen.append(item)
                used += cost
        return chosen

    @staticmethod
    def _older_history(request: ContextRequest) -> list[Dropped]:
        """What lies before the window candidates: never read, only reported."""
        if request.first_log_seq is None:
            return []
        start = request.turns[0].first_seq if request.turns else None
        if start is None or start <= request.first_log_seq:
            return []
        tokens = request.log_tokens - sum(t.token_count for t in request.turns)
        covered = request.summary.covers_through_seq
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
    def _first_uncovered(request: ContextRequest) -> int:
        assert request.first_log_seq is not None
        return max(request.summary.covers_through_seq + 1, request.first_log_seq)

    @classmethod
    def _older_uncovered(cls, request: ContextRequest) -> bool:
        """Whether turns before the window candidates are not covered by the summary."""
        if request.first_log_seq is None or not request.turns:
            return False
        return request.turns[0].first_seq > cls._first_uncovered(request)

    @classmethod
    def _history_omitted(
        cls, request: ContextRequest, window_messages: Sequence[Message], recalled: Sequence[RecalledItem]
    ) -> bool:
        """Whether some turn of the log is in none of summary, window and recall."""
        if cls._older_uncovered(request):
            return True
        if request.first_log_seq is None:
            return False
        first_uncovered = cls._first_uncovered(request)
        present = {m.seq for m in window_messages}
        present.update(seq for item in recalled for seq in item.local_seqs)
        return any(
            turn.first_seq >= first_uncovered and turn.first_seq not in present for turn in request.turns
        )

    @staticmethod
    def _render_memory(
        headers: Mapping[str, str],
        facts_lines: Sequence[str],
        summary_text: str,
        omitted: bool,
        recalled: Sequence[RecalledItem],
    ) -> list[str]:
        """The memory block as pieces to join: a piece per recalled item, so that the
        block is counted item by item where the counter can (`count_pieces`)."""
        blocks: list[list[str]] = []
        if facts_lines:
            blocks.append([headers["facts"] + "\n" + "\n".join(facts_lines)])
        if summary_text:
            blocks.append([headers["summary"] + _SEPARATOR, summary_text])
        if omitted:
            blocks.append([headers["omitted"]])
        if recalled:
            blocks.append([headers["recall"] + _SEPARATOR, *_recalled_lines(recalled)])
        if blocks == [[headers["omitted"]]]:
            return blocks[0]  # no stored text in it: nothing to fence
        if not blocks:
            return []
        pieces = [f"{MEMORY_OPEN}\n{headers['memory_note']}{_SEPARATOR}"]
        for index, block in enumerate(blocks):
            if index:
                pieces.append(_SEPARATOR)
            pieces.extend(block)
        pieces.append(f"\n{MEMORY_CLOSE}")
        return pieces

    def _assemble(
        self,
        plan: ContextPlan,
        window: WindowSelection,
        recalled: list[RecalledItem],
        dropped: list[Dropped],
    ) -> BuiltContext:
        request, headers, caps = plan.request, plan.headers, plan.caps
        budget = request.budget
        system_prompt, query_message = plan.system_prompt, plan.query_message
        facts_lines = list(plan.facts_lines)
        summary_text = plan.summary_text
        window_messages = list(window.messages)
        query_tokens = self.counter.count_message(query_message) if query_message else 0
        in_system = self.config.memory_placement == "system"
        room_for_omitted_line = True
        while True:
            omitted = room_for_omitted_line and self._history_omitted(request, window_messages, recalled)
            memory_pieces = self._render_memory(headers, facts_lines, summary_text, omitted, recalled)
            memory_text = "".join(memory_pieces)
            if in_system:
                if system_prompt and memory_pieces:
                    system_pieces = [system_prompt, _SEPARATOR, *memory_pieces]
                else:
                    system_pieces = memory_pieces or [system_prompt]
                system_text = "".join(system_pieces)
                memory_tokens = 0
                system_tokens = self._pieces_tokens(system_pieces, self._count_system) if system_text else 0
            else:
                system_text = system_prompt
                memory_tokens = (
                    self._pieces_tokens(memory_pieces, self._memory_message_tokens) if memory_text else 0
                )
                system_tokens = self._system_tokens(system_text)
            window_tokens = sum(m.token_count or 0 for m in window_messages)
            total = REPLY_PRIMING_TOKENS + system_tokens + memory_tokens + window_tokens + query_tokens
            if total <= budget:
                break
            # Tokenizer boundary effects can cost a few tokens more than the
            # per-section estimate: give up the least important item.
            if recalled:
                item = recalled.pop()
                dropped.append(Dropped("recall", f"seq {item.seqs[0]}", item.token_count, "final fit"))
            elif facts_lines:
                line = facts_lines.pop()
                dropped.append(Dropped("facts", repr(line[:40]), self._count(line), "final fit"))
            elif summary_text:
                dropped.append(Dropped("summary", "rolling summary", self._count(summary_text), "final fit"))
                summary_text = ""
            elif omitted and not _holds_more_than_one_turn(window_messages):
                room_for_omitted_line = False
                dropped.append(
                    Dropped(
                        "summary", "omitted-history line", memory_tokens, "no room next to the newest turn"
                    )
                )
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
        if memory_text and not in_system:
            messages.append({"role": self.config.memory_placement, "content": memory_text})
        messages.extend(chat_api_message(m).to_dict() for m in window_messages)
        if query_message is not None:
            messages.append(query_message.to_dict())

        prompt_tokens = self._system_tokens(system_prompt)
        facts_tokens = (
            self._section_cost(headers["facts"] + "\n" + "\n".join(facts_lines)) if facts_lines else 0
        )
        summary_tokens = (
            self._section_cost(headers["summary"] + _SEPARATOR + summary_text) if summary_text else 0
        )
        # Counted as rendered: items cost less together than one by one (the estimate
        # used to fit them), and the report adds up to the total.
        recall_tokens = (
            count_pieces(
                self.counter, [headers["recall"] + _SEPARATOR, *_recalled_lines(recalled)], count=self._count
            )
            + self._count(_SEPARATOR)
            if recalled
            else 0
        )
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
                "; ".join(
                    note
                    for note in (
                        f"covers seq <= {request.summary.covers_through_seq}"
                        if summary_text
                        else ("earlier history omitted" if omitted else ""),
                        request.summary_reason if request.summary.text.strip() else "",
                    )
                    if note
                ),
            ),
            SectionReport(
                "recall",
                recall_tokens,
                caps["recall"],
                len(recalled),
                f"share {request.recall_share:.2f} ({request.recall_reason})"
                if request.recall_share is not None
                else request.recall_reason,
            ),
            SectionReport(
                "window",
                window_tokens,
                max(0, caps["window"]),
                len(window_messages),
                f"{turns} turns, keep_recent_turns={self.config.keep_recent_turns}"
                + (", earlier turns left out (see below)" if omitted else ""),
            ),
            SectionReport("query", query_tokens, None, 1 if query_message else 0),
            SectionReport(
                "overhead",
                overhead_tokens,
                None,
                0,
                "reply priming, message framing, memory block tags and note, section separators",
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
            memory_text=memory_text,
            memory_placement=self.config.memory_placement,
        )


def _recalled_lines(recalled: Sequence[RecalledItem]) -> list[str]:
    """The recall section's items, neutralised, as pieces that each end a line."""
    return line_pieces([neutralise_stored_text(item.text) for item in recalled])


def _holds_more_than_one_turn(messages: Sequence[Message]) -> bool:
    return sum(1 for m in messages if m.role is Role.USER) > 1


def _drop_oldest_turn(messages: list[Message]) -> list[Message]:
    """Remove the oldest turn of a window in place (so it still starts on a user message)."""
    end = 1
    while end < len(messages) and messages[end].role is not Role.USER:
        end += 1
    removed = messages[:end]
    del messages[:end]
    return removed
