"""`MemoryConfig`: every knob of a `ConversationMemory`, validated on creation."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from ._errors import ConfigError
from ._language import SECTION_HEADERS, speaker_prefix
from ._models import Role
from ._options import MAX_INT_OPTION, check_bool, check_choice, check_int, check_number

__all__ = ["MAX_INT_OPTION", "MemoryConfig", "MemoryPlacement", "TranscriptTemplate"]

# A background job that runs longer than a day is hung; larger values overflow thread waits.
MAX_BACKGROUND_TIMEOUT = 86_400.0

Language = Literal["auto", "zh", "en"]
SummaryTrigger = Literal["tokens", "turns", "never"]
MemoryPlacement = Literal["user", "system", "developer"]


@dataclasses.dataclass(frozen=True)
class TranscriptTemplate:
    """Header and role labels of a rendered transcript."""

    header: str
    user_label: str
    assistant_label: str

    @classmethod
    def for_language(cls, language: str) -> TranscriptTemplate:
        """The built-in template for ``"zh"``; the English one for any other language."""
        return TRANSCRIPT_ZH if language == "zh" else TRANSCRIPT_EN

    @classmethod
    def _builtin(cls, language: str) -> TranscriptTemplate:
        return cls(
            SECTION_HEADERS[language]["transcript"],
            speaker_prefix(Role.USER, language),
            speaker_prefix(Role.ASSISTANT, language),
        )


TRANSCRIPT_ZH = TranscriptTemplate._builtin("zh")
TRANSCRIPT_EN = TranscriptTemplate._builtin("en")


@dataclasses.dataclass(frozen=True)
class MemoryConfig:
    """Configuration of a `ConversationMemory`.

    Budget shares are fractions of what is left of the budget after the
    mandatory parts (system prompt, query, per-message overhead): facts and
    summary take what they need up to their share of it, recall up to its share
    of what they leave (a `Recall` engine may raise or lower that share per
    query), and the recent window gets everything else, so an empty section
    costs nothing.

    Example::

        MemoryConfig(budget=2048, keep_recent_turns=6, system_prompt="You are helpful.")
    """

    budget: int = 4096
    """Default token budget of `build_context` (a call may pass its own)."""
    system_prompt: str | None = None
    keep_recent_turns: int | None = None
    """A cap on the turns of the recent window; None (the default): no cap, the window
    holds every turn that fits its token share and turns leave it only when the budget is
    full. With a cap, turns beyond it leave the window (and go to the summary) even when
    there is room.

    What counts as evicted for the rolling summary: with a cap, every turn before the
    last `keep_recent_turns`; without one, every turn before the newest turns that fit
    `eviction_window_tokens` (the window's guaranteed part of the default `budget`), so
    a turn is summarized before it can fall out of a context of the default budget."""
    memory_placement: MemoryPlacement = "user"
    """Where facts, summary and recalled turns go. They come from user and assistant
    text, so by default they never get system authority:

    - ``"user"``: a user-role context message between the system prompt and the
      recent window, wrapped in ``<memory>…</memory>`` with a line saying it is
      reference data, not instructions. The window starts with a user message too,
      so the context may hold two user messages in a row (OpenAI, Anthropic and
      most chat APIs accept that; Anthropic merges them).
    - ``"developer"``: the same block in a ``developer`` message (OpenAI models that
      have the developer role); the system message keeps only the system prompt.
    - ``"system"``: the same block appended to the system message (the old layout,
      for models that accept only one leading system message and strict alternation).

    In every placement stored text cannot open or close a section (see
    `convmem.neutralise_stored_text`) and fact lines are one capped line each."""
    facts_share: float = 0.10
    summary_share: float = 0.20
    recall_share: float = 0.25
    past_summary_share: float = 0.05
    """The summary's share when the query points to the past ("what did I say about...",
    "when did...", 之前, 上次; see `choose_recall_share`), if below `summary_share`,
    and recall needs the room: recall then brings the very turns asked about, which
    are worth more than their digest. When what recall finds fits beside the summary
    at its full share, the summary keeps it (measured on LoCoMo: see benchmarks/README.md)."""
    note_omitted_history: bool = True
    """Say so in the context whenever turns of the log are in none of window, summary and
    recall (one line: "(Some earlier conversation is not included here.)"), so the model
    does not take the window for the whole conversation. False leaves the line out: with
    facts, summary and recall off too, the context is then exactly the newest turns that
    fit, as a plain token-limited buffer keeps them."""
    prune_low_information: bool = True
    """When the window is tight, drop greetings/thanks/"ok" turns before older informative ones."""
    language: Language = "auto"
    """Language of section headers and transcript labels; "auto" detects it from the conversation."""
    max_message_chars: int = 1_000_000
    """Messages longer than this are rejected on `add` (nothing is stored)."""
    max_message_bytes: int = 4 * 1024 * 1024
    """Messages larger than this (4 MiB) serialized, counting images, tool-call arguments
    and metadata, are rejected on `add` before anything is counted or stored."""

    # Transcript views
    transcript_turns: int = 10
    transcript_message_chars: int = 500
    transcript_max_chars: int = 4000
    transcript_template: TranscriptTemplate | None = None
    """Labels for `render_transcript`; None picks Chinese or English by `language`."""

    # Rolling summary
    summary_trigger: SummaryTrigger = "tokens"
    """When evicted turns are folded into the summary; "never" switches automatic
    summarizing off (`summarize_now` still works)."""
    summary_threshold: float = 0.7
    """With trigger "tokens": summarize when unsummarized evicted history exceeds this
    fraction of the summary section's share of the default budget."""
    summary_every_turns: int = 10
    """With trigger "turns": summarize every this many evicted turns."""
    extract_facts: bool = True
    """Extract core facts about the user from their messages (the facts section).
    The one switch for facts: False turns them off; a memory's ``fact_extractor``
    only chooses how they are extracted (and is refused with False)."""
    recall_earlier_turns: bool = True
    """Recall earlier turns relevant to the query into the context. With no ``recall=`` or
    ``embedder=`` a memory recalls by words (BM25, no model); an embedder adds meaning.
    The one switch for recall: False turns it off (and ``recall=``/``embedder=`` are refused)."""
    share_facts: bool = True
    """With a ``user_id``: the facts section and `facts` hold what the user said in any of
    their sessions (a newer value from any session supersedes an older one), and
    `forget_fact` forgets user-wide. False keeps facts per session. No effect without a
    user: a session without one sees only itself."""
    share_recall: bool = True
    """With a ``user_id``: recall searches the user's earlier sessions as well as this one
    (this session's turns first on a tie; another session's turns come with their date).
    False recalls from this session only. No effect without a user."""
    background: bool = False
    """Run summarizing, fact extraction and embedding off the hot path: on the process's
    shared worker threads (see `set_background_workers`), or in asyncio tasks for ``aadd``."""
    background_timeout: float = 60.0
    """Seconds one background job may take before it is abandoned and retried later."""
    model_timeout: float = 30.0
    """Seconds one model call (a summary, a fact extraction; convmem's own offline ones
    excepted) may take, inline or in the background, before it is given up: the turn is
    stored and answered as usual, the work is retried later, and the call is left to end
    in its own thread (its answer dropped). While it runs, its session takes no new call
    of that kind, so a hung model holds one thread per session and kind, and never the
    threads other sessions need. Keep it below `background_timeout`."""

    def __post_init__(self) -> None:
        check_int("keep_recent_turns", self.keep_recent_turns, or_none=True)
        check_choice("memory_placement", self.memory_placement, ("user", "system", "developer"))
        for name in (
            "budget",
            "max_message_chars",
            "max_message_bytes",
            "transcript_turns",
            "transcript_message_chars",
            "transcript_max_chars",
            "summary_every_turns",
        ):
            check_int(name, getattr(self, name))
        for name in ("facts_share", "summary_share", "recall_share", "past_summary_share"):
            check_number(
                name, getattr(self, name), low=0.0, high=1.0, allowed="a fraction in [0, 1)", high_open=True
            )
        total = self.facts_share + self.summary_share + self.recall_share
        if total >= 1:
            raise ConfigError(
                f"facts_share + summary_share + recall_share must leave room for the recent "
                f"window (sum < 1), got {total:.2f}"
            )
        check_number(
            "summary_threshold",
            self.summary_threshold,
            low=0.0,
            high=1.0,
            allowed="a number in (0, 1]",
            low_open=True,
        )
        for name in ("background_timeout", "model_timeout"):
            check_number(
                name,
                getattr(self, name),
                low=0.0,
                high=MAX_BACKGROUND_TIMEOUT,
                allowed=f"a number of seconds in (0, {MAX_BACKGROUND_TIMEOUT:.0f}]",
                low_open=True,
            )
        for name in (
            "note_omitted_history",
            "prune_low_information",
            "extract_facts",
            "recall_earlier_turns",
            "share_facts",
            "share_recall",
            "background",
        ):
            check_bool(name, getattr(self, name))
        check_choice("language", self.language, ("auto", "zh", "en"))
        check_choice("summary_trigger", self.summary_trigger, ("tokens", "turns", "never"))
        if self.system_prompt is not None and not isinstance(self.system_prompt, str):
            raise ConfigError(f"system_prompt must be a str or None, got {type(self.system_prompt).__name__}")

    @property
    def eviction_window_tokens(self) -> int:
        """Without a turn cap, turns beyond the newest that fit this many tokens are
        evicted (due for the summary): the part of the default `budget` that facts,
        summary and recall can never take from the window."""
        window_share = 1.0 - self.facts_share - self.summary_share - self.recall_share
        return max(1, int(self.budget * window_share))

    def replace(self, **changes: Any) -> MemoryConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; `MemoryConfig.from_dict` reads it back."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryConfig:
        """A config from a dict `to_dict` made, validated as the constructor validates it.

        An unknown field raises `ConfigError` naming it and the known fields;
        fields left out keep their defaults.
        """
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown MemoryConfig fields {unknown}; known fields are {sorted(known)}")
        values = dict(data)
        template = values.get("transcript_template")
        if isinstance(template, dict):
            values["transcript_template"] = TranscriptTemplate(**template)
        return cls(**values)
