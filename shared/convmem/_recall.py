"""Semantic recall of old turns: hybrid ranking over a per-session index.

`Recall` indexes every stored message (and every question-and-answer
exchange) of a session twice: as a vector in a `FaissIndex` and as terms in a
BM25 index. A query is answered by blending, for each candidate message:

- dense similarity of the message and of the exchange it belongs to,
- BM25 over the message and over its exchange (CJK-aware),
- a boost when the message was said by someone the query names,
- a boost by how relevant the message's episode (a run of messages without
  a long pause) is as a whole: evidence clusters in episodes,
- an optional recency boost with a half-life,

then dropping near-duplicates (MMR), what the recent window already holds and
what is below `min_score`, and filling the recall section greedily up to its
token cap. Items are rendered under a date line and with their speaker::

    Relevant earlier conversation
    [8 May 2023]
    Caroline: I went to a LGBTQ support group yesterday and it was so powerful.

Everything here is derived from the log: vectors are persisted next to the
store for speed, and rebuilt from the log when missing, stale or corrupt.
Sessions are walls: each session has its own index, and nothing from one
session's index can be returned for another.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import re
import threading
import urllib.parse
import zlib
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from datetime import datetime, timezone, tzinfo
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ._embedder import Embedder
from ._errors import ConfigError
from ._lexical import BM25Index, tokenize
from ._models import Message, Role, TurnStatus
from ._store import Store
from ._tokens import TokenCounter
from ._vector_index import FaissIndex, IndexFileError, VectorIndex
from ._window import Dropped

__all__ = [
    "Recall",
    "RecallConfig",
    "RecallFilters",
    "RecallResult",
    "RecalledItem",
    "choose_recall_share",
]

logger = logging.getLogger("convmem")

Granularity = Literal["message", "exchange", "both"]
Fusion = Literal["weighted", "rrf"]

# Unit ids: a message unit is its seq; an exchange unit sets bit 62 and packs
# its first seq and its length, so an exchange that grows gets a new id (HNSW
# cannot overwrite a vector in place).
_EXCHANGE_FLAG = 1 << 62
_SEQ_BITS = 40
_MAX_SPAN = 255
_MAX_EXCHANGE_MESSAGES = 16
_MANIFEST_FORMAT = 1
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")
_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def _exchange_unit_id(first_seq: int, span: int) -> int:
    return _EXCHANGE_FLAG | (min(span, _MAX_SPAN) << _SEQ_BITS) | first_seq


def _is_exchange_unit(unit_id: int) -> bool:
    return bool(unit_id & _EXCHANGE_FLAG)


def _exchange_first_seq(unit_id: int) -> int:
    return unit_id & ((1 << _SEQ_BITS) - 1)


# -- configuration --------------------------------------------------------------------


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
    exchange_weight: float = 0.5
    """With granularity "both": share of the exchange's scores in a message's scores."""
    speaker_weight: float = 0.2
    """Added to messages said by a speaker the query names (``Message.name``)."""
    episode_weight: float = 0.3
    """Added times the best score in the message's episode (related turns cluster)."""
    episode_gap_seconds: float = 3 * 3600.0
    """A pause longer than this between two messages starts a new episode."""
    recency_weight: float = 0.0
    """Added times ``0.5 ** (age / half-life)``; age is measured from the newest message."""
    recency_half_life_days: float = 30.0
    mmr_lambda: float = 1.0
    """Maximal marginal relevance: 1.0 ranks by relevance only, lower values trade
    relevance for variety."""
    duplicate_similarity: float = 0.97
    """A candidate this similar (cosine) to one already recalled is dropped as a duplicate."""
    min_score: float = 0.1
    """Minimum cosine similarity of a message (or its exchange) to the query."""
    min_lexical: float = 0.5
    """A message below `min_score` is still recalled when its BM25 score is at least this
    fraction of the best one (exact names, numbers, rare words)."""
    candidates: int = 200
    """Candidates each retriever (dense, lexical) contributes before fusion."""
    indexed_roles: tuple[str, ...] = ("user", "assistant")
    max_unit_chars: int = 2000
    """Text beyond this is not embedded (most models read 256-512 tokens anyway)."""
    language: Literal["auto", "zh", "en"] = "auto"
    header_zh: str = "【相关背景信息】"
    header_en: str = "Relevant earlier conversation:"
    time_zone: tzinfo = timezone.utc
    """Time zone of the date lines."""
    # Budget allocation (see `choose_recall_share`).
    past_share: float = 0.9
    """Recall share when the query points to the past (names, dates, "when did", 上次...)."""
    followup_share: float = 0.1
    """Recall share for a short follow-up ("and why?", "为什么？")."""
    confident_score: float = 0.55
    confident_share: float = 0.6
    """Recall share at least this when the best match scores `confident_score` or more."""
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
        for name in ("neighbour_radius",):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be an int >= 0, got {value!r}")
        for name in ("rrf_k", "candidates", "max_unit_chars", "hnsw_threshold", "persist_every"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive int, got {value!r}")
        for name in (
            "dense_weight",
            "exchange_weight",
            "mmr_lambda",
            "duplicate_similarity",
            "min_lexical",
            "past_share",
            "followup_share",
            "confident_share",
        ):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
                raise ConfigError(f"{name} must be in [0, 1], got {value!r}")
        for name in ("speaker_weight", "episode_weight", "recency_weight"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} must be a number >= 0, got {value!r}")
        for name in ("episode_gap_seconds", "recency_half_life_days"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if not -1 <= self.min_score <= 1 or not -1 <= self.confident_score <= 1:
            raise ConfigError(
                f"min_score and confident_score are cosine similarities in [-1, 1], got "
                f"{self.min_score!r} and {self.confident_score!r}"
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


# -- results ----------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RecalledItem:
    """One recalled passage: a message (with its neighbours, if configured).

    ``text`` holds one ``Speaker: text`` line per message, preceded by a date
    line (``[8 May 2023]``) when the item is the first of its day in the
    section. Items come in log order, so joining their texts with newlines
    gives the section body. ``token_count`` is ``counter.count_text(text)``.
    """

    seqs: tuple[int, ...]
    text: str
    time_label: str
    timestamp: float
    score: float
    token_count: int


@dataclasses.dataclass(frozen=True)
class _Candidate:
    seq: int
    score: float
    similarity: float | None
    seqs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class RecallResult:
    """What `Recall.search` found, fitted to its token cap.

    ``items`` come in log order; ``text`` is their texts joined by newlines
    (``""`` when nothing was recalled) and ``tokens`` its exact size. Both
    ``tokens`` and ``sum(item.token_count + 1 for item in items)`` (each item
    plus the newline that joins it) stay within ``max_tokens``. The section
    header is the caller's to add (``section_text`` adds ``header``).
    ``best_score`` is the highest cosine similarity among the candidates
    (``None`` when dense search was unavailable), for `choose_recall_share`;
    ``degraded`` says why results are keyword-only or empty.
    """

    items: tuple[RecalledItem, ...]
    text: str
    tokens: int
    max_tokens: int
    header: str
    best_score: float | None
    considered: int
    dropped: tuple[Dropped, ...] = ()
    degraded: str | None = None
    _ranked: tuple[_Candidate, ...] = dataclasses.field(default=(), repr=False, compare=False)
    _render: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def seqs(self) -> frozenset[int]:
        return frozenset(seq for item in self.items for seq in item.seqs)

    @property
    def section_text(self) -> str:
        """Header and items, ready for a system message (``""`` when nothing was recalled)."""
        return f"{self.header}\n{self.text}" if self.items else ""

    def fit(self, max_tokens: int) -> RecallResult:
        """The same ranking refilled under a smaller (or larger) cap, without searching again.

        Use it to search once at the largest share the split could give and then
        fit the result to the share `choose_recall_share` picked.
        """
        if self._render is None:
            return self
        return self._render(self._ranked, max_tokens)


# -- budget allocation ------------------------------------------------------------------

_PAST_EN = re.compile(
    r"\b(?:when (?:did|was|were|is|have|had|do)|what (?:was|were|did|had)|who (?:was|did|were)"
    r"|where (?:did|was|were)|how (?:did|long ago)|which \w+ did"
    r"|remember|recall|remind me|earlier|previously|before|last (?:time|week|month|year|night|session)"
    r"|ago|yesterday|back then|the other day|you (?:said|told|mentioned|suggested)"
    r"|i (?:said|told|mentioned|asked)|(?:did|have|had) (?:i|you|we) (?:ever )?"
    r"(?:say|tell|mention|talk|ask|discuss|told|said|mentioned|talked)"
    r"|january|february|march|april|june|july|august|september|october|november|december"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|(?:19|20)\d\d)\b",
    re.IGNORECASE,
)
_PAST_ZH = re.compile(
    r"之前|以前|上次|上回|还记得|记得|刚才|那天|当时|曾经|说过|提过|提到过|讲过|告诉过|聊过"
    r"|什么时候|哪天|哪一天|几号|几月|去年|上个月|上周|上星期|昨天|前天|叫什么|是谁|多少|哪里|哪儿"
)
_FOLLOWUP_EN = re.compile(
    r"^(?:and|but|so|why|how come|really|then|what about|how about|ok(?:ay)?|or|huh|wait|go on|more)\b",
    re.IGNORECASE,
)
_FOLLOWUP_ZH = re.compile(r"^(?:为什么|为啥|那|然后|还有|所以|怎么|真的|那么|继续|接着|嗯|好的)")
_NAME_IN_SENTENCE = re.compile(r"(?<=[a-z,;:'\"] )[A-Z][\w'-]+")


def _past_cue(query: str) -> str | None:
    match = _PAST_EN.search(query) or _PAST_ZH.search(query)
    if match:
        return match.group(0)
    name = _NAME_IN_SENTENCE.search(query)
    if name and name.group(0) not in ("I", "I'm", "I've", "I'd", "I'll"):
        return name.group(0)
    return None


def _is_followup(query: str) -> bool:
    stripped = query.strip()
    cjk = len(_CJK.findall(stripped))
    if cjk:
        return cjk <= 8 and bool(_FOLLOWUP_ZH.match(stripped))
    words = stripped.split()
    return len(words) <= 4 and bool(_FOLLOWUP_EN.match(stripped))


def choose_recall_share(
    query: str, best_score: float | None, *, base_share: float, config: RecallConfig | None = None
) -> tuple[float, str]:
    """Decide how much of the flexible budget recall gets for this query.

    A query that points to the past (names, dates, "when did", "what was",
    "remember", 之前, 上次, 还记得, ...) gets ``config.past_share``; a short
    follow-up ("and why?", "为什么？") gets ``config.followup_share`` so the
    recent window keeps the thread; a strong recall match (``best_score`` at
    least ``config.confident_score``) gets at least ``config.confident_share``.
    Otherwise `base_share` stands. Returns the share and a reason for ``explain()``.

    >>> choose_recall_share("When did I adopt the dog?", None, base_share=0.25)[0]
    0.9
    """
    cfg = config or RecallConfig()
    share = base_share
    if _is_followup(query):
        share = min(base_share, cfg.followup_share)
        reason = f"short follow-up: the recent window keeps more ({share:.0%} to recall)"
    else:
        cue = _past_cue(query)
        if cue is not None:
            share = max(base_share, cfg.past_share)
            reason = f"query points to the past ({cue!r}): {share:.0%} to recall"
        else:
            reason = f"default split: {share:.0%} to recall"
    if best_score is not None and best_score >= cfg.confident_score and share < cfg.confident_share:
        share = cfg.confident_share
        reason += f"; strong recall match ({best_score:.2f}) raises it to {share:.0%}"
    return share, reason


# -- the per-session state --------------------------------------------------------------


def _escape_session_id(session_id: str) -> str:
    """A file name for a session id: readable, collision-free, short, case-safe."""
    readable = urllib.parse.quote(session_id, safe="")[:80]
    digest = sha256(session_id.encode("utf-8")).hexdigest()[:16]
    return f"{readable}-{digest}"


class _Session:
    """Everything recall knows about one session. Guarded by `lock`."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.lock = threading.RLock()
        self.index: VectorIndex | None = None
        self.messages: dict[int, Message] = {}
        self.order: list[int] = []
        self.position: dict[int, int] = {}
        self.lines: dict[int, str] = {}
        self.episode_of: dict[int, int] = {}
        self.episode_count = 0
        self.last_timestamp: float | None = None
        self.newest_timestamp = 0.0
        self.last_seq = 0
        self.exchange_of: dict[int, int] = {}
        self.exchanges: dict[int, list[int]] = {}
        self.open_exchange: int | None = None
        self.exchange_units: dict[int, int] = {}  # first seq -> unit id wanted now
        self.lexical_messages = BM25Index()
        self.lexical_exchanges = BM25Index()
        self.pending: dict[int, str] = {}  # unit id -> text still to embed
        self.inflight: set[int] = set()
        self.speakers: dict[str, str] = {}  # lowercased name -> name
        self.needs_sync = True
        self.unsaved = 0
        self.forgotten = False
        self.token_cache: dict[tuple[str, str, int], int] = {}

    def reset_log_view(self) -> None:
        self.messages.clear()
        self.order.clear()
        self.position.clear()
        self.lines.clear()
        self.episode_of.clear()
        self.episode_count = 0
        self.last_timestamp = None
        self.newest_timestamp = 0.0
        self.last_seq = 0
        self.exchange_of.clear()
        self.exchanges.clear()
        self.open_exchange = None
        self.exchange_units.clear()
        self.lexical_messages.clear()
        self.lexical_exchanges.clear()
        self.pending.clear()
        self.speakers.clear()
        self.token_cache.clear()

    def wanted_units(self) -> dict[int, str]:
        """Unit id -> text for every unit the log calls for now."""
        units: dict[int, str] = {}
        for seq in self.order:
            if seq in self.lines:
                units[seq] = self.lines[seq]
        for first_seq, unit_id in self.exchange_units.items():
            units[unit_id] = self.exchange_text(first_seq)
        return units

    def exchange_text(self, first_seq: int) -> str:
        return "\n".join(self.lines[s] for s in self.exchanges[first_seq])


_ROLE_LABELS = {
    "en": {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"},
    "zh": {"user": "用户", "assistant": "助手", "system": "系统", "tool": "工具"},
}


def _speaker(message: Message, language: str = "en") -> str:
    if message.name:
        return message.name
    return _ROLE_LABELS[language][message.role.value]


def _render_line(message: Message, language: str) -> str:
    separator = "：" if language == "zh" else ": "
    return f"{_speaker(message, language)}{separator}{message.text.strip()}"


# -- the engine ---------------------------------------------------------------------


class Recall:
    """Semantic recall over a session's log: index on write, hybrid search on read.

    Args:
        embedder: any `Embedder` (`SentenceTransformerEmbedder`, `HashingEmbedder`, an adapter).
        config: ranking and rendering knobs (`RecallConfig`).
        index_dir: where vectors are persisted, one ``<session>.faiss`` file plus a
            ``.json`` manifest per session; ``None`` keeps them in memory only.
            Put it next to the store, e.g. ``Path(str(db_path) + ".vectors")``.

    Thread-safe. `add` may run in a background thread while `search` serves
    requests: a search uses what is indexed at that moment (new messages are
    found lexically at once, and by meaning once embedded).

    Example::

        recall = Recall(SentenceTransformerEmbedder(), index_dir=Path("memory.db.vectors"))
        stored = store.append("s1", [Message.create("user", "My dog is called Duoduo.")])
        recall.add("s1", stored)
        result = recall.search("s1", "what is my dog called?", store=store,
                               exclude_seqs=(), max_tokens=300, counter=TiktokenCounter())
        print(result.text)
    """

    def __init__(
        self,
        embedder: Embedder,
        *,
        config: RecallConfig | None = None,
        index_dir: str | Path | None = None,
        index_factory: Callable[[str, int], VectorIndex] | None = None,
    ) -> None:
        if index_dir is not None and index_factory is not None:
            raise ConfigError(
                "give Recall an index_dir (FAISS files on this server) or an index_factory "
                "(a shared vector store), not both"
            )
        self.embedder = embedder
        self.config = config or RecallConfig()
        self.index_dir = None if index_dir is None else Path(index_dir)
        self.index_factory = index_factory
        self._sessions: dict[str, _Session] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Recall({self.embedder!r}, index_dir={self.index_dir!r})"

    # -- paths and persistence -----------------------------------------------------------

    def index_path(self, session_id: str) -> Path | None:
        """The FAISS file of a session (its manifest has the same name with ``.json``)."""
        if self.index_dir is None:
            return None
        return self.index_dir / f"{_escape_session_id(session_id)}.faiss"

    def _manifest_path(self, session_id: str) -> Path | None:
        path = self.index_path(session_id)
        return None if path is None else path.with_suffix(".json")

    def _new_index(self, session_id: str, dimension: int) -> VectorIndex:
        if self.index_factory is not None:
            return self.index_factory(session_id, dimension)
        return FaissIndex(dimension, hnsw_threshold=self.config.hnsw_threshold)

    def _load_persisted(self, state: _Session) -> None:
        """Adopt a saved index when it matches this embedder and config; otherwise discard it."""
        path = self.index_path(state.session_id)
        manifest_path = self._manifest_path(state.session_id)
        if path is None or manifest_path is None or not (path.exists() or manifest_path.exists()):
            return
        try:
            manifest = json.loads(manifest_path.read_text("utf-8"))
            data = path.read_bytes()
            expected = {
                "format": _MANIFEST_FORMAT,
                "embedder": self.embedder.name,
                "dimension": self.embedder.dimension,
                "granularity": self.config.granularity,
            }
            stale = {k: manifest.get(k) for k, v in expected.items() if manifest.get(k) != v}
            if stale:
                raise IndexFileError(f"manifest does not match ({stale} vs {expected})")
            if manifest.get("bytes") != len(data) or manifest.get("crc32") != zlib.crc32(data):
                raise IndexFileError("index file does not match its manifest (size or checksum)")
            index = FaissIndex.from_bytes(data, source=str(path), hnsw_threshold=self.config.hnsw_threshold)
            if len(index) != manifest.get("count"):
                raise IndexFileError(
                    f"index holds {len(index)} vectors, manifest says {manifest.get('count')}"
                )
            state.index = index
        except Exception as exc:  # anything wrong with derived files means: rebuild
            logger.warning(
                "recall index for session %r at %s is unusable (%s); rebuilding it from the log",
                state.session_id,
                path,
                exc,
            )
            self._delete_files(state.session_id)

    def _delete_files(self, session_id: str) -> None:
        for path in (self.index_path(session_id), self._manifest_path(session_id)):
            if path is not None:
                path.unlink(missing_ok=True)

    def _save(self, state: _Session) -> None:
        path = self.index_path(state.session_id)
        manifest_path = self._manifest_path(state.session_id)
        if path is None or manifest_path is None:
            return
        with state.lock:
            if state.forgotten or not isinstance(state.index, FaissIndex):
                return  # nothing yet, or vectors that live in a shared store
            index = state.index
            embedded = [u for u in index.ids() if not _is_exchange_unit(u)]
            manifest: dict[str, Any] = {
                "format": _MANIFEST_FORMAT,
                "session_id": state.session_id,
                "embedder": self.embedder.name,
                "dimension": index.dimension,
                "granularity": self.config.granularity,
                "count": len(index),
                "last_indexed_seq": max(embedded, default=0),
                "kind": index.kind,
            }
            try:
                size = index.save(path)
                data = path.read_bytes()
                manifest["bytes"] = size
                manifest["crc32"] = zlib.crc32(data)
                tmp = manifest_path.with_suffix(".json.tmp")
                tmp.write_text(json.dumps(manifest, ensure_ascii=False, indent=1), "utf-8")
                tmp.replace(manifest_path)
                state.unsaved = 0
            except OSError as exc:
                logger.warning("could not save the recall index of %r to %s: %s", state.session_id, path, exc)

    def save(self, session_id: str | None = None) -> None:
        """Write unsaved vectors to disk (one session, or all). Does nothing without `index_dir`."""
        with self._lock:
            states = list(self._sessions.values())
        for state in states:
            if (session_id is None or state.session_id == session_id) and state.unsaved:
                self._save(state)

    def close(self) -> None:
        """Save everything; the engine stays usable."""
        self.save()

    # -- session state -------------------------------------------------------------------

    def _state(self, session_id: str) -> _Session:
        with self._lock:
            state = self._sessions.get(session_id)
            if state is None:
                state = _Session(session_id)
                self._sessions[session_id] = state
                created = True
            else:
                created = False
        if created:
            with state.lock:
                if self.index_factory is not None:
                    # A shared store may already hold units other servers embedded.
                    state.index = self.index_factory(session_id, self.embedder.dimension)
                else:
                    self._load_persisted(state)
        return state

    def _ingest(self, state: _Session, messages: Sequence[Message]) -> list[int]:
        """Fold new log messages into the lexical view; queue their units. Returns removed unit ids."""
        cfg = self.config
        removed: list[int] = []
        for message in messages:
            seq = message.seq
            if seq is None:
                raise ConfigError(
                    "Recall.add needs stored messages (seq set); append them to the store first"
                )
            if seq <= state.last_seq:
                continue
            if state.last_seq and seq > state.last_seq + 1:
                state.needs_sync = True  # messages we never saw: the next search reads them from the log
            state.last_seq = seq
            text = message.text.strip()
            if (
                message.role.value not in cfg.indexed_roles
                or not text
                or message.status in (TurnStatus.FAILED, TurnStatus.CANCELLED)
            ):
                continue
            if (
                state.last_timestamp is None
                or message.timestamp - state.last_timestamp > cfg.episode_gap_seconds
            ):
                state.episode_count += 1
                state.open_exchange = None
            state.last_timestamp = message.timestamp
            state.newest_timestamp = max(state.newest_timestamp, message.timestamp)
            # A speaker's name helps both retrievers ("What did Caroline say..."); a bare
            # role label is in every unit and would only add noise.
            if message.name:
                state.speakers[message.name.lower()] = message.name
                line = f"{message.name}: {text}"
            else:
                line = text
            state.messages[seq] = message
            state.position[seq] = len(state.order)
            state.order.append(seq)
            state.lines[seq] = line
            state.episode_of[seq] = state.episode_count
            state.lexical_messages.add(seq, tokenize(line))
            if cfg.granularity != "exchange":
                state.pending[seq] = line[: cfg.max_unit_chars]
            # Exchanges: a user message opens one; what follows joins it (up to a cap, so
            # a long run of messages without a question does not become one giant unit).
            if (
                message.role is Role.USER
                or state.open_exchange is None
                or len(state.exchanges[state.open_exchange]) >= _MAX_EXCHANGE_MESSAGES
            ):
                state.open_exchange = seq
                state.exchanges[seq] = [seq]
            else:
                state.exchanges[state.open_exchange].append(seq)
            first = state.open_exchange
            state.exchange_of[seq] = first
            members = state.exchanges[first]
            state.lexical_exchanges.add(first, tokenize(state.exchange_text(first)))
            if cfg.granularity == "message":
                continue
            old_unit = state.exchange_units.get(first)
            # A lone message's exchange is the message itself: with "both" it needs no
            # vector of its own; with "exchange" it does.
            if len(members) == 1 and cfg.granularity == "both":
                continue
            new_unit = _exchange_unit_id(first, len(members))
            if old_unit is not None and old_unit != new_unit:
                state.pending.pop(old_unit, None)
                removed.append(old_unit)
            state.exchange_units[first] = new_unit
            state.pending[new_unit] = state.exchange_text(first)[: cfg.max_unit_chars]
        return removed

    def _embed_pending(self, state: _Session) -> None:
        """Embed queued units (outside the lock: embedding is the slow part)."""
        with state.lock:
            todo = {u: t for u, t in state.pending.items() if u not in state.inflight}
            state.inflight.update(todo)
        if not todo:
            return
        try:
            ids = list(todo)
            vectors = self.embedder.embed_documents([todo[u] for u in ids])
        except Exception as exc:  # a failing embedder must never lose a turn
            logger.warning(
                "embedding %d recall units of session %r failed (%s: %s); they stay queued and "
                "are found by keywords until a later add() embeds them",
                len(todo),
                state.session_id,
                type(exc).__name__,
                exc,
            )
            with state.lock:
                state.inflight.difference_update(todo)
            return
        self._commit(state, ids, vectors, todo)

    async def _aembed_pending(self, state: _Session) -> None:
        with state.lock:
            todo = {u: t for u, t in state.pending.items() if u not in state.inflight}
            state.inflight.update(todo)
        if not todo:
            return
        try:
            ids = list(todo)
            vectors = await self.embedder.aembed_documents([todo[u] for u in ids])
        except Exception as exc:
            logger.warning(
                "embedding %d recall units of session %r failed (%s: %s); they stay queued",
                len(todo),
                state.session_id,
                type(exc).__name__,
                exc,
            )
            with state.lock:
                state.inflight.difference_update(todo)
            return
        self._commit(state, ids, vectors, todo)

    def _commit(self, state: _Session, ids: list[int], vectors: np.ndarray, todo: Mapping[int, str]) -> None:
        with state.lock:
            state.inflight.difference_update(todo)
            if state.forgotten:
                return
            # Only what is still wanted: the log may have moved on while we embedded.
            keep = [i for i, unit in enumerate(ids) if state.pending.get(unit) == todo[unit]]
            if not keep:
                return
            if state.index is None:
                state.index = self._new_index(state.session_id, int(vectors.shape[1]))
            state.index.add([ids[i] for i in keep], vectors[keep])
            for i in keep:
                state.pending.pop(ids[i], None)
            state.unsaved += len(keep)
            # Rewriting the file costs O(index): wait for a tenth of it to be new, so saving
            # stays O(1) per vector however long the session (sync re-embeds anything lost).
            should_save = state.unsaved >= max(self.config.persist_every, len(state.index) // 10)
        if should_save:
            self._save(state)

    def _apply_removals(self, state: _Session, removed: Iterable[int]) -> None:
        removed = list(removed)
        if removed and state.index is not None:
            state.index.remove(removed)
            state.unsaved += len(removed)

    # -- writing -------------------------------------------------------------------------

    def add(self, session_id: str, messages: Sequence[Message]) -> None:
        """Index newly stored messages (``seq`` set). Safe from a background thread.

        Lexical indexing happens at once; embedding happens here too, and if the
        embedder fails the units stay queued (logged) and are retried on the next add.
        """
        state = self._state(session_id)
        with state.lock:
            removed = self._ingest(state, messages)
            self._apply_removals(state, removed)
        self._embed_pending(state)

    async def aadd(self, session_id: str, messages: Sequence[Message]) -> None:
        """Async `add`: embedding awaits the embedder's async API."""
        state = self._state(session_id)
        with state.lock:
            removed = self._ingest(state, messages)
            self._apply_removals(state, removed)
        await self._aembed_pending(state)

    def sync(self, session_id: str, store: Store) -> None:
        """Catch up with the log and embed whatever is not embedded yet.

        Cheap when nothing changed (one ``store.stats`` call). The first time a
        session is seen (or after a gap, or when the log shrank) the whole log
        is read once: vectors it no longer calls for are dropped and missing
        ones embedded, in batches with a progress bar for long histories.
        Call it after every append (the memory facade does), or let `search`
        do the reading and `add` the embedding.
        """
        state = self._state(session_id)
        self._read_log(state, store)
        self._embed_pending(state)
        if state.unsaved:
            self._save(state)

    async def async_(self, session_id: str, store: Store) -> None:
        """The async twin of `sync` (``async`` is a keyword); the log is read in a worker thread."""
        state = self._state(session_id)
        await asyncio.to_thread(self._read_log, state, store)
        await self._aembed_pending(state)
        if state.unsaved:
            await asyncio.to_thread(self._save, state)

    def rebuild(self, session_id: str, store: Store) -> None:
        """Forget the session's vectors and index its whole log again (e.g. after changing models)."""
        self.forget(session_id)
        self.sync(session_id, store)

    def _read_log(self, state: _Session, store: Store) -> None:
        if not state.needs_sync:
            self._catch_up(state, store)
        if state.needs_sync:
            self._sync_log(state, store)

    def _sync_log(self, state: _Session, store: Store) -> None:
        log = store.messages(state.session_id)
        with state.lock:
            state.reset_log_view()
            self._ingest(state, log)
            state.needs_sync = False
            wanted = state.wanted_units()
            if state.index is not None:
                present = state.index.ids()
                extra = present - wanted.keys()
                if extra:
                    state.index.remove(extra)
                    state.unsaved += len(extra)
                for unit in present & wanted.keys():
                    state.pending.pop(unit, None)

    def _catch_up(self, state: _Session, store: Store) -> None:
        """Read messages another writer appended since we last looked (lexical at once)."""
        try:
            last_seq = store.stats(state.session_id).last_seq
        except Exception as exc:  # a store hiccup must not fail the build
            logger.warning("recall could not read stats of session %r: %s", state.session_id, exc)
            return
        if last_seq > state.last_seq:
            with state.lock:
                after = state.last_seq
            newer = store.messages(state.session_id, after_seq=after)
            with state.lock:
                removed = self._ingest(state, newer)
                self._apply_removals(state, removed)
        elif last_seq < state.last_seq:
            with state.lock:
                state.needs_sync = True  # the log shrank: it was cleared or replaced

    def forget(self, session_id: str) -> None:
        """Remove a session's vectors and lexical index: in memory, on disk, or in the shared store."""
        with self._lock:
            state = self._sessions.pop(session_id, None)
        index = None
        if state is not None:
            with state.lock:
                state.forgotten = True
                index, state.index = state.index, None
                state.reset_log_view()
        if self.index_factory is not None:
            # Vectors in a shared store outlive this process's view of them.
            if index is None:
                index = self.index_factory(session_id, self.embedder.dimension)
            clear = getattr(index, "clear", None)
            if clear is None:
                index.remove(index.ids())
            else:
                clear()
        self._delete_files(session_id)

    def stats(self, session_id: str) -> dict[str, Any]:
        """Counts for a session: messages, vectors, queued units, index kind and bytes per vector."""
        state = self._state(session_id)
        with state.lock:
            index = state.index
            return {
                "messages": len(state.order),
                "vectors": len(index) if index is not None else 0,
                "pending": len(state.pending),
                "kind": index.kind if index is not None else None,
                "bytes_per_vector": index.bytes_per_vector() if index is not None else None,
            }

    # -- reading -------------------------------------------------------------------------

    def _ready(self, session_id: str, store: Store) -> _Session:
        state = self._state(session_id)
        try:
            if not state.needs_sync:
                self._catch_up(state, store)  # lexical at once; embedding is left to add()/sync()
            if state.needs_sync:
                self.sync(session_id, store)  # first sight of the session: read and embed its log once
        except Exception as exc:  # recall degrades, the build goes on
            logger.warning("recall could not read the log of session %r: %s", session_id, exc)
        return state

    def _embed_query(self, query: str) -> tuple[np.ndarray | None, str | None]:
        try:
            return self.embedder.embed_query(query), None
        except Exception as exc:
            logger.warning(
                "the recall embedder failed on the query (%s: %s); recalling by keywords only",
                type(exc).__name__,
                exc,
            )
            return None, f"embedder failed ({type(exc).__name__}: {exc}); keywords only"

    def search(
        self,
        session_id: str,
        query: str,
        *,
        store: Store,
        exclude_seqs: Collection[int] = (),
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None = None,
    ) -> RecallResult:
        """Recall what is relevant to `query`, rendered into at most `max_tokens` tokens.

        `exclude_seqs` (what the recent window holds) is never recalled. Never
        raises because of the embedder or the index: it degrades to keyword
        matching (or nothing) and says so in ``result.degraded``.
        """
        state = self._ready(session_id, store)
        vector, problem = self._embed_query(query)
        return self._rank(state, query, vector, problem, exclude_seqs, max_tokens, counter, filters)

    async def asearch(
        self,
        session_id: str,
        query: str,
        *,
        store: Store,
        exclude_seqs: Collection[int] = (),
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None = None,
    ) -> RecallResult:
        """Async `search`: the query is embedded with the embedder's async API."""
        state = await asyncio.to_thread(self._ready, session_id, store)
        try:
            vector: np.ndarray | None = await self.embedder.aembed_query(query)
            problem = None
        except Exception as exc:
            logger.warning("the recall embedder failed on the query (%s); keywords only", exc)
            vector, problem = None, f"embedder failed ({type(exc).__name__}: {exc}); keywords only"
        return self._rank(state, query, vector, problem, exclude_seqs, max_tokens, counter, filters)

    # -- ranking -------------------------------------------------------------------------

    def _rank(
        self,
        state: _Session,
        query: str,
        vector: np.ndarray | None,
        problem: str | None,
        exclude_seqs: Collection[int],
        max_tokens: int,
        counter: TokenCounter,
        filters: RecallFilters | None,
    ) -> RecallResult:
        cfg = self.config
        excluded = set(exclude_seqs)
        try:
            with state.lock:
                ranked, best, considered, dropped, problem, vectors = self._candidates(
                    state, query, vector, problem, excluded, filters
                )
                language = self._language(state, query, ranked)
                renderer = _Renderer(
                    self, state, counter, excluded, language, dropped, best, considered, problem, vectors
                )
                return renderer(tuple(ranked), max_tokens)
        except Exception as exc:  # recall must never break a build
            logger.warning(
                "recall failed for session %r (%s: %s); nothing recalled",
                state.session_id,
                type(exc).__name__,
                exc,
            )
            header = cfg.header_zh if cfg.language == "zh" else cfg.header_en
            return RecallResult((), "", 0, max_tokens, header, None, 0, (), f"recall failed: {exc}")

    def _language(self, state: _Session, query: str, ranked: Sequence[_Candidate]) -> str:
        if self.config.language != "auto":
            return self.config.language
        if _CJK.search(query):
            return "zh"
        sample = " ".join(state.lines[c.seq] for c in ranked[:5])
        letters = sum(ch.isalpha() for ch in sample) or 1
        return "zh" if len(_CJK.findall(sample)) / letters > 0.3 else "en"

    def _candidates(
        self,
        state: _Session,
        query: str,
        vector: np.ndarray | None,
        problem: str | None,
        excluded: set[int],
        filters: RecallFilters | None,
    ) -> tuple[list[_Candidate], float | None, int, list[Dropped], str | None, dict[int, np.ndarray]]:
        cfg = self.config
        granularity = cfg.granularity
        k = cfg.candidates
        terms = tokenize(query)
        lexical_m = state.lexical_messages.scores(terms) if granularity != "exchange" else {}
        lexical_x = state.lexical_exchanges.scores(terms) if granularity != "message" else {}

        pool: set[int] = set()
        for seq, _ in sorted(lexical_m.items(), key=lambda kv: -kv[1])[:k]:
            pool.add(seq)
        for first, _ in sorted(lexical_x.items(), key=lambda kv: -kv[1])[:k]:
            pool.update(state.exchanges.get(first, ()))

        index = state.index
        dense_hits: dict[int, float] = {}
        if vector is not None and index is not None and len(index):
            if vector.shape[-1] != index.dimension:
                problem = (
                    f"query vector has {vector.shape[-1]} dimensions, the index {index.dimension}; "
                    "keywords only (call sync() after changing the embedder)"
                )
                logger.warning("recall for session %r: %s", state.session_id, problem)
                vector = None
            else:
                try:
                    # Over-fetch by the window instead of an IDSelector: selector search is slower.
                    hits = index.search(vector, k + len(excluded))
                except Exception as exc:
                    logger.warning("vector search failed for session %r: %s", state.session_id, exc)
                    problem = f"vector search failed ({exc}); keywords only"
                    hits, vector = [], None
                for unit, similarity in hits:
                    dense_hits[unit] = similarity
                    if _is_exchange_unit(unit):
                        pool.update(state.exchanges.get(_exchange_first_seq(unit), ()))
                    else:
                        pool.add(unit)

        pool = {
            s
            for s in pool
            if s in state.messages
            and s not in excluded
            and (filters is None or filters.accepts(state.messages[s]))
        }
        if not pool:
            return [], None, 0, [], problem, {}
        seqs = sorted(pool)

        # Dense similarities of every candidate's message and exchange unit.
        dense_m = np.zeros(len(seqs), dtype=np.float32)
        dense_x = np.zeros(len(seqs), dtype=np.float32)
        has_dense = vector is not None and index is not None
        message_vectors: dict[int, np.ndarray] = {}
        if has_dense:
            assert index is not None and vector is not None
            unit_of_exchange = {s: state.exchange_units.get(state.exchange_of.get(s, -1), s) for s in seqs}
            wanted_units = set(seqs) | set(unit_of_exchange.values())
            message_vectors = index.vectors(wanted_units)
            for i, s in enumerate(seqs):
                own = message_vectors.get(s)
                ex = message_vectors.get(unit_of_exchange[s])
                sim_m = float(own @ vector) if own is not None else None
                sim_x = float(ex @ vector) if ex is not None else None
                if granularity == "exchange":
                    sim_m = sim_x
                dense_m[i] = sim_m if sim_m is not None else (sim_x if sim_x is not None else 0.0)
                dense_x[i] = sim_x if sim_x is not None else dense_m[i]
            if granularity == "message":
                dense = dense_m
            elif granularity == "exchange":
                dense = dense_x
            else:
                dense = (1 - cfg.exchange_weight) * dense_m + cfg.exchange_weight * dense_x
            raw_similarity = np.maximum(dense_m, dense_x)
        else:
            dense = np.zeros(len(seqs), dtype=np.float32)
            raw_similarity = np.zeros(len(seqs), dtype=np.float32)

        max_m = max(lexical_m.values(), default=0.0) or 1.0
        max_x = max(lexical_x.values(), default=0.0) or 1.0
        lex_m = np.array([lexical_m.get(s, 0.0) / max_m for s in seqs], dtype=np.float32)
        lex_x = np.array(
            [lexical_x.get(state.exchange_of.get(s, -1), 0.0) / max_x for s in seqs], dtype=np.float32
        )
        if granularity == "message":
            lexical = lex_m
        elif granularity == "exchange":
            lexical = lex_x
        else:
            lexical = (1 - cfg.exchange_weight) * lex_m + cfg.exchange_weight * lex_x

        if has_dense:
            if cfg.fusion == "weighted":
                low, high = float(dense.min()), float(dense.max())
                dense_norm = (dense - low) / (high - low) if high > low else np.ones_like(dense)
                score = cfg.dense_weight * dense_norm + (1 - cfg.dense_weight) * lexical
            else:
                dense_rank = np.empty(len(seqs))
                dense_rank[np.argsort(-dense, kind="stable")] = np.arange(len(seqs))
                lex_rank = np.empty(len(seqs))
                lex_rank[np.argsort(-lexical, kind="stable")] = np.arange(len(seqs))
                score = cfg.dense_weight / (cfg.rrf_k + dense_rank) + (1 - cfg.dense_weight) / (
                    cfg.rrf_k + lex_rank
                )
                score = score / score.max()
        else:
            score = lexical.astype(np.float64)
        score = np.asarray(score, dtype=np.float64)

        named = self._named_speakers(state, query)
        if named and cfg.speaker_weight:
            score = score + cfg.speaker_weight * np.array(
                [state.messages[s].name in named for s in seqs], dtype=np.float64
            )
        if cfg.recency_weight:
            half_life = cfg.recency_half_life_days * 86400.0
            ages = np.array([state.newest_timestamp - state.messages[s].timestamp for s in seqs])
            score = score + cfg.recency_weight * np.power(0.5, np.maximum(ages, 0.0) / half_life)
        if cfg.episode_weight:
            episodes = np.array([state.episode_of[s] for s in seqs])
            best_in_episode: dict[int, float] = {}
            for episode, value in zip(episodes.tolist(), score.tolist(), strict=True):
                if value > best_in_episode.get(episode, -math.inf):
                    best_in_episode[episode] = value
            score = score + cfg.episode_weight * np.array([best_in_episode[e] for e in episodes.tolist()])

        # Relevance floor: similar enough by meaning, or a strong keyword match.
        dropped: list[Dropped] = []
        if has_dense:
            eligible = (raw_similarity >= cfg.min_score) | (lexical >= cfg.min_lexical)
        else:
            eligible = lexical > 0
        order = [i for i in np.argsort(-score, kind="stable").tolist() if eligible[i]]
        below = int(len(seqs) - eligible.sum())
        if below:
            dropped.append(
                Dropped("recall", f"{below} candidate messages", 0, f"below min_score {cfg.min_score}")
            )
        best = float(raw_similarity[order].max()) if has_dense and order else None

        order = self._diversify(order, score, seqs, message_vectors)
        ranked = [
            _Candidate(seqs[i], float(score[i]), float(raw_similarity[i]) if has_dense else None, ())
            for i in order
        ]
        return ranked, best, len(seqs), dropped, problem, message_vectors

    def _named_speakers(self, state: _Session, query: str) -> set[str]:
        lowered = query.lower()
        named = set()
        for key, name in state.speakers.items():
            if _CJK.search(key):
                if key in lowered:
                    named.add(name)
            elif re.search(rf"(?<!\w){re.escape(key)}(?!\w)", lowered):
                named.add(name)
        return named

    def _diversify(
        self,
        order: list[int],
        score: np.ndarray,
        seqs: Sequence[int],
        vectors: Mapping[int, np.ndarray],
    ) -> list[int]:
        """With ``mmr_lambda < 1``, re-rank the head of `order` by maximal marginal relevance.

        Near-duplicates are dropped later, while filling, against what was actually picked.
        """
        lam = self.config.mmr_lambda
        if lam >= 1.0 or not vectors or len(order) < 2:
            return order
        head = order[:150]
        dim = next(iter(vectors.values())).shape[0]
        matrix = np.stack([vectors.get(seqs[i], np.zeros(dim, np.float32)) for i in head])
        relevance = score[head]
        span = float(relevance.max() - relevance.min()) or 1.0
        relevance = (relevance - relevance.min()) / span
        max_sim = np.zeros(len(head), dtype=np.float64)
        alive = np.ones(len(head), dtype=bool)
        chosen: list[int] = []
        for _ in range(len(head)):
            mmr = lam * relevance - (1 - lam) * max_sim
            mmr[~alive] = -np.inf
            pick = int(np.argmax(mmr))
            alive[pick] = False
            chosen.append(head[pick])
            np.maximum(max_sim, matrix @ matrix[pick], out=max_sim)
        return chosen + order[len(head):]

    # -- rendering -----------------------------------------------------------------------

    def _time_label(self, timestamp: float, language: str) -> str:
        moment = datetime.fromtimestamp(timestamp, tz=self.config.time_zone)
        if language == "zh":
            return f"[{moment.year}年{moment.month}月{moment.day}日]"
        return f"[{moment.day} {_MONTHS[moment.month - 1]} {moment.year}]"

    def _item_seqs(self, state: _Session, seq: int, excluded: set[int]) -> list[int]:
        cfg = self.config
        if cfg.granularity == "exchange":
            core = list(state.exchanges.get(state.exchange_of.get(seq, seq), [seq]))
        else:
            core = [seq]
        radius = cfg.neighbour_radius
        if radius:
            episode = state.episode_of[seq]
            lo = state.position[core[0]] - radius
            hi = state.position[core[-1]] + radius
            core = [s for s in state.order[max(lo, 0) : hi + 1] if state.episode_of.get(s) == episode]
        return [s for s in core if s not in excluded]


class _Renderer:
    """Greedy fill of ranked candidates into a token cap, grouped under date lines."""

    def __init__(
        self,
        recall: Recall,
        state: _Session,
        counter: TokenCounter,
        excluded: set[int],
        language: str,
        dropped: list[Dropped],
        best: float | None,
        considered: int,
        problem: str | None,
        vectors: Mapping[int, np.ndarray],
    ) -> None:
        self.recall = recall
        self.vectors = vectors
        self.state = state
        self.counter = counter
        self.excluded = excluded
        self.language = language
        self.dropped = tuple(dropped)
        self.best = best
        self.considered = considered
        self.problem = problem
        cfg = recall.config
        self.header = cfg.header_zh if language == "zh" else cfg.header_en
        # Lines are captured now: the session may change after the search returns.
        self.lines: dict[int, str] = {}
        self.labels: dict[int, str] = {}
        self.item_seqs: dict[int, list[int]] = {}

    def _line_tokens(self, seq: int) -> int:
        key = (self.counter.name, self.language, seq)
        cached = self.state.token_cache.get(key)
        if cached is None:
            cached = self.counter.count_text(self.lines[seq])
            self.state.token_cache[key] = cached
        return cached

    def __call__(self, ranked: tuple[_Candidate, ...], max_tokens: int) -> RecallResult:
        with self.state.lock:
            return self._fill(ranked, max_tokens)

    def _prepare(self, seq: int) -> list[int]:
        seqs = self.item_seqs.get(seq)
        if seqs is None:
            state = self.state
            seqs = [s for s in self.recall._item_seqs(state, seq, self.excluded) if s in state.lines]
            for s in seqs:
                if s not in self.lines:
                    self.lines[s] = _render_line(state.messages[s], self.language)
                    self.labels[s] = self.recall._time_label(state.messages[s].timestamp, self.language)
            self.item_seqs[seq] = seqs
        return seqs

    def _fill(self, ranked: tuple[_Candidate, ...], max_tokens: int) -> RecallResult:
        counter = self.counter
        dropped = list(self.dropped)
        empty = RecallResult(
            (), "", 0, max_tokens, self.header, self.best, self.considered, tuple(dropped), self.problem,
            ranked, self,
        )
        remaining = max_tokens
        if remaining <= 0 or not ranked:
            return empty
        covered: set[int] = set()
        used_labels: set[str] = set()
        label_tokens: dict[str, int] = {}
        picked: list[tuple[_Candidate, list[int]]] = []
        over_budget = 0
        over_tokens = 0
        duplicates = 0
        picked_vectors: list[np.ndarray] = []
        threshold = self.recall.config.duplicate_similarity
        smallest = min(
            (self._line_tokens(s) for c in ranked[:50] for s in self._prepare(c.seq)), default=1
        )
        # Estimate: every line and date line costs its tokens plus a newline. Lines are
        # counted once per session and cached; the exact text is counted at the end.
        for candidate in ranked:
            if remaining < smallest + 1:
                break
            seqs = [s for s in self._prepare(candidate.seq) if s not in covered]
            if not seqs:
                continue
            cost = sum(self._line_tokens(s) + 1 for s in seqs)
            new_labels = {self.labels[s] for s in seqs} - used_labels
            for label in new_labels:
                if label not in label_tokens:
                    label_tokens[label] = counter.count_text(label) + 1
                cost += label_tokens[label]
            if cost > remaining:
                over_budget += 1
                over_tokens += cost
                continue
            vector = self.vectors.get(candidate.seq)
            if vector is not None:
                if picked_vectors and float(np.max(np.stack(picked_vectors) @ vector)) >= threshold:
                    duplicates += 1
                    continue
                picked_vectors.append(vector)
            remaining -= cost
            covered.update(seqs)
            used_labels.update(new_labels)
            picked.append((candidate, seqs))
        if over_budget:
            dropped.append(
                Dropped("recall", f"{over_budget} ranked passages", over_tokens, "over the recall token cap")
            )
        if duplicates:
            dropped.append(Dropped("recall", f"{duplicates} messages", 0, "near-duplicates of recalled ones"))
        while picked:
            items = self._items(picked)
            text = "\n".join(item.text for item in items)
            tokens = counter.count_text(text)
            if tokens <= max_tokens and sum(item.token_count + 1 for item in items) <= max_tokens:
                return RecallResult(
                    items, text, tokens, max_tokens, self.header, self.best, self.considered, tuple(dropped),
                    self.problem, ranked, self,
                )
            # Date lines repeated by out-of-order timestamps cost more than estimated: drop the weakest.
            weakest = min(range(len(picked)), key=lambda i: picked[i][0].score)
            _, seqs = picked.pop(weakest)
            dropped.append(Dropped("recall", f"seqs {list(seqs)}", 0, "over the recall token cap"))
        return dataclasses.replace(empty, dropped=tuple(dropped))

    def _items(self, picked: Sequence[tuple[_Candidate, list[int]]]) -> tuple[RecalledItem, ...]:
        """Items in log order; an item that starts a new day opens with its date line."""
        items = []
        current_label: str | None = None
        for candidate, seqs in sorted(picked, key=lambda p: p[1][0]):
            lines = []
            for s in seqs:
                if self.labels[s] != current_label:
                    current_label = self.labels[s]
                    lines.append(current_label)
                lines.append(self.lines[s])
            text = "\n".join(lines)
            first = self.state.messages.get(seqs[0])
            items.append(
                RecalledItem(
                    seqs=tuple(seqs),
                    text=text,
                    time_label=self.labels[seqs[0]],
                    timestamp=first.timestamp if first is not None else 0.0,
                    score=candidate.score,
                    token_count=self.counter.count_text(text),
                )
            )
        return tuple(items)
