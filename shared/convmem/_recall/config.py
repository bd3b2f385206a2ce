"""How recall indexes, ranks and renders (`RecallConfig`), and what it may return (`RecallFilters`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping
from datetime import datetime, timezone, tzinfo
from typing import Any, Literal

from .._errors import ConfigError
from .._models import Message, Role, TurnStatus
from .._options import check_component, check_int, check_number

__all__ = ["Fusion", "Granularity", "RecallConfig", "RecallFilters", "check_recall_arguments", "indexed_text"]

Granularity = Literal["message", "exchange", "both"]
Fusion = Literal["weighted", "rrf"]


@dataclasses.dataclass(frozen=True)
class RecallConfig:
    """How recall indexes, ranks and renders. The defaults are tuned on LoCoMo.

    Example::

        RecallConfig(granularity="both", neighbour_radius=1, recency_weight=0.1)
    """

    granularity: Granularity = "both"
    """Index messages, exchanges (a question with its answers), or both (scores blend)."""
    neighbour_radius: int = 0
    """A recalled message brings this many messages before and after it (same episode)."""
    fusion: Fusion = "weighted"
    """How dense and lexical scores combine: a weighted sum of normalized scores, or RRF."""
    dense_weight: float = 0.6
    """Share of the dense score in the fusion (the rest is BM25)."""
    rrf_k: int = 60
    feedback_weight: float = 0.2
    """Pseudo-relevance feedback: share of a candidate's dense score that is its cosine
    similarity to the centroid of the 10 best candidates, when there are 50 candidates
    or more (0 turns it off)."""
    exchange_weight: float = 0.5
    """With granularity "both": share of the exchange's scores in a message's scores."""
    speaker_weight: float = 0.2
    """Added to messages said by a speaker the query names (``Message.name``). While it
    is above 0, dense search embeds the query with those names put as "they": who said
    it is this boost's to match (and the keywords'), what was said is the vectors'."""
    user_weight: float = 1.0
    """For a question about the user ("How many bikes do I own?", 我的狗叫什么): the user's
    own messages score this much more (times their score) than the assistant's, whose
    explanations share the question's words without saying anything about the user. Off
    for questions about what the assistant said ("you suggested...")."""
    episode_weight: float = 0.3
    """Added times the best score in the message's episode (related turns cluster)."""
    neighbour_weight: float = 0.3
    """Added times the best score of the message's neighbours (the messages right before
    and after it, same episode): a turn next to a relevant one is often part of the same
    thread, as the answer to a question or the reply that says what "it" was. Unlike
    `neighbour_radius` it brings nothing along; it only ranks."""
    episode_gap_seconds: float = 3 * 3600.0
    """A pause longer than this between two messages starts a new episode."""
    recency_weight: float = 0.0
    """Added times ``0.5 ** (age / half-life)``; age is measured from the newest message."""
    recency_half_life_days: float = 30.0
    mmr_lambda: float = 1.0
    """Maximal marginal relevance: 1.0 ranks by relevance only, lower values trade
    relevance for variety."""
    duplicate_similarity: float = 0.97
    """A candidate this similar (cosine) to one already recalled is dropped as a duplicate
    when it also has no word that one lacks: a sentence encoder puts "my old sneakers are
    in the closet" and "my old sneakers are in the garage" above 0.97, and the word that
    differs is what an update of a fact is about."""
    min_score: float = 0.1
    """Minimum cosine similarity of a message (or its exchange) to the query."""
    neighbour_min_score: float | None = 0.3
    """A message below `min_score` still passes when it is right next to (same episode)
    a message at least this similar to the query and above the relevance floor: the
    reply that says what "it" was rarely looks like the question on its own. None
    turns it off."""
    dense_margin: float = 0.0
    """A message passes by meaning only when its cosine similarity to the query is at least
    this much above the query's similarity to the history's typical message of the same
    language (its mean vector; Chinese-Japanese-Korean text and other text apart): an
    English question must not recall Chinese lines only because an English-only model
    puts every Chinese line near it."""
    min_coverage: float | None = 0.15
    """Memory only where there is evidence: recall returns nothing unless one candidate
    holds at least this share of the query's information by words (the idf, over the
    user's whole history, of the query's distinct terms) or is `evidence_margin` more
    similar to the query than the history's typical message. This is for a query about
    the user or their history ("my", "last time", a speaker's name); a request that stands
    on its own needs `min_coverage_general`. None turns the check off."""
    min_coverage_self: float = 0.3
    """See `min_coverage`: the share a query needs when only its first person makes it
    about the user ("I have a job interview tomorrow, any tips?"): it asks nothing about
    them ("What do I...", "my") and points at nothing in the history ("last time", a
    name of its people, something the assistant said). What the user says of themselves
    in passing is weaker evidence that their old messages are wanted than a question
    about them."""
    min_coverage_general: float = 0.7
    """See `min_coverage`: the share of its words a request that does not refer to the
    history ("What is 17 times 23?") must find in one message to recall anything."""
    evidence_margin: float = 0.35
    """See `min_coverage`: how much more similar to the query than the history's typical
    message (of its language) a message must be to count as evidence by meaning, for a
    query about the user or their history."""
    evidence_margin_general: float = 0.45
    """See `evidence_margin`: the same for a request that does not refer to the history."""
    min_lexical: float = 0.5
    """A message below `min_score` is still recalled when its BM25 score, or its exchange's,
    is at least this fraction of the best one (exact names, numbers, rare words)."""
    relevance_floor: float | None = None
    """A candidate scoring below this fraction of the best candidate's score is not
    recalled, however much room is left: the room goes back to the recent window.
    None picks by how recall ranks and what the query asks: 0.5 with dense search (0.4
    for a question that asks for several things: "What books has Tim read?", "how
    many", "both", 哪些), 0.25 by words only (where the episode boost lifts every
    candidate of a good episode alike). Tuned on LoCoMo to cut candidates without
    losing evidence."""
    candidates: int = 400
    """Candidates each retriever (dense, lexical) contributes before fusion. The episode
    and neighbour boosts lift only candidates: more of them lets a good episode's quieter
    turns rank."""
    widened_excerpts: int = 3
    """A long message is shown by the passage the query matched, marked as an excerpt. For a
    question about the user or their history, the excerpts of this many of the best items
    also show the passage on either side (all of a message of two or three passages): the
    best one even when that leaves out the weakest items, the others with the room left.
    0 shows only the passages that matched (fewer tokens)."""
    indexed_roles: tuple[str, ...] = ("user", "assistant")
    max_unit_chars: int = 2000
    """Text beyond this is not embedded (most models read 256-512 tokens anyway)."""
    language: Literal["auto", "zh", "en"] = "auto"
    time_zone: tzinfo = timezone.utc
    """Time zone of the date lines."""
    # Budget allocation (see `choose_recall_share`).
    past_share: float = 0.9
    """Recall share when the query points to the past (names, dates, "when did", 上次...)."""
    followup_share: float = 0.1
    """Recall share for a short follow-up ("and why?", "为什么？")."""
    # Index upkeep.
    hnsw_threshold: int = 50_000
    """Above this many vectors in a session, its index becomes HNSW (approximate)."""
    persist_every: int = 64
    """Write a session's index file after this many new vectors, or a tenth of the index
    if that is more (and on `Recall.save` / `Recall.close`)."""

    def __post_init__(self) -> None:
        if self.granularity not in ("message", "exchange", "both"):
            raise ConfigError(
                f"granularity must be 'message', 'exchange' or 'both', got {self.granularity!r}"
            )
        if self.fusion not in ("weighted", "rrf"):
            raise ConfigError(f"fusion must be 'weighted' or 'rrf', got {self.fusion!r}")
        if self.language not in ("auto", "zh", "en"):
            raise ConfigError(f"language must be 'auto', 'zh' or 'en', got {self.language!r}")
        check_int("neighbour_radius", self.neighbour_radius, low=0)
        check_int("widened_excerpts", self.widened_excerpts, low=0)
        for name in ("rrf_k", "candidates", "max_unit_chars", "hnsw_threshold", "persist_every"):
            check_int(name, getattr(self, name), low=1)
        for name in (
            "dense_weight",
            "feedback_weight",
            "exchange_weight",
            "mmr_lambda",
            "duplicate_similarity",
            "min_lexical",
            "past_share",
            "followup_share",
        ):
            check_number(name, getattr(self, name), low=0, high=1, allowed="a number in [0, 1]")
        if self.relevance_floor is not None:
            check_number(
                "relevance_floor", self.relevance_floor, low=0, high=1, allowed="None or a number in [0, 1]"
            )
        if self.min_coverage is not None:
            check_number(
                "min_coverage", self.min_coverage, low=0, high=1, allowed="None or a number in [0, 1]"
            )
        for name in ("min_coverage_self", "min_coverage_general"):
            check_number(name, getattr(self, name), low=0, high=1, allowed="a number in [0, 1]")
        for name in ("dense_margin", "evidence_margin", "evidence_margin_general"):
            check_number(
                name, getattr(self, name), low=-2, high=2, allowed="a difference of cosines in [-2, 2]"
            )
        for name in ("speaker_weight", "user_weight", "episode_weight", "neighbour_weight", "recency_weight"):
            check_number(name, getattr(self, name), low=0, high=math.inf, allowed="a finite number >= 0")
        for name in ("episode_gap_seconds", "recency_half_life_days"):
            check_number(
                name, getattr(self, name), low=0, high=math.inf, low_open=True, allowed="a finite number > 0"
            )
        check_number("min_score", self.min_score, low=-1, high=1, allowed="a cosine similarity in [-1, 1]")
        if self.neighbour_min_score is not None:
            check_number(
                "neighbour_min_score",
                self.neighbour_min_score,
                low=-1,
                high=1,
                allowed="None or a cosine similarity in [-1, 1]",
            )
        roles = tuple(Role.parse(r).value for r in self.indexed_roles)
        if not roles:
            raise ConfigError("indexed_roles must name at least one role, e.g. ('user', 'assistant')")
        object.__setattr__(self, "indexed_roles", roles)

    def replace(self, **changes: Any) -> RecallConfig:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class RecallFilters:
    """Optional restrictions on what may be recalled (the session is always a wall).

    ``speakers`` match ``Message.name``; ``metadata`` entries must all equal the
    message's metadata values (e.g. ``{"user_id": "u1"}``); ``since``/``until``
    bound the message timestamp (epoch seconds or datetimes, inclusive).
    """

    roles: Collection[Role | str] | None = None
    speakers: Collection[str] | None = None
    since: float | datetime | None = None
    until: float | datetime | None = None
    metadata: Mapping[str, Any] | None = None

    def accepts(self, message: Message) -> bool:
        if self.roles is not None and message.role not in {Role.parse(r) for r in self.roles}:
            return False
        if self.speakers is not None and message.name not in set(self.speakers):
            return False
        if self.since is not None and message.timestamp < _epoch(self.since):
            return False
        if self.until is not None and message.timestamp > _epoch(self.until):
            return False
        if self.metadata:
            for key, value in self.metadata.items():
                if key not in message.metadata or message.metadata[key] != value:
                    return False
        return True


def _epoch(value: float | datetime) -> float:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()
    return float(value)


def indexed_text(message: Message, config: RecallConfig) -> str | None:
    """The stripped text recall indexes of `message`, or None when it indexes none: a role
    outside `indexed_roles`, an empty text, a failed or cancelled turn. The one rule both
    the in-process mirror and the rows a store keeps follow."""
    text = message.text.strip()
    if (
        message.role.value not in config.indexed_roles
        or not text
        or message.status in (TurnStatus.FAILED, TurnStatus.CANCELLED)
    ):
        return None
    return text


def check_recall_arguments(
    embedder: object, config: object, index_dir: object, index_factory: object, max_sessions: object
) -> None:
    """Refuse what `Recall` cannot be made of, naming the argument (`ConfigError`)."""
    if isinstance(max_sessions, bool) or not isinstance(max_sessions, int) or max_sessions < 1:
        raise ConfigError(
            f"Recall max_sessions must be a positive int (sessions mirrored in this process), "
            f"got {max_sessions!r}"
        )
    if index_dir is not None and index_factory is not None:
        raise ConfigError(
            "give Recall an index_dir (FAISS files on this server) or an index_factory "
            "(a shared vector store), not both"
        )
    if config is not None and not isinstance(config, RecallConfig):
        raise ConfigError(f"config must be a RecallConfig, got {type(config).__name__}: {config!r:.60}")
    if embedder is None and (index_dir is not None or index_factory is not None):
        given = "index_dir" if index_dir is not None else "index_factory"
        raise ConfigError(
            f"{given} was given to a Recall without an embedder; lexical recall keeps no "
            "vectors, so pass an embedder too or leave index_dir and index_factory out"
        )
    if embedder is not None:
        check_component("embedder", embedder)
