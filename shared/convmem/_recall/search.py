"""Answering one query over a session mirror: gather candidates, rank them, render the section.

`gather` reads the mirror and its vector index (BM25 over messages and
exchanges, vector search) into plain `Evidence`; `_recall_rank` orders it and
`_recall_render` fills the token cap. `answer` runs the three under the
mirror's lock and never raises: recall must never break a build.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections.abc import Collection, Iterator, Mapping, MutableMapping, Sequence

import numpy as np

from .._models import Message
from .._tokens import TokenCounter
from .config import RecallConfig, RecallFilters
from .intent import asks_for_several
from .language import SECTION_HEADERS, choose_language
from .lexical import no_scores
from .rank import Evidence, best_score, dense_similarities, named_speakers, normalized, rank
from .render import CachedLine, LineKey, RecallResult, render
from .units import EXCHANGE_SEQ_MASK, SessionMirror, is_exchange_unit, items_are_single_messages

__all__ = ["answer", "answer_sessions", "gather"]

logger = logging.getLogger("convmem")


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
    """What the session recalls for `query` within `max_tokens`.

    `vector` is the query's embedding (``None`` when the embedder failed, and
    `problem` says why); `excluded` seqs are never recalled.
    """
    try:
        with mirror.lock:
            evidence, search_problem = gather(mirror, query, vector, excluded, filters, config)
            ranking = rank(evidence, config, several=asks_for_several(query))
            ranked = ranking.ranked
            language = choose_language(config.language, query, (mirror.lines[r.seq] for r in ranked[:5]))
            rendered = render(
                ranked,
                item_seqs=_ItemSeqs(mirror, excluded, config, [r.seq for r in ranked]),
                messages=mirror.messages,
                vectors=evidence.vectors,
                language=language,
                max_tokens=max_tokens,
                counter=counter,
                config=config,
                line_cache=mirror.line_cache,
            )
        return RecallResult(
            rendered.items,
            rendered.text,
            rendered.tokens,
            max_tokens,
            SECTION_HEADERS[language],
            ranking.best_similarity,
            ranking.considered,
            ranking.dropped + rendered.dropped,
            search_problem or problem,
        )
    except Exception as exc:  # recall must never break a build
        return _nothing_recalled(mirror.session_id, exc, max_tokens, config)


class _ItemSeqs(Mapping[int, list[int]]):
    """``mirror.item_seqs`` of each ranked seq, computed when rendering asks for it: the
    section fills from the best candidates and usually stops long before the last."""

    def __init__(
        self, mirror: SessionMirror, excluded: Collection[int], config: RecallConfig, seqs: list[int]
    ) -> None:
        self._mirror, self._excluded, self._config, self._seqs = mirror, excluded, config, seqs
        self._known: dict[int, list[int]] = {}
        # A candidate passed what an item of one message needs (mirrored, not excluded,
        # not small talk): where items are their message alone, it is its own item.
        self._alone = frozenset(seqs) if items_are_single_messages(config) else frozenset()

    def __getitem__(self, seq: int) -> list[int]:
        if seq in self._alone:
            return [seq]
        found = self._known.get(seq)
        if found is None:
            if seq not in self._mirror.messages:
                raise KeyError(seq)
            found = self._known[seq] = self._mirror.item_seqs(seq, self._excluded, self._config)
        return found

    def __iter__(self) -> Iterator[int]:
        return iter(self._seqs)

    def __len__(self) -> int:
        return len(self._seqs)


def _nothing_recalled(session_id: str, exc: Exception, max_tokens: int, config: RecallConfig) -> RecallResult:
    """The empty result of a search that failed, logged: recall must never break a build."""
    logger.warning(
        "recall failed for session %r (%s: %s); nothing recalled", session_id, type(exc).__name__, exc
    )
    header = SECTION_HEADERS["zh" if config.language == "zh" else "en"]
    return RecallResult((), "", 0, max_tokens, header, None, 0, (), f"recall failed: {exc}")


def gather(
    mirror: SessionMirror,
    query: str,
    vector: np.ndarray | None,
    excluded: Collection[int],
    filters: RecallFilters | None,
    config: RecallConfig,
    hits: list[tuple[int, float]] | None = None,
) -> tuple[Evidence, str | None]:
    """The candidate messages for `query` (lock held) and, when dense search failed, why.

    Candidates are the best `config.candidates` of each retriever (BM25 over
    messages, BM25 over exchanges, vector search), less what `excluded` and
    `filters` rule out. `hits` are the vector search's, when it already ran
    (screening the sessions of a user) with nothing excluded.
    """
    granularity = config.granularity
    k = config.candidates
    lexical_m = mirror.lexical_scores("messages", query) if granularity != "exchange" else no_scores()
    lexical_x = mirror.lexical_scores("exchanges", query) if granularity != "message" else no_scores()

    columns = mirror.columns
    found = [columns.positions(lexical_m.top(k)), columns.exchange_positions(lexical_x.top(k))]

    index = mirror.index
    problem = None
    if vector is not None and index is not None and len(index):
        if vector.shape[-1] != index.dimension:
            problem = (
                f"query vector has {vector.shape[-1]} dimensions, the index {index.dimension}; "
                "keywords only (call rebuild() after changing the embedder)"
            )
            logger.warning("recall for session %r: %s", mirror.session_id, problem)
            vector = None
        else:
            try:
                # Over-fetch by the window instead of an IDSelector: selector search is slower.
                if hits is None or excluded:
                    hits = index.search(vector, k + len(excluded))
            except Exception as exc:
                logger.warning("vector search failed for session %r: %s", mirror.session_id, exc)
                problem = f"vector search failed ({exc}); keywords only"
                hits, vector = [], None
            units = np.array([unit for unit, _ in hits], dtype=np.int64)
            exchange = np.array([is_exchange_unit(unit) for unit, _ in hits], dtype=bool)
            found.append(columns.positions(units[~exchange]))
            found.append(columns.exchange_positions(units[exchange] & EXCHANGE_SEQ_MASK))

    pool = np.unique(np.concatenate(found))  # positions in log order: seqs ascending
    pool = pool[columns.column("candidate")[pool]]
    if excluded and len(pool):
        pool = pool[~np.isin(columns.column("seq")[pool], np.fromiter(excluded, dtype=np.int64))]
    if filters is not None and len(pool):
        order = mirror.order
        pool = pool[[filters.accepts(mirror.messages[order[at]]) for at in pool.tolist()]]
    seq_array = columns.column("seq")[pool]
    seqs: list[int] = seq_array.tolist()
    dense_m = dense_x = None
    vectors: dict[int, np.ndarray] = {}
    if seqs and vector is not None and index is not None:
        unit_of_exchange = {s: mirror.exchange_units.get(mirror.exchange_of.get(s, -1), s) for s in seqs}
        vectors = index.vectors(set(seqs) | set(unit_of_exchange.values()))
        dense_m, dense_x = dense_similarities(seqs, unit_of_exchange, vectors, vector, granularity)
    named = named_speakers(mirror.speakers, query) if seqs else set()
    evidence = Evidence(
        seqs=seqs,
        dense_message=dense_m,
        dense_exchange=dense_x,
        lexical_message=normalized(seq_array, lexical_m),
        lexical_exchange=normalized(columns.column("exchange")[pool], lexical_x),
        said_by_named=(
            np.array([mirror.messages[s].name in named for s in seqs], dtype=bool)
            if named
            else np.zeros(len(seqs), dtype=bool)
        ),
        ages=mirror.newest_timestamp - columns.column("timestamp")[pool],
        episodes=columns.column("episode")[pool],
        vectors=vectors,
        positions=pool,
        lexical_scale=(
            _shared_scale(mirror.lexical_messages, query, lexical_m),
            _shared_scale(mirror.lexical_exchanges, query, lexical_x),
        ),
    )
    return evidence, problem


def _shared_scale(index: object, query: str, scores: Mapping[int, float]) -> float:
    """The session's best score on a scale shared by sessions: divided by the score of a
    full match in this session's index when the index can say (BM25's idf depends on the
    session: the same words score higher in a longer log), else as it is."""
    best = best_score(scores)
    full_match = getattr(index, "full_match", None)
    if not best or full_match is None:
        return best
    weight = float(full_match(query))
    return best / weight if weight > 0 else best


# A candidate of a search over several sessions is ``group << _GROUP_SHIFT | seq``:
# seqs stay below 2**40, and groups order the sessions as the section shows them.
_GROUP_SHIFT = 40
_SEQ_MASK = (1 << _GROUP_SHIFT) - 1


@dataclasses.dataclass
class _Gathered:
    """One session's part of a search over several: its evidence and what rendering needs."""

    mirror: SessionMirror
    evidence: Evidence
    item_seqs: dict[int, list[int]]
    messages: dict[int, Message]
    lines: dict[int, str]
    newest: float
    oldest: float


def _gather_one(
    mirror: SessionMirror,
    query: str,
    vector: np.ndarray | None,
    excluded: Collection[int],
    filters: RecallFilters | None,
    config: RecallConfig,
    hits: list[tuple[int, float]] | None = None,
) -> tuple[_Gathered, str | None]:
    with mirror.lock:
        evidence, problem = gather(mirror, query, vector, excluded, filters, config, hits)
        item_seqs = {seq: mirror.item_seqs(seq, excluded, config) for seq in evidence.seqs}
        wanted = {s for seqs in item_seqs.values() for s in seqs}
        messages = {s: mirror.messages[s] for s in wanted}
        lines = {s: mirror.lines[s] for s in evidence.seqs if s in mirror.lines}
        first = mirror.messages[mirror.order[0]].timestamp if mirror.order else mirror.newest_timestamp
        part = _Gathered(mirror, evidence, item_seqs, messages, lines, mirror.newest_timestamp, first)
        return part, problem


def _joined(parts: Sequence[_Gathered], groups: Sequence[int]) -> Evidence:
    """The parts' evidence as one, on one lexical scale, keyed by ``group << 40 | seq``."""
    top_m = max((p.evidence.lexical_scale[0] for p in parts), default=0.0) or 1.0
    top_x = max((p.evidence.lexical_scale[1] for p in parts), default=0.0) or 1.0
    newest = max(p.newest for p in parts)
    dense = any(p.evidence.dense_message is not None for p in parts)
    seqs: list[int] = []
    vectors: dict[int, np.ndarray] = {}
    arrays: dict[str, list[np.ndarray]] = {
        name: [] for name in ("dm", "dx", "lm", "lx", "named", "ages", "episodes", "positions")
    }
    for part, group in zip(parts, groups, strict=True):
        ev, base = part.evidence, group << _GROUP_SHIFT
        n = len(ev.seqs)
        seqs.extend(base | s for s in ev.seqs)
        vectors.update((base | s, v) for s, v in ev.vectors.items())
        zeros = np.zeros(n, dtype=np.float32)
        arrays["dm"].append(ev.dense_message if ev.dense_message is not None else zeros)
        arrays["dx"].append(ev.dense_exchange if ev.dense_exchange is not None else zeros)
        arrays["lm"].append(ev.lexical_message * np.float32(ev.lexical_scale[0] / top_m))
        arrays["lx"].append(ev.lexical_exchange * np.float32(ev.lexical_scale[1] / top_x))
        arrays["named"].append(np.asarray(ev.said_by_named, dtype=bool))
        arrays["ages"].append(np.asarray(ev.ages, dtype=np.float64) + (newest - part.newest))
        arrays["episodes"].append(np.asarray(ev.episodes, dtype=np.int64) | base)
        arrays["positions"].append(
            np.asarray(ev.seqs if ev.positions is None else ev.positions, dtype=np.int64)
        )

    def joined(name: str, dtype: type) -> np.ndarray:
        return np.concatenate(arrays[name]).astype(dtype) if seqs else np.zeros(0, dtype=dtype)

    return Evidence(
        seqs=seqs,
        dense_message=joined("dm", np.float32) if dense else None,
        dense_exchange=joined("dx", np.float32) if dense else None,
        lexical_message=joined("lm", np.float32),
        lexical_exchange=joined("lx", np.float32),
        said_by_named=joined("named", bool),
        ages=joined("ages", np.float64),
        episodes=joined("episodes", np.int64).tolist(),
        vectors=vectors,
        positions=joined("positions", np.int64).tolist(),
        lexical_scale=(top_m, top_x),
    )


class _Lines(MutableMapping[LineKey, CachedLine]):
    """The mirrors' rendered lines (``render``'s ``line_cache``) under candidate keys
    ``group << 40 | seq``: a line rendered by one search is not rendered by the next."""

    def __init__(self, caches: Mapping[int, MutableMapping[LineKey, CachedLine]]) -> None:
        self._caches = caches

    def _split(self, key: LineKey) -> tuple[MutableMapping[LineKey, CachedLine], LineKey]:
        name, language, candidate = key
        return self._caches[candidate >> _GROUP_SHIFT], (name, language, candidate & _SEQ_MASK)

    def __getitem__(self, key: LineKey) -> CachedLine:
        cache, own = self._split(key)
        return cache[own]

    def __setitem__(self, key: LineKey, value: CachedLine) -> None:
        cache, own = self._split(key)
        cache[own] = value

    def __delitem__(self, key: LineKey) -> None:
        cache, own = self._split(key)
        del cache[own]

    def __iter__(self) -> Iterator[LineKey]:
        for group, cache in self._caches.items():
            for name, language, seq in list(cache):
                yield name, language, group << _GROUP_SHIFT | seq

    def __len__(self) -> int:
        return sum(len(cache) for cache in self._caches.values())


# Of a user's other sessions, those with the best keyword or meaning match are
# searched in full (their candidates ranked with the asking session's): the
# cost of a search grows with what is retrieved, not with the user's sessions.
SESSIONS_SEARCHED = 12


def _screened(
    mirrors: Sequence[SessionMirror], query: str, vector: np.ndarray | None, candidates: int
) -> list[tuple[SessionMirror, list[tuple[int, float]] | None]]:
    """The asking session (first) and the other sessions worth a full search: the
    `SESSIONS_SEARCHED` best by their best keyword match (on the scale sessions share)
    and the `SESSIONS_SEARCHED` best by their most similar message; each with the
    vector search screening ran (its `candidates` best units), to be used again."""
    if len(mirrors) <= SESSIONS_SEARCHED + 1:
        return [(mirror, None) for mirror in mirrors]
    by_words: list[tuple[float, int]] = []
    by_meaning: list[tuple[float, int]] = []
    searched: dict[int, list[tuple[int, float]]] = {}
    for position in range(1, len(mirrors)):
        mirror = mirrors[position]
        with mirror.lock:
            scores = mirror.lexical_scores("messages", query)
            if scores:
                by_words.append((_shared_scale(mirror.lexical_messages, query, scores), position))
            index = mirror.index
            if (
                vector is not None
                and index is not None
                and len(index)
                and index.dimension == vector.shape[-1]
            ):
                try:
                    hits = index.search(vector, candidates)
                except Exception as exc:  # screened out, not fatal: the others are still searched
                    logger.warning("vector search failed for session %r: %s", mirror.session_id, exc)
                    hits = []
                if hits:
                    by_meaning.append((float(hits[0][1]), position))
                    searched[position] = hits
    chosen = {position for _, position in heapq.nlargest(SESSIONS_SEARCHED, by_words)}
    chosen.update(position for _, position in heapq.nlargest(SESSIONS_SEARCHED, by_meaning))
    return [(mirrors[0], None), *((mirrors[p], searched.get(p)) for p in sorted(chosen))]


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
    """What several sessions of one user recall together for `query`, in one section.

    ``mirrors[0]`` is the session that asks (`excluded` are its seqs); the
    others are the user's earlier sessions. Candidates of all sessions are
    ranked together (one lexical scale; the asking session's first on a tie),
    and the section shows the other sessions' items first, oldest session
    first, each session opening with its date, then the asking session's.
    Items of another session carry its ``session_id``.
    """
    if len(mirrors) == 1:
        return answer(
            mirrors[0],
            query,
            vector,
            problem,
            excluded=excluded,
            max_tokens=max_tokens,
            counter=counter,
            filters=filters,
            config=config,
        )
    try:
        parts: list[_Gathered] = []
        for position, (mirror, hits) in enumerate(_screened(mirrors, query, vector, config.candidates)):
            part, search_problem = _gather_one(
                mirror, query, vector, excluded if position == 0 else (), filters, config, hits
            )
            parts.append(part)
            problem = problem or search_problem
        # Groups order the section: other sessions by their first message, the asker last.
        shown = sorted(range(1, len(parts)), key=lambda p: (parts[p].oldest, parts[p].mirror.session_id))
        group_of_part = {p: group for group, p in enumerate(shown)}
        group_of_part[0] = len(parts) - 1
        groups = [group_of_part[p] for p in range(len(parts))]
        evidence = _joined(parts, groups)
        ranking = rank(evidence, config, several=asks_for_several(query))
        messages: dict[int, Message] = {}
        item_seqs: dict[int, list[int]] = {}
        lines: dict[int, str] = {}
        for part, group in zip(parts, groups, strict=True):
            base = group << _GROUP_SHIFT
            messages.update((base | s, m) for s, m in part.messages.items())
            item_seqs.update((base | s, [base | i for i in seqs]) for s, seqs in part.item_seqs.items())
            lines.update((base | s, line) for s, line in part.lines.items())
        ranked = ranking.ranked
        language = choose_language(config.language, query, (lines.get(r.seq, "") for r in ranked[:5]))
        rendered = render(
            ranked,
            item_seqs=item_seqs,
            messages=messages,
            vectors=evidence.vectors,
            language=language,
            max_tokens=max_tokens,
            counter=counter,
            config=config,
            line_cache=_Lines({g: p.mirror.line_cache for p, g in zip(parts, groups, strict=True)}),
            group_of=lambda seq: seq >> _GROUP_SHIFT,
        )
        session_of_group = {group: part.mirror.session_id for part, group in zip(parts, groups, strict=True)}
        asker = len(parts) - 1
        items = tuple(
            dataclasses.replace(
                item,
                seqs=tuple(s & _SEQ_MASK for s in item.seqs),
                session_id=None
                if item.seqs[0] >> _GROUP_SHIFT == asker
                else session_of_group[item.seqs[0] >> _GROUP_SHIFT],
            )
            for item in rendered.items
        )
        return RecallResult(
            items,
            rendered.text,
            rendered.tokens,
            max_tokens,
            SECTION_HEADERS[language],
            ranking.best_similarity,
            ranking.considered,
            ranking.dropped + rendered.dropped,
            problem,
        )
    except Exception as exc:  # recall must never break a build
        return _nothing_recalled(mirrors[0].session_id, exc, max_tokens, config)
