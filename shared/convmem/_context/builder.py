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

The builder only does arithmetic and rendering; `compose` runs the steps over
a session and hands it data. Recall must know which turns the window holds, and
the window's size depends on recall's share, so a build is two steps with the
recall search between them::

    plan = builder.plan(request)              # sections sized, window chosen
    items = recall.search(..., exclude_seqs=plan.window_seqs, max_tokens=plan.recall_room)
    context = builder.assemble(plan, items)   # recall fitted, room it left given back to the window

A summary longer than its share of this budget is shortened beforehand, by
the summarizer, to `ContextBuilder.summary_room` tokens.

Where each part lives: `request` (what a build needs, and the plan between the
steps), `costs` (token costs, each text counted once), `plan` (step one),
`assemble` (step two), `report` (`BuiltContext` and `explain()`), `window` (the
recent window), `compose` (the steps over a session: reads, recall, re-planning).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._config import MemoryConfig
from .._tokens import TokenCounter
from . import assemble as assembling
from . import plan as planning
from .costs import Costs
from .report import BuiltContext
from .request import ContextPlan, ContextRequest
from .window import WindowChooser

if TYPE_CHECKING:  # recall loads numpy; the builder only passes its items along
    from .._recall.render import RecalledItem

__all__ = ["ContextBuilder"]


class ContextBuilder:
    """Builds a session's contexts under its `MemoryConfig` and `TokenCounter`
    (see the module docstring for the steps)."""

    def __init__(self, config: MemoryConfig, counter: TokenCounter) -> None:
        self.config = config
        self.counter = counter
        self.costs = Costs(config, counter)
        self._windows = WindowChooser(
            keep_recent_turns=config.keep_recent_turns, prune_low_information=config.prune_low_information
        )

    def summary_room(self, request: ContextRequest) -> int | None:
        """How many tokens the summary's text may take in this build, when it takes more
        and there is room to shorten it into; None when it fits as it is (or cannot)."""
        return planning.summary_room(request, self.config, self.costs)

    def plan(self, request: ContextRequest) -> ContextPlan:
        """Size facts, summary and recall, and choose the window in what they leave."""
        return planning.plan(request, self.config, self.costs, self._windows)

    def recall_cost(self, items: Sequence[RecalledItem], plan: ContextPlan) -> int:
        """Tokens `items` take in the recall section of `plan` (its header included)."""
        return self.costs.recall(items, plan.headers)

    def assemble(self, plan: ContextPlan, recalled: Sequence[RecalledItem] = ()) -> BuiltContext:
        """Finish a build: fit the recalled items (ranked, best first) into recall's cap,
        give the room they leave back to the window, render and count the messages."""
        return assembling.assemble(plan, recalled, self.config, self.costs, self._windows)
