"""A build's input and its state between the two steps: `ContextRequest` (what the
session gives: turns, summary, facts, shares) and `ContextPlan` (sections sized, window
chosen, recall's room known)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from .._derived.records import Summary
from .._models import Message, Turn
from .window import Dropped, WindowSelection

__all__ = ["ContextPlan", "ContextRequest"]


@dataclasses.dataclass(frozen=True)
class ContextRequest:
    """What one build needs beyond the `MemoryConfig`, gathered from the store."""

    budget: int
    turns: Sequence[Turn]
    """Window candidates, oldest first (the newest turns of the log)."""
    language: str = "en"
    """Language of the section headers (decided once per build, as for the fact lines)."""
    query: str | None = None
    include_query: bool = True
    facts: Sequence[str] = ()
    """Fact lines, newest first."""
    facts_reason: str = ""
    """Why facts the user has were not offered to this build, for ``explain()``."""
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
    recall_takes_unused: bool = True
    """Whether recall may also take what the window leaves of its part (a new chat has no
    turns, a short one few; whole turns or ``keep_recent_turns`` leave the rest). A build
    sets it when the query points to the past (`intent.points_to_past`); otherwise recall
    keeps to its share and the rest stays unused: a request that memory only may help is
    not given a long old answer for every token the window does not use."""
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
    framing_reserved: int = 0
    """Tokens set aside for the memory block's framing (tags, note, the left-out line), given
    back to the window when the block ends up holding no item."""

    @property
    def window_seqs(self) -> frozenset[int]:
        """Seqs the window holds, which recall must not bring back."""
        return self.window.seqs
