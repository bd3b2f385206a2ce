"""Answering one query over a session mirror: gather candidates, rank them, render the section.

`gather` reads the mirror and its vector index (BM25 over messages and
exchanges, vector search) into plain `Evidence`; `_recall_rank` orders it and
`_recall_render` fills the token cap. `answer` runs the three under the
mirror's lock and never raises: recall must never break a build.
"""

from __future__ import annotations

import logging
from collections.abc import Collection

import numpy as np

from ._recall_config import RecallConfig, RecallFilters
from ._recall_language import SECTION_HEADERS, choose_language
from ._recall_rank import Evidence, dense_similarities, named_speakers, normalized, rank
from ._recall_render import RecallResult, render
from ._recall_units import SessionMirror, exchange_first_seq, is_exchange_unit
from ._tokens import TokenCounter

__all__ = ["answer", "gather"]

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
            ranking = rank(evidence, config)
            ranked = ranking.ranked
            language = choose_language(config.language, query, (mirror.lines[r.seq] for r in ranked[:5]))
            rendered = render(
                ranked,
                item_seqs={r.seq: mirror.item_seqs(r.seq, excluded, config) for r in ranked},
                messages=mirror.messages,
                vectors=evidence.vectors,
                language=language,
                max_tokens=max_tokens,
                counter=counter,
                config=config,
                token_cache=mirror.token_cache,
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
        logger.warning(
            "recall failed for session %r (%s: %s); nothing recalled",
            mirror.session_id,
            type(exc).__name__,
            exc,
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
) -> tuple[Evidence, str | None]:
    """The candidate messages for `query` (lock held) and, when dense search failed, why.

    Candidates are the best `config.candidates` of each retriever (BM25 over
    messages, BM25 over exchanges, vector search), less what `excluded` and
    `filters` rule out.
    """
    granularity = config.granularity
    k = config.candidates
    lexical_m = mirror.lexical_scores("messages", query) if granularity != "exchange" else {}
    lexical_x = mirror.lexical_scores("exchanges", query) if granularity != "message" else {}

    pool: set[int] = set()
    for seq, _ in sorted(lexical_m.items(), key=lambda kv: -kv[1])[:k]:
        pool.add(seq)
    for first, _ in sorted(lexical_x.items(), key=lambda kv: -kv[1])[:k]:
        pool.update(mirror.exchanges.get(first, ()))

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
                hits = index.search(vector, k + len(excluded))
            except Exception as exc:
                logger.warning("vector search failed for session %r: %s", mirror.session_id, exc)
                problem = f"vector search failed ({exc}); keywords only"
                hits, vector = [], None
            for unit, _ in hits:
                if is_exchange_unit(unit):
                    pool.update(mirror.exchanges.get(exchange_first_seq(unit), ()))
                else:
                    pool.add(unit)

    seqs = sorted(
        s
        for s in pool
        if s in mirror.messages
        and s not in excluded
        and s not in mirror.small_talk
        and (filters is None or filters.accepts(mirror.messages[s]))
    )
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
        lexical_message=normalized(seqs, lexical_m),
        lexical_exchange=normalized([mirror.exchange_of.get(s, -1) for s in seqs], lexical_x),
        said_by_named=np.array([mirror.messages[s].name in named for s in seqs], dtype=bool),
        ages=np.array(
            [mirror.newest_timestamp - mirror.messages[s].timestamp for s in seqs], dtype=np.float64
        ),
        episodes=[mirror.episode_of[s] for s in seqs],
        vectors=vectors,
    )
    return evidence, problem
