"""Answering one query over a user's history: gather candidates, rank them, render the section.

One ranking covers every session searched: the asking session and, for a
user, every earlier session of that user. Keyword scores use the statistics
of the whole history (`CollectionStats` added up over the sessions: a word is
rare or common for this user, not for one chat), and candidates are the best
`RecallConfig.candidates` of each retriever over the whole history, not per
session, so no session is left unsearched and none is promoted for being
the best of a short chat. Then `_recall_rank` orders the candidates, `gate`
decides whether the history holds evidence for the query at all, and
`_recall_render` fills the token cap.

Nothing here raises: recall must never break a build.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from .._errors import BudgetError, ConfigError
from .._models import Message, Role
from .._stores.base import SessionStats
from .._tokens import TokenCounter
from .columns import EXCHANGE_SEQ_MASK, is_exchange_unit, items_are_single_messages
from .conclude import Shown, conclude
from .config import RecallConfig, RecallFilters
from .gate import DenseProfile
from .history_index import SLOT_SHIFT, split_by_slot
from .joined import GROUP_SHIFT, SEQ_MASK, GroupedLines, join_evidence
from .language import SECTION_HEADERS, is_cjk_text
from .lexical import CollectionStats, LexicalScores, no_scores
from .passages import best_message_scores, best_of_each_message
from .rank import Evidence, dense_similarities, named_speakers
from .render import RecallResult
from .units import SessionMirror

__all__ = ["answer", "answer_sessions", "check_search_arguments", "gather"]

logger = logging.getLogger("convmem")


@dataclasses.dataclass
class _Found:
    """What one session's indexes return for the query, before candidates are chosen."""

    messages: LexicalScores
    exchanges: LexicalScores
    coverage: LexicalScores | None
    """The share of the query each message holds; None when the index cannot say."""
    parts: dict[int, int]
    hits: list[tuple[int, float]]
    problem: str | None = None


@dataclasses.dataclass
class _Gathered:
    """One session's part of a search: its evidence and what rendering needs."""

    mirror: SessionMirror
    evidence: Evidence
    item_seqs: dict[int, list[int]]
    messages: dict[int, Message]
    lines: dict[int, str]
    passages: dict[int, list[tuple[int, int]]]
    newest: float
    oldest: float


def answer(
    mirror: SessionMirror,
    query: str,
    vector: np.ndarray | None,
    problem: str | None,
    *,
    excluded: Collection[int],
    max_tokens: int,
    counter: TokenCounter,
    filters: RecallFilters | None,
    config: RecallConfig,
) -> RecallResult:
    """What one session recalls for `query` within `max_tokens` (see `answer_sessions`)."""
    return answer_sessions(
        [mirror],
        query,
        vector,
        problem,
        excluded=excluded,
        max_tokens=max_tokens,
        counter=counter,
        filters=filters,
        config=config,
    )


def answer_sessions(
    mirrors: Sequence[SessionMirror],
    query: str,
    vector: np.ndarray | None,
    problem: str | None,
    *,
    excluded: Collection[int],
    max_tokens: int,
    counter: TokenCounter,
    filters: RecallFilters | None,
    config: RecallConfig,
) -> RecallResult:
    """What the sessions of one user recall together for `query`, in one section.

    ``mirrors[0]`` is the session that asks (`excluded` are its seqs, what the
    recent window holds); the others are the user's earlier sessions. `vector`
    is the query's embedding (``None`` without dense search; `problem` says why
    when it failed). All candidates are ranked together; the section shows the
    other sessions' items first, oldest session first, each opening with its
    date, then the asking session's. Items of another session carry its
    ``session_id``. When nothing in the history is evidence for the query,
    nothing is recalled and ``result.reason`` says why.
    """
    try:
        return _answer(mirrors, query, vector, problem, excluded, max_tokens, counter, filters, config)
    except Exception as exc:  # recall must never break a build
        logger.warning(
            "recall failed for session %r (%s: %s); nothing recalled",
            mirrors[0].session_id,
            type(exc).__name__,
            exc,
        )
        header = SECTION_HEADERS["zh" if config.language == "zh" else "en"]
        return RecallResult((), "", 0, max_tokens, header, None, 0, (), f"recall failed: {exc}")


def _answer(
    mirrors: Sequence[SessionMirror],
    query: str,
    vector: np.ndarray | None,
    problem: str | None,
    excluded: Collection[int],
    max_tokens: int,
    counter: TokenCounter,
    filters: RecallFilters | None,
    config: RecallConfig,
) -> RecallResult:
    collections, found = _lexical(mirrors, query, config)
    for position, (mirror, f) in enumerate(zip(mirrors, found, strict=True)):
        with mirror.lock:
            _dense_hits(mirror, vector, excluded if position == 0 else (), config, f)
        problem = problem or f.problem
    if any(f.problem for f in found):
        vector = None  # one session's vectors unusable: rank every session by words alike
    lexical_best = (
        max((f.messages.best() for f in found), default=0.0) or 1.0,
        max((f.exchanges.best() for f in found), default=0.0) or 1.0,
    )
    chosen = _chosen(found, config.candidates)
    profile = DenseProfile.of(mirrors) if vector is not None else None
    parts = []
    for position, (mirror, f, picked) in enumerate(zip(mirrors, found, chosen, strict=True)):
        if position and not (len(picked.messages) or len(picked.exchanges) or picked.hits):
            continue  # a session without a candidate adds nothing to rank or show
        with mirror.lock:
            parts.append(
                _gather(
                    mirror,
                    query,
                    vector,
                    f,
                    picked,
                    excluded if position == 0 else (),
                    filters,
                    config,
                    lexical_best,
                    profile,
                )
            )
    # Groups order the section: other sessions by their first message, the asker last.
    order = sorted(range(1, len(parts)), key=lambda p: (parts[p].oldest, parts[p].mirror.session_id))
    group_of_part = {p: group for group, p in enumerate(order)}
    group_of_part[0] = len(parts) - 1
    groups = [group_of_part[p] for p in range(len(parts))]
    evidence = join_evidence([(p.evidence, p.newest) for p in parts], groups)
    messages: dict[int, Message] = {}
    item_seqs: dict[int, list[int]] = {}
    lines: dict[int, str] = {}
    excerpts: dict[int, tuple[int, int]] = {}
    for part, group in zip(parts, groups, strict=True):
        base = group << GROUP_SHIFT
        messages.update((base | s, m) for s, m in part.messages.items())
        item_seqs.update((base | s, [base | i for i in seqs]) for s, seqs in part.item_seqs.items())
        lines.update((base | s, line) for s, line in part.lines.items())
        for seq, spans in part.passages.items():
            excerpts[base | seq] = spans[part.evidence.parts.get(seq, 0)]
    shown = Shown(
        messages=messages,
        item_seqs=item_seqs,
        lines=lines,
        excerpts=excerpts,
        line_cache=GroupedLines({g: p.mirror.line_cache for p, g in zip(parts, groups, strict=True)}),
        sessions={group: part.mirror.session_id for part, group in zip(parts, groups, strict=True)},
    )
    speakers = {name for mirror in mirrors for name in mirror.speakers}
    return conclude(
        evidence,
        shown,
        query,
        speakers=speakers,
        collection=collections["messages"],
        problem=problem,
        max_tokens=max_tokens,
        counter=counter,
        config=config,
    )


def _units(config: RecallConfig) -> tuple[bool, bool]:
    """Whether messages and exchanges are searched by words."""
    return config.granularity != "exchange", config.granularity != "message"


def _collections(
    mirrors: Sequence[SessionMirror], query: str, config: RecallConfig
) -> dict[str, CollectionStats | None]:
    """The keyword statistics of the whole history for `query`, per unit kind (None where a
    session's index cannot score as part of a larger collection)."""
    out: dict[str, CollectionStats | None] = {}
    for units, wanted in zip(("messages", "exchanges"), _units(config), strict=True):
        total: CollectionStats | None = None
        if wanted:
            for mirror in mirrors:
                with mirror.lock:
                    part = mirror.lexical_collection(units, query)
                if part is None:
                    total = None
                    break
                total = part if total is None else total + part
        out[units] = total
    return out


def _lexical(
    mirrors: Sequence[SessionMirror], query: str, config: RecallConfig
) -> tuple[dict[str, CollectionStats | None], list[_Found]]:
    """The keyword statistics of the whole history for `query` (per unit kind) and each
    session's keyword scores on that scale: in one pass over the user's `HistoryIndex`
    when every session keeps its documents there, else session by session."""
    views = [mirror.slot_views for mirror in mirrors]
    # A session with nothing mirrored (a new chat, before its first message gives it an
    # owner) scores nothing wherever it keeps its documents.
    held = [v for v, mirror in zip(views, mirrors, strict=True) if mirror.order or v is None]
    history = held[0][0].history if held and held[0] is not None else None
    if history is None or any(v is None or v[0].history is not history for v in held):
        each = _collections(mirrors, query, config)
        found = []
        for mirror in mirrors:
            with mirror.lock:
                found.append(_find(mirror, query, each, config))
        return each, found
    by_message, by_exchange = _units(config)
    slots = [v[0] for v in held if v is not None]
    kinds = ("messages", "exchanges") if by_exchange else ("messages",)
    joint = history.find(query, slots, kinds)
    # Passage ids are ``slot << 48 | seq << 8 | part``: their best per message is keyed
    # ``slot << 40 | seq``, the messages' joint keys.
    messages, parts = best_of_each_message(joint.scores["messages"], None)
    coverage = best_message_scores(joint.coverage)
    # A session outside the history (nothing mirrored) gets a slot number no view has.
    numbers = [v[0].slot if v is not None and v[0].history is history else -1 for v in views]
    by_slot = split_by_slot(messages, GROUP_SHIFT, numbers)
    coverage_by_slot = split_by_slot(coverage, GROUP_SHIFT, numbers)
    exchanges_by_slot = split_by_slot(joint.scores["exchanges"], SLOT_SHIFT, numbers) if by_exchange else {}
    parts_by_slot: dict[int, dict[int, int]] = {}
    for key, part in parts.items():
        parts_by_slot.setdefault(key >> GROUP_SHIFT, {})[key & SEQ_MASK] = part
    found = []
    for mirror, slot in zip(mirrors, numbers, strict=True):
        own_parts = parts_by_slot.get(slot, {})
        found.append(
            _Found(
                by_slot[slot] if by_message else no_scores(),
                exchanges_by_slot.get(slot, no_scores()),
                coverage_by_slot[slot],
                {seq: part for seq, part in own_parts.items() if seq in mirror.passages},
                [],
            )
        )
    collections: dict[str, CollectionStats | None] = {
        "messages": joint.collections["messages"],
        "exchanges": joint.collections.get("exchanges"),
    }
    return collections, found


def _find(
    mirror: SessionMirror,
    query: str,
    collections: Mapping[str, CollectionStats | None],
    config: RecallConfig,
) -> _Found:
    """One session's keyword scores (on the history's scale) and its keyword coverage (lock held)."""
    by_message, by_exchange = _units(config)
    messages, parts = (
        mirror.best_passages("messages", query, collections["messages"]) if by_message else (no_scores(), {})
    )
    exchanges = (
        mirror.lexical_scores("exchanges", query, collections["exchanges"]) if by_exchange else no_scores()
    )
    coverage = (
        mirror.best_passages("messages", query, collections["messages"], coverage=True)[0]
        if mirror.knows_coverage
        else None
    )
    if collections["messages"] is None:
        messages = _on_shared_scale(mirror.lexical_messages, query, messages)
    if collections["exchanges"] is None:
        exchanges = _on_shared_scale(mirror.lexical_exchanges, query, exchanges)
    return _Found(messages, exchanges, coverage, parts, [])


def _dense_hits(
    mirror: SessionMirror,
    vector: np.ndarray | None,
    excluded: Collection[int],
    config: RecallConfig,
    found: _Found,
) -> None:
    """Add the session's vector hits for the query to `found` (lock held)."""
    index = mirror.index
    if vector is None or index is None or not len(index):
        return
    if vector.shape[-1] != index.dimension:
        found.problem = (
            f"query vector has {vector.shape[-1]} dimensions, the index {index.dimension}; "
            "keywords only (call rebuild() after changing the embedder)"
        )
        logger.warning("recall for session %r: %s", mirror.session_id, found.problem)
        return
    try:
        # Over-fetch by the window instead of an IDSelector: selector search is slower.
        found.hits = index.search(vector, config.candidates + len(excluded))
    except Exception as exc:
        logger.warning("vector search failed for session %r: %s", mirror.session_id, exc)
        found.problem = f"vector search failed ({exc}); keywords only"


def _on_shared_scale(index: object, query: str, scores: LexicalScores) -> LexicalScores:
    """Scores of an index that cannot share collection statistics, divided by the score of a
    full match in its own session when it can say (BM25's idf depends on the collection)."""
    full_match = getattr(index, "full_match", None)
    if not len(scores) or full_match is None:
        return scores
    weight = float(full_match(query))
    return LexicalScores(scores.ids, scores.scores / weight) if weight > 0 else scores


@dataclasses.dataclass
class _Picked:
    messages: np.ndarray
    exchanges: np.ndarray
    hits: list[tuple[int, float]]


def _best_k(scores: Sequence[np.ndarray], k: int) -> list[np.ndarray]:
    """For each array of `scores`, a mask of those among the `k` best of all of them; of
    equal scores at the boundary, those of earlier arrays, then earlier places."""
    pooled = np.concatenate([np.asarray(v, dtype=np.float64) for v in scores]) if scores else np.zeros(0)
    if len(pooled) <= k:
        mask = np.ones(len(pooled), dtype=bool)
    else:
        kth = pooled[np.argpartition(pooled, len(pooled) - k)[len(pooled) - k]]
        mask = pooled > kth
        ties = np.flatnonzero(pooled == kth)[: max(k - int(mask.sum()), 0)]
        mask[ties] = True
    return np.split(mask, np.cumsum([len(v) for v in scores])[:-1]) if scores else []


def _chosen(found: Sequence[_Found], k: int) -> list[_Picked]:
    """The candidates of each session: those among the `k` best of each retriever over the
    whole history."""
    by_message = _best_k([f.messages.scores for f in found], k)
    by_exchange = _best_k([f.exchanges.scores for f in found], k)
    by_meaning = _best_k([np.array([s for _, s in f.hits], dtype=np.float64) for f in found], k)
    return [
        _Picked(
            f.messages.ids[m],
            f.exchanges.ids[x],
            [hit for hit, keep in zip(f.hits, d.tolist(), strict=True) if keep],
        )
        for f, m, x, d in zip(found, by_message, by_exchange, by_meaning, strict=True)
    ]


def _gather(
    mirror: SessionMirror,
    query: str,
    vector: np.ndarray | None,
    found: _Found,
    picked: _Picked,
    excluded: Collection[int],
    filters: RecallFilters | None,
    config: RecallConfig,
    lexical_best: tuple[float, float],
    profile: DenseProfile | None,
) -> _Gathered:
    """One session's candidates as `Evidence`, and what rendering them needs (lock held)."""
    columns = mirror.columns
    positions = [columns.positions(picked.messages), columns.exchange_positions(picked.exchanges)]
    if picked.hits:
        units = np.array([unit for unit, _ in picked.hits], dtype=np.int64)
        exchange = np.array([is_exchange_unit(unit) for unit, _ in picked.hits], dtype=bool)
        positions.append(columns.positions(units[~exchange]))
        positions.append(columns.exchange_positions(units[exchange] & EXCHANGE_SEQ_MASK))
    pool = _distinct(np.concatenate(positions))  # positions in log order: seqs ascending
    pool = pool[columns.column("candidate")[pool]]
    if excluded and len(pool):
        pool = pool[~np.isin(columns.column("seq")[pool], np.fromiter(excluded, dtype=np.int64))]
    if filters is not None and len(pool):
        order = mirror.order
        pool = pool[[filters.accepts(mirror.messages[order[at]]) for at in pool.tolist()]]
    seq_array = columns.column("seq")[pool]
    seqs: list[int] = seq_array.tolist()
    index = mirror.index
    dense_m = dense_x = typical = None
    vectors: dict[int, np.ndarray] = {}
    if seqs and vector is not None and index is not None:
        unit_of_exchange = {s: mirror.exchange_units.get(mirror.exchange_of.get(s, -1), s) for s in seqs}
        vectors = index.vectors(set(seqs) | set(unit_of_exchange.values()))
        dense_m, dense_x = dense_similarities(seqs, unit_of_exchange, vectors, vector, config.granularity)
        if profile is not None:
            typical = profile.typical(vector, [is_cjk_text(mirror.lines[s]) for s in seqs])
    named = named_speakers(mirror.speakers, query) if seqs else set()
    messages = [mirror.messages[s] for s in seqs]
    evidence = Evidence(
        seqs=seqs,
        dense_message=dense_m,
        dense_exchange=dense_x,
        lexical_message=(found.messages.lookup(seq_array) / lexical_best[0]).astype(np.float32),
        lexical_exchange=(found.exchanges.lookup(columns.column("exchange")[pool]) / lexical_best[1]).astype(
            np.float32
        ),
        said_by_named=(
            np.array([m.name in named for m in messages], dtype=bool)
            if named
            else np.zeros(len(seqs), dtype=bool)
        ),
        ages=mirror.newest_timestamp - columns.column("timestamp")[pool],
        episodes=columns.column("episode")[pool],
        vectors=vectors,
        positions=pool,
        coverage=None if found.coverage is None else found.coverage.lookup(seq_array).astype(np.float32),
        from_user=np.array([m.role is Role.USER for m in messages], dtype=bool),
        typical=typical,
        parts={s: found.parts[s] for s in seqs if s in found.parts},
    )
    item_seqs = {seq: _item_seqs(mirror, seq, excluded, config) for seq in seqs}
    wanted = {s for group in item_seqs.values() for s in group}
    first = mirror.messages[mirror.order[0]].timestamp if mirror.order else mirror.newest_timestamp
    return _Gathered(
        mirror,
        evidence,
        item_seqs,
        {s: mirror.messages[s] for s in wanted},
        {s: mirror.lines[s] for s in seqs},
        {s: mirror.passages[s] for s in wanted if s in mirror.passages},
        mirror.newest_timestamp,
        first,
    )


def _item_seqs(mirror: SessionMirror, seq: int, excluded: Collection[int], config: RecallConfig) -> list[int]:
    """The messages a recalled `seq` brings: its exchange or itself, plus neighbours (lock held)."""
    usable = mirror.lines
    if items_are_single_messages(config):
        return [seq] if seq not in excluded and seq in usable and seq not in mirror.small_talk else []
    if config.granularity == "exchange":
        core = list(mirror.exchanges.get(mirror.exchange_of.get(seq, seq), [seq]))
    else:
        core = [seq]
    radius = config.neighbour_radius
    if radius:
        episode = mirror.episode_of[seq]
        lo = mirror.position[core[0]] - radius
        hi = mirror.position[core[-1]] + radius
        core = [s for s in mirror.order[max(lo, 0) : hi + 1] if mirror.episode_of.get(s) == episode]
    return [s for s in core if s not in excluded and s in usable and s not in mirror.small_talk]


def gather(
    mirror: SessionMirror,
    query: str,
    vector: np.ndarray | None,
    excluded: Collection[int],
    filters: RecallFilters | None,
    config: RecallConfig,
) -> tuple[Evidence, str | None]:
    """The candidate messages of one session for `query` (lock held) and, when dense search
    failed, why: the best `config.candidates` of each retriever (BM25 over messages, BM25
    over exchanges, vector search), less what `excluded` and `filters` rule out."""
    collections = {
        units: (mirror.lexical_collection(units, query) if wanted else None)
        for units, wanted in zip(("messages", "exchanges"), _units(config), strict=True)
    }
    found = _find(mirror, query, collections, config)
    _dense_hits(mirror, vector, excluded, config, found)
    if found.problem:
        vector = None
    picked = _chosen([found], config.candidates)[0]
    best = (found.messages.best() or 1.0, found.exchanges.best() or 1.0)
    part = _gather(mirror, query, vector, found, picked, excluded, filters, config, best, None)
    return part.evidence, found.problem


def check_search_arguments(
    session_id: str, max_tokens: object, other_sessions: Sequence[object], session_stats: object
) -> None:
    """Refuse what `Recall.search` cannot search with, naming the argument."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
        raise BudgetError(
            f"max_tokens must be an int >= 0 (the tokens recall may fill), got {max_tokens!r:.60}"
        )
    if isinstance(other_sessions, str) or not all(isinstance(s, (str, SessionStats)) for s in other_sessions):
        raise ConfigError(
            f"other_sessions must be a list of session ids (or their SessionStats), got {other_sessions!r:.80}"
        )
    if session_stats is not None and (
        not isinstance(session_stats, SessionStats) or session_stats.session_id != session_id
    ):
        raise ConfigError(
            f"session_stats must be the SessionStats of session {session_id!r:.80}, "
            f"got {session_stats!r:.120}"
        )


def _distinct(values: np.ndarray) -> np.ndarray:
    """``np.unique(values)`` of an integer array: sorted, each value once. Not `np.unique`
    itself: it asks whether the array is masked, which imports ``numpy.ma`` (about 7 ms) in
    the first search of every new process."""
    values = np.sort(values)
    return values[np.concatenate(([True], values[1:] != values[:-1]))] if len(values) else values
