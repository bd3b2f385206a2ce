"""The first step of a build: size facts, summary and recall, and choose the window in
what they leave (see `builder` for the whole algorithm)."""

from __future__ import annotations

from .._config import MemoryConfig
from .._errors import BudgetError
from .._language import SECTION_HEADERS as HEADERS
from .._language import neutralise_stored_text
from .._models import Message, Role
from .._tokens import REPLY_PRIMING_TOKENS
from .costs import SEPARATOR, Costs
from .request import ContextPlan, ContextRequest
from .window import Dropped, WindowChooser

__all__ = ["available", "first_uncovered", "older_uncovered", "plan", "summary_room"]


def available(request: ContextRequest, config: MemoryConfig, costs: Costs) -> tuple[str, Message | None, int]:
    """The system prompt, the query message and the tokens the mandatory parts leave."""
    budget = request.budget
    if not isinstance(budget, int) or isinstance(budget, bool) or budget <= 0:
        raise BudgetError(f"budget must be a positive int, got {budget!r}")
    system_prompt = (config.system_prompt or "").strip()
    query_message = None
    query_tokens = 0
    if request.query is not None and request.include_query:
        query_message = Message(role=Role.USER, content=request.query)
        query_tokens = costs.counter.count_message(query_message)
    system_tokens = costs.system_message(system_prompt)
    mandatory = REPLY_PRIMING_TOKENS + system_tokens + query_tokens
    if mandatory > budget:
        raise BudgetError(
            f"budget {budget} is smaller than the mandatory parts: system prompt {system_tokens} + "
            f"query {query_tokens} + reply priming {REPLY_PRIMING_TOKENS} = {mandatory} tokens; "
            "raise the budget or shorten the system prompt or query"
        )
    return system_prompt, query_message, budget - mandatory


def _summary_share(request: ContextRequest, config: MemoryConfig) -> float:
    return config.summary_share if request.summary_share is None else request.summary_share


def summary_room(request: ContextRequest, config: MemoryConfig, costs: Costs) -> int | None:
    """How many tokens the summary's text may take in this build, when it takes more
    and there is room to shorten it into; None when it fits as it is (or cannot)."""
    text = request.summary.text.strip()
    if not text:
        return None
    _, _, room_left = available(request, config, costs)
    headers = HEADERS.get(request.language, HEADERS["en"])
    cap = int(room_left * _summary_share(request, config))
    room = cap - costs.section(headers["summary"]) - costs.text(SEPARATOR)
    return room if costs.summary(text, headers) > cap and room > 0 else None


def plan(request: ContextRequest, config: MemoryConfig, costs: Costs, windows: WindowChooser) -> ContextPlan:
    """Size facts, summary and recall, and choose the window in what they leave."""
    system_prompt, query_message, room_left = available(request, config, costs)
    headers = HEADERS.get(request.language, HEADERS["en"])
    dropped: list[Dropped] = _older_history(request)

    # facts: header + lines, newest first, up to the share
    facts_cap = int(room_left * config.facts_share)
    facts_lines: list[str] = []
    facts_tokens = 0
    if request.facts:
        used = costs.section(headers["facts"])
        for line in map(neutralise_stored_text, request.facts):
            cost = costs.text(line) + 1  # the newline before it
            if used + cost <= facts_cap:
                facts_lines.append(line)
                used += cost
            else:
                dropped.append(Dropped("facts", repr(line[:40]), cost, "over the facts share"))
        facts_tokens = used if facts_lines else 0

    # summary: whole or not at all (summarizers keep it within the share)
    summary_cap = int(room_left * _summary_share(request, config))
    summary_text = neutralise_stored_text(request.summary.text.strip())
    summary_tokens = costs.summary(summary_text, headers)
    if summary_tokens > summary_cap:
        dropped.append(
            Dropped("summary", "rolling summary", summary_tokens, f"larger than its cap {summary_cap}")
        )
        summary_text, summary_tokens = "", 0

    fixed = facts_tokens + summary_tokens
    # Recall's share is of what facts and summary leave, so a share picked
    # per query (up to nearly all of it) still leaves the window its part.
    share = request.recall_share
    recall_cap = int((room_left - fixed) * share) if share is not None else 0
    window_cap = room_left - fixed - recall_cap
    framing_reserved = 0
    if facts_lines or summary_text or recall_cap:
        # The memory block will hold items: its framing, and the line saying that
        # history was left out, come out of the window's part. The line alone, with
        # nothing else to show, never takes a turn's room: `assemble` adds it only
        # where the window leaves room for it.
        framing = costs.framing(headers, system_prompt)
        if config.note_omitted_history:
            framing += costs.section(headers["omitted"])
        before = window_cap + recall_cap
        window = windows.select(request.turns, window_cap - framing)
        if not window.messages and request.turns:
            # The newest turn outranks the framing: when only it fits, it stays.
            window = windows.select(request.turns, window_cap)
        # What the window's part cannot pay of the framing (the newest turn kept, or
        # a window too small for it) comes out of recall's: otherwise recall fills
        # room that the final fit takes back, an item at a time from the end of the log.
        unpaid = window.tokens + framing - window_cap
        if unpaid > 0:
            recall_cap = max(0, recall_cap - unpaid)
        window_cap = max(window.tokens, window_cap - framing)
        framing_reserved = before - window_cap - recall_cap
    else:
        window = windows.select(request.turns, window_cap)
    if share is not None and window.tokens < window_cap and request.recall_takes_unused:
        # The window keeps whole turns: what they leave of its part is less than the
        # next turn, or the chat is short, so only recall can use it (and `assemble` gives
        # back what it leaves). Only a query pointing to the past takes it: for another,
        # memory only may help, and its share is what it is worth.
        recall_cap += window_cap - window.tokens
        window_cap = window.tokens
    recall_header = costs.section(headers["recall"])
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
        framing_reserved=framing_reserved,
    )


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


def first_uncovered(request: ContextRequest) -> int:
    """The first seq of the log the summary does not cover."""
    assert request.first_log_seq is not None
    return max(request.summary.covers_through_seq + 1, request.first_log_seq)


def older_uncovered(request: ContextRequest) -> bool:
    """Whether turns before the window candidates are not covered by the summary."""
    if request.first_log_seq is None or not request.turns:
        return False
    return request.turns[0].first_seq > first_uncovered(request)
