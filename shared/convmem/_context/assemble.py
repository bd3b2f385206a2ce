"""The second step of a build: fit the recalled items, give back the room they leave,
render the memory block and the messages, and account for every token.

The final list is counted once more as a whole; when tokenizer boundary effects push
it over the budget, the least important item goes (a recalled item, a fact line, the
summary, the omitted-history line, the oldest window turn), so the budget holds exactly
under the configured counter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._config import MemoryConfig
from .._errors import BudgetError
from .._language import MEMORY_CLOSE, MEMORY_OPEN, chat_api_message, neutralise_stored_text
from .._models import Message, Role
from .._tokens import REPLY_PRIMING_TOKENS, count_pieces, line_pieces
from .costs import SEPARATOR, Costs
from .plan import first_uncovered, older_uncovered
from .report import BuiltContext, SectionReport
from .request import ContextPlan, ContextRequest
from .window import Dropped, WindowChooser, WindowSelection

if TYPE_CHECKING:
    from .._recall.render import RecalledItem

__all__ = ["assemble"]


def assemble(
    plan: ContextPlan,
    recalled: Sequence[RecalledItem],
    config: MemoryConfig,
    costs: Costs,
    windows: WindowChooser,
) -> BuiltContext:
    """Finish a build: fit the recalled items (ranked, best first) into recall's cap,
    give the room they leave back to the window, render and count the messages."""
    window = plan.window
    chosen: list[RecalledItem] = []
    recall_cap = plan.caps["recall"]
    spare = 0
    if recall_cap > 0:
        chosen = _fit_recall(recalled, window.seqs, recall_cap, plan.headers, costs)
        spare = recall_cap - costs.recall(chosen, plan.headers)
    if plan.framing_reserved and not (chosen or plan.facts_lines or plan.summary_text):
        # A memory block with no item in it has no framing to pay for; the left-out
        # line keeps its room, as memory was on for this build and should say so.
        keep = costs.memory_message(plan.headers["omitted"]) if config.note_omitted_history else 0
        spare += max(0, plan.framing_reserved - keep)
    if spare > 0 and window.dropped:
        # Unused recall room goes back to the window; recalled items the
        # bigger window now holds are removed so nothing appears twice.
        window = windows.select(plan.request.turns, plan.caps["window"] + spare)
        chosen = [item for item in chosen if not set(item.local_seqs) & window.seqs]
    fitted = _Fitting(plan, window, chosen, [*plan.dropped, *window.dropped], offered=recalled)
    _fit_whole(fitted, config, costs)
    return _built(fitted, config, costs)


def _fit_recall(
    recalled: Sequence[RecalledItem],
    window_seqs: frozenset[int],
    cap: int,
    headers: Mapping[str, str],
    costs: Costs,
) -> list[RecalledItem]:
    used = costs.section(headers["recall"])
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


@dataclasses.dataclass
class _Fitting:
    """A build while its rendered messages are fitted to the budget."""

    plan: ContextPlan
    window: WindowSelection
    recalled: list[RecalledItem]
    dropped: list[Dropped]
    offered: Sequence[RecalledItem] = ()
    """What recall found, before fitting."""
    facts_lines: list[str] = dataclasses.field(default_factory=list)
    summary_text: str = ""
    window_messages: list[Message] = dataclasses.field(default_factory=list)
    omitted: bool = False
    memory_text: str = ""
    system_text: str = ""
    memory_tokens: int = 0
    window_tokens: int = 0
    query_tokens: int = 0
    total: int = 0

    def __post_init__(self) -> None:
        self.facts_lines = list(self.plan.facts_lines)
        self.summary_text = self.plan.summary_text
        self.window_messages = list(self.window.messages)


def _fit_whole(fitting: _Fitting, config: MemoryConfig, costs: Costs) -> None:
    """Render and count the whole context, giving up the least important item while
    tokenizer boundary effects make it cost more than the per-section estimates."""
    plan = fitting.plan
    request, headers = plan.request, plan.headers
    system_prompt, query_message = plan.system_prompt, plan.query_message
    fitting.query_tokens = costs.counter.count_message(query_message) if query_message else 0
    in_system = config.memory_placement == "system"
    room_for_omitted_line = config.note_omitted_history
    while True:
        omitted = room_for_omitted_line and _history_omitted(
            request, fitting.window_messages, fitting.recalled
        )
        memory_pieces = _render_memory(
            headers, fitting.facts_lines, fitting.summary_text, omitted, fitting.recalled
        )
        memory_text = "".join(memory_pieces)
        if in_system:
            if system_prompt and memory_pieces:
                system_pieces = [system_prompt, SEPARATOR, *memory_pieces]
            else:
                system_pieces = memory_pieces or [system_prompt]
            system_text = "".join(system_pieces)
            memory_tokens = 0
            system_tokens = costs.pieces(system_pieces, costs.system_message) if system_text else 0
        else:
            system_text = system_prompt
            memory_tokens = costs.pieces(memory_pieces, costs.memory_message) if memory_text else 0
            system_tokens = costs.system_message(system_text)
        window_tokens = sum(m.token_count or 0 for m in fitting.window_messages)
        total = REPLY_PRIMING_TOKENS + system_tokens + memory_tokens + window_tokens + fitting.query_tokens
        if total <= request.budget:
            break
        dropped = fitting.dropped
        if fitting.recalled:
            item = fitting.recalled.pop()
            dropped.append(Dropped("recall", f"seq {item.seqs[0]}", item.token_count, "final fit"))
        elif fitting.facts_lines:
            line = fitting.facts_lines.pop()
            dropped.append(Dropped("facts", repr(line[:40]), costs.text(line), "final fit"))
        elif fitting.summary_text:
            dropped.append(
                Dropped("summary", "rolling summary", costs.text(fitting.summary_text), "final fit")
            )
            fitting.summary_text = ""
        elif omitted and (
            not plan.framing_reserved or not _holds_more_than_one_turn(fitting.window_messages)
        ):
            # With nothing reserved for it (no memory on for this build), the left-out line
            # never costs a turn; otherwise it goes only when the newest turn is all
            # the window holds.
            room_for_omitted_line = False
            dropped.append(
                Dropped("summary", "omitted-history line", memory_tokens, "no room next to the newest turn")
            )
        elif fitting.window_messages:
            removed = _drop_oldest_turn(fitting.window_messages)
            dropped.append(
                Dropped(
                    "window", f"seq {removed[0].seq}", sum(m.token_count or 0 for m in removed), "final fit"
                )
            )
        else:  # pragma: no cover - mandatory parts were checked against the budget
            raise BudgetError(f"cannot fit the mandatory parts into {request.budget} tokens")
    fitting.omitted = omitted
    fitting.memory_text = memory_text
    fitting.system_text = system_text
    fitting.memory_tokens = memory_tokens
    fitting.window_tokens = window_tokens
    fitting.total = total


def _built(fitting: _Fitting, config: MemoryConfig, costs: Costs) -> BuiltContext:
    """The messages of a fitted build, with a report per section."""
    plan = fitting.plan
    in_system = config.memory_placement == "system"
    messages: list[dict[str, Any]] = []
    if fitting.system_text:
        messages.append({"role": "system", "content": fitting.system_text})
    if fitting.memory_text and not in_system:
        messages.append({"role": config.memory_placement, "content": fitting.memory_text})
    messages.extend(chat_api_message(m).to_dict() for m in fitting.window_messages)
    if plan.query_message is not None:
        messages.append(plan.query_message.to_dict())
    return BuiltContext(
        messages=messages,
        token_count=fitting.total,
        budget=plan.request.budget,
        sections=_section_reports(fitting, config, costs),
        dropped=tuple(fitting.dropped),
        window=tuple(fitting.window_messages),
        system_text=fitting.system_text,
        recalled=tuple(fitting.recalled),
        language=plan.request.language,
        memory_text=fitting.memory_text,
        memory_placement=config.memory_placement,
    )


def _recall_note(fitting: _Fitting) -> str:
    """Why recall has its share and what it found, and, when none of that is in the
    context, why not: the window holds it, or it did not fit."""
    note = fitting.plan.request.recall_reason
    if not fitting.offered or fitting.recalled:
        return note
    window = {m.seq for m in fitting.window_messages}
    held = all(set(item.local_seqs) & window for item in fitting.offered)
    return note + (
        "; none of it kept: the recent window holds it" if held else "; none of it kept: it did not fit"
    )


def _section_reports(fitting: _Fitting, config: MemoryConfig, costs: Costs) -> tuple[SectionReport, ...]:
    plan = fitting.plan
    request, headers, caps = plan.request, plan.headers, plan.caps
    system_prompt = plan.system_prompt
    prompt_tokens = costs.system_message(system_prompt)
    facts_lines, summary_text, recalled = fitting.facts_lines, fitting.summary_text, fitting.recalled
    facts_tokens = costs.section(headers["facts"] + "\n" + "\n".join(facts_lines)) if facts_lines else 0
    summary_tokens = costs.section(headers["summary"] + SEPARATOR + summary_text) if summary_text else 0
    # Counted as rendered: items cost less together than one by one (the estimate
    # used to fit them), and the report adds up to the total.
    recall_tokens = (
        count_pieces(
            costs.counter, [headers["recall"] + SEPARATOR, *_recalled_lines(recalled)], count=costs.text
        )
        + costs.text(SEPARATOR)
        if recalled
        else 0
    )
    overhead_tokens = fitting.total - (
        prompt_tokens
        + facts_tokens
        + summary_tokens
        + recall_tokens
        + fitting.window_tokens
        + fitting.query_tokens
    )
    turns = sum(1 for m in fitting.window_messages if m.role is Role.USER)
    summary_notes = (
        f"covers seq <= {request.summary.covers_through_seq}"
        if summary_text
        else ("earlier history omitted" if fitting.omitted else ""),
        request.summary_reason if request.summary.text.strip() else "",
    )
    return (
        SectionReport(
            "system",
            prompt_tokens,
            None,
            1 if system_prompt else 0,
            "system prompt" if system_prompt else "no system prompt",
        ),
        SectionReport("facts", facts_tokens, caps["facts"], len(facts_lines), request.facts_reason),
        SectionReport(
            "summary",
            summary_tokens,
            caps["summary"],
            1 if summary_text else 0,
            "; ".join(note for note in summary_notes if note),
        ),
        SectionReport(
            "recall",
            recall_tokens,
            caps["recall"],
            len(recalled),
            f"share {request.recall_share:.2f} ({_recall_note(fitting)})"
            if request.recall_share is not None
            else _recall_note(fitting),
        ),
        SectionReport(
            "window",
            fitting.window_tokens,
            max(0, caps["window"]),
            len(fitting.window_messages),
            f"{turns} turns, keep_recent_turns={config.keep_recent_turns}"
            + (", earlier turns left out (see below)" if fitting.omitted else "")
            + (
                # Recall found something and was kept to its share: what the window leaves is
                # room recall did not take (`ContextRequest.recall_takes_unused`).
                "; the rest stays unused: recall keeps to its share, the query does not point to the past"
                if request.recall_share is not None
                and not request.recall_takes_unused
                and recall_tokens
                and fitting.window_tokens < caps["window"]
                else ""
            ),
        ),
        SectionReport("query", fitting.query_tokens, None, 1 if plan.query_message else 0),
        SectionReport(
            "overhead",
            overhead_tokens,
            None,
            0,
            "reply priming, message framing, memory block tags and note, section separators",
        ),
    )


def _history_omitted(
    request: ContextRequest, window_messages: Sequence[Message], recalled: Sequence[RecalledItem]
) -> bool:
    """Whether some turn of the log is in none of summary, window and recall."""
    if older_uncovered(request):
        return True
    if request.first_log_seq is None:
        return False
    first = first_uncovered(request)
    present = {m.seq for m in window_messages}
    present.update(seq for item in recalled for seq in item.local_seqs)
    return any(turn.first_seq >= first and turn.first_seq not in present for turn in request.turns)


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
        blocks.append([headers["summary"] + SEPARATOR, summary_text])
    if omitted:
        blocks.append([headers["omitted"]])
    if recalled:
        blocks.append([headers["recall"] + SEPARATOR, *_recalled_lines(recalled)])
    if blocks == [[headers["omitted"]]]:
        return blocks[0]  # no stored text in it: nothing to fence
    if not blocks:
        return []
    pieces = [f"{MEMORY_OPEN}\n{headers['memory_note']}{SEPARATOR}"]
    for index, block in enumerate(blocks):
        if index:
            pieces.append(SEPARATOR)
        pieces.extend(block)
    # The closing tag opens a line of its own: the last item's line, ended, is counted apart
    # from it (`count_pieces`), from what counting that item alone kept.
    pieces[-1] += "\n"
    pieces.append(MEMORY_CLOSE)
    return pieces


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
