"""Ranking recall candidates: fusion, boosts, relevance floors and MMR, over plain arrays.

Nothing here touches an index, a store or a lock: `rank` takes the evidence
gathered for each candidate message (`Evidence`) and a `RecallConfig`, and
returns the candidates best first. Each candidate's score blends:

- dense similarity of the message and of the exchange it belongs to,
- BM25 over the message and over its exchange (normalized by the best match),
- a boost when the message was said by someone the query names,
- a boost by how relevant the message's episode (a run of messages without
  a long pause) is as a whole: evidence clusters in episodes,
- a boost by how relevant the messages right before and after it are: a turn
  next to a relevant one is often part of the same thread,
- an optional recency boost with a half-life.

Before any boost, the dense similarities take in pseudo-relevance feedback:
each candidate's similarity to the centroid of the few best candidates (what
the query is about, as the conversation words it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .._context.window import Dropped
from .config import Granularity, RecallConfig
from .language import has_cjk
from .lexical import LexicalScores

__all__ = [
    "Evidence",
    "Ranked",
    "Ranking",
    "blend",
    "dense_similarities",
    "diversify",
    "named_speakers",
    "normalized",
    "rank",
    "relevance_floor",
    "without_speakers",
]

# MMR re-ranks this many of the best candidates; the rest keep their order.
_MMR_HEAD = 150
# Pseudo-relevance feedback reads the centroid of the _FEEDBACK_DEPTH best candidates, and
# only when there are _FEEDBACK_POOL candidates or more: in a smaller pool the best ten are
# not a chosen few but most of the session, and their centroid says nothing of the query.
_FEEDBACK_DEPTH = 10
_FEEDBACK_POOL = 50


@dataclasses.dataclass(frozen=True)
class Evidence:
    """What is known about each candidate message; arrays are aligned with `seqs`.

    ``dense_message``/``dense_exchange`` are ``None`` when there was no dense
    search (no embedder, no index); ``lexical_*`` are BM25 scores divided by
    the best score of any message (exchange) in the session.
    """

    seqs: Sequence[int]
    dense_message: np.ndarray | None
    dense_exchange: np.ndarray | None
    lexical_message: np.ndarray
    lexical_exchange: np.ndarray
    said_by_named: np.ndarray
    """True where the message's speaker is one the query names."""
    ages: np.ndarray
    """Seconds between the message and the newest message of the session."""
    episodes: Sequence[int] | np.ndarray
    vectors: Mapping[int, np.ndarray]
    """Message vectors by seq (for MMR); may be empty."""
    lexical_scale: tuple[float, float] = (0.0, 0.0)
    """The best lexical scores (message, exchange) of the session on a scale shared by
    sessions (0.0: no match): the ``lexical_*`` arrays times these compare across
    sessions, which puts the evidence of several sessions on one scale."""
    positions: Sequence[int] | np.ndarray | None = None
    """Each message's place in its session's log, so that two candidates of one episode
    one place apart are neighbours (None: the seqs are the places)."""
    coverage: np.ndarray | None = None
    """The share of the query's information each message holds (`BM25Index.coverage`;
    None when the index cannot say): what `gate.judge` reads."""
    from_user: np.ndarray | None = None
    """True where the user said the message (None: not known)."""
    typical: np.ndarray | None = None
    """The query's similarity to the history's typical message of each candidate's
    language (`gate.DenseProfile`; None without dense search)."""
    parts: Mapping[int, int] = dataclasses.field(default_factory=dict)
    """For a long message, the passage that matched the query best (seq -> part)."""


class Ranked(NamedTuple):
    """A candidate that passed the floors, as ranking placed it (a tuple: a search
    makes hundreds, and most are never rendered)."""

    seq: int
    score: float
    similarity: float | None
    """The best cosine similarity of the message or its exchange (``None`` without dense search)."""


@dataclasses.dataclass(frozen=True)
class Ranking:
    ranked: tuple[Ranked, ...]
    """Candidates above the relevance floor, best first."""
    best_similarity: float | None
    considered: int
    dropped: tuple[Dropped, ...]


def dense_similarities(
    seqs: Sequence[int],
    exchange_unit_of: Mapping[int, int],
    vectors: Mapping[int, np.ndarray],
    query: np.ndarray,
    granularity: Granularity,
) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarity of each message's own unit and of its exchange's unit to `query`.

    A message without a vector of its own takes its exchange's, and the other
    way round; with granularity "exchange" a message is its exchange.
    """
    dense_m = np.zeros(len(seqs), dtype=np.float32)
    dense_x = np.zeros(len(seqs), dtype=np.float32)
    for i, s in enumerate(seqs):
        own = vectors.get(s)
        ex = vectors.get(exchange_unit_of[s])
        sim_m = float(own @ query) if own is not None else None
        sim_x = float(ex @ query) if ex is not None else None
        if granularity == "exchange":
            sim_m = sim_x
        dense_m[i] = sim_m if sim_m is not None else (sim_x if sim_x is not None else 0.0)
        dense_x[i] = sim_x if sim_x is not None else dense_m[i]
    return dense_m, dense_x


def normalized(keys: Sequence[int] | np.ndarray, scores: Mapping[int, float]) -> np.ndarray:
    """``scores[key] / max(scores)`` for each key (0 for a missing key)."""
    found = LexicalScores.of(scores)
    top = found.best() or 1.0
    return (found.lookup(np.asarray(keys, dtype=np.int64)) / top).astype(np.float32)


def best_score(scores: Mapping[int, float]) -> float:
    """The best score, 0.0 when there is none (see `Evidence.lexical_scale`)."""
    return LexicalScores.of(scores).best()


def blend(
    message: np.ndarray, exchange: np.ndarray, granularity: Granularity, exchange_weight: float
) -> np.ndarray:
    """A message's score from its own and its exchange's, as the granularity says."""
    if granularity == "message":
        return message
    if granularity == "exchange":
        return exchange
    return (1 - exchange_weight) * message + exchange_weight * exchange


def _fuse(dense: np.ndarray, lexical: np.ndarray, config: RecallConfig) -> np.ndarray:
    if config.fusion == "weighted":
        low, high = float(dense.min()), float(dense.max())
        dense_norm = (dense - low) / (high - low) if high > low else np.ones_like(dense)
        return np.asarray(config.dense_weight * dense_norm + (1 - config.dense_weight) * lexical)
    dense_rank = np.empty(len(dense))
    dense_rank[np.argsort(-dense, kind="stable")] = np.arange(len(dense))
    lex_rank = np.empty(len(dense))
    lex_rank[np.argsort(-lexical, kind="stable")] = np.arange(len(dense))
    score = config.dense_weight / (config.rrf_k + dense_rank) + (1 - config.dense_weight) / (
        config.rrf_k + lex_rank
    )
    return np.asarray(score / score.max())


def _with_feedback(
    dense: np.ndarray, first_pass: np.ndarray, evidence: Evidence, weight: float
) -> np.ndarray:
    """`dense` blended with each candidate's similarity to the centroid of the best
    candidates of `first_pass` (Rocchio's pseudo-relevance feedback).

    A question and its answers rarely share words or phrasing; the best few
    candidates do share the answers' (the conversation's own way of talking
    about the subject), so their centroid finds more of the same. Candidates
    without a vector get no feedback.
    """
    vectors, seqs = evidence.vectors, evidence.seqs
    if not vectors or len(seqs) < _FEEDBACK_POOL:
        return dense
    zero = np.zeros(next(iter(vectors.values())).shape[0], dtype=np.float32)
    matrix = np.stack([vectors.get(s, zero) for s in seqs])
    best = np.argsort(-first_pass, kind="stable")[:_FEEDBACK_DEPTH]
    centroid = matrix[best].mean(axis=0)
    norm = float(np.linalg.norm(centroid))
    if not norm:
        return dense
    return np.asarray((1 - weight) * dense + weight * (matrix @ (centroid / norm)))


def _boosted(
    score: np.ndarray, evidence: Evidence, config: RecallConfig, about_user: bool = False
) -> tuple[np.ndarray, float]:
    """Scores with the boosts added, and the part of the boost every candidate got.

    In a conversation of one episode every candidate gets the same episode boost:
    it tells nothing about relevance, so the relevance floor leaves it out. The
    episode and neighbour boosts read the scores before either is added, so a
    message is lifted by its context's own relevance, not by its context's boosts.
    """
    shared = 0.0
    if about_user and config.user_weight and evidence.from_user is not None and evidence.from_user.any():
        score = score + config.user_weight * score * np.asarray(evidence.from_user, dtype=np.float64)
    if config.speaker_weight and evidence.said_by_named.any():
        score = score + config.speaker_weight * np.asarray(evidence.said_by_named, dtype=np.float64)
    if config.recency_weight:
        half_life = config.recency_half_life_days * 86400.0
        score = score + config.recency_weight * np.power(0.5, np.maximum(evidence.ages, 0.0) / half_life)
    boosted = score
    if config.episode_weight and len(score):
        episodes, episode_of = np.unique(np.asarray(evidence.episodes, dtype=np.int64), return_inverse=True)
        best_in_episode = np.full(len(episodes), -np.inf)
        np.maximum.at(best_in_episode, episode_of, score)
        boosted = boosted + config.episode_weight * best_in_episode[episode_of]
        shared = config.episode_weight * float(best_in_episode.min())
    if config.neighbour_weight:
        boosted = boosted + config.neighbour_weight * _best_neighbour(score, evidence)
    return boosted, shared


def _best_neighbour(score: np.ndarray, evidence: Evidence) -> np.ndarray:
    """Each candidate's best neighbour score: of the candidates one place before and after
    it in the same episode (0.0 where neither is a candidate)."""
    places = np.asarray(evidence.seqs if evidence.positions is None else evidence.positions, dtype=np.int64)
    episodes = np.asarray(evidence.episodes, dtype=np.int64)
    # In (episode, place) order, neighbours are next to each other.
    order = np.lexsort((places, episodes))
    place, episode, value = places[order], episodes[order], score[order]
    adjacent = (episode[1:] == episode[:-1]) & (place[1:] == place[:-1] + 1)
    best = np.zeros(len(order), dtype=np.float64)
    best[1:] = np.where(adjacent, value[:-1], 0.0)
    best[:-1] = np.maximum(best[:-1], np.where(adjacent, value[1:], 0.0))
    unsorted = np.empty_like(best)
    unsorted[order] = best
    return unsorted


def rank(
    evidence: Evidence, config: RecallConfig, *, several: bool = False, about_user: bool = False
) -> Ranking:
    """Score every candidate, drop those below the relevance floor, and order the rest.

    A candidate passes the floor when it is similar enough by meaning
    (``min_score``) or a strong keyword match (``min_lexical``), or when it is
    right next to (same episode) a candidate at least ``neighbour_min_score``
    similar and above the relevance floor: the reply that says what "it" was
    ("It's a book by Patrick Rothfuss") rarely looks like the question on its own. Without
    dense search, a candidate passes when it matches any keyword. Then it
    needs a score of at least `relevance_floor` of the best candidate's (both
    less the episode boost that every candidate got): what falls short is not
    recalled however much room is left. `several`: the query asks for several
    things (`_intent.asks_for_several`), which lowers the floor that ranking picks.
    `about_user`: the query asks about the user (`reading.asks_about_user`), so what
    the user said weighs more than what the assistant explained (`user_weight`).
    With `Evidence.typical`, a candidate passes by meaning only when it is at least
    `RecallConfig.dense_margin` more similar to the query than the history's typical
    message of its language.
    """
    seqs = evidence.seqs
    if not seqs:
        return Ranking((), None, 0, ())
    granularity, weight = config.granularity, config.exchange_weight
    dense_m, dense_x = evidence.dense_message, evidence.dense_exchange
    lexical = blend(evidence.lexical_message, evidence.lexical_exchange, granularity, weight)
    has_dense = dense_m is not None and dense_x is not None
    if dense_m is not None and dense_x is not None:
        similarity = np.maximum(dense_m, dense_x)
        dense = blend(dense_m, dense_x, granularity, weight)
        if config.feedback_weight:
            dense = _with_feedback(dense, _fuse(dense, lexical, config), evidence, config.feedback_weight)
        score = _fuse(dense, lexical, config)
        by_meaning = similarity >= config.min_score
        if evidence.typical is not None:
            by_meaning &= similarity - evidence.typical >= config.dense_margin
        # Passing is by the best match of the message or its exchange, by words as by
        # meaning: a user's "By the way, I saw Dr. Smith on March 3rd" inside an exchange
        # about cough remedies matches "doctor's appointments in March" by its own words,
        # while the long answer around it dilutes the exchange's match (and the blend).
        by_words = np.maximum(evidence.lexical_message, evidence.lexical_exchange)
        eligible = by_meaning | (by_words >= config.min_lexical)
    else:
        similarity = np.zeros(len(seqs), dtype=np.float32)
        score = lexical.astype(np.float64)
        eligible = lexical > 0
    score, shared_boost = _boosted(np.asarray(score, dtype=np.float64), evidence, config, about_user)

    fraction = relevance_floor(config, has_dense, several=several)
    own = score - shared_boost
    if has_dense and config.neighbour_min_score is not None and eligible.any():
        anchors = eligible & (similarity >= config.neighbour_min_score)
        anchors &= own >= fraction * float(own[eligible].max())
        eligible = eligible | (_best_neighbour(anchors.astype(np.float64), evidence) > 0)
    dropped = []
    below = int(len(seqs) - eligible.sum())
    if below:
        dropped.append(
            Dropped("recall", f"{below} candidate messages", 0, f"below min_score {config.min_score}")
        )
    if fraction and eligible.any():
        weak = eligible & (own < fraction * float(own[eligible].max()))
        if weak.any():
            eligible = eligible & ~weak
            dropped.append(
                Dropped(
                    "recall",
                    f"{int(weak.sum())} candidate messages",
                    0,
                    f"below the relevance floor ({fraction:.0%} of the best score)",
                )
            )
    by_score = np.argsort(-score, kind="stable")
    order = by_score[eligible[by_score]].tolist()
    best = float(similarity[order].max()) if has_dense and order else None
    order = diversify(order, score, seqs, evidence.vectors, config.mmr_lambda)
    scores, similarities = score.tolist(), similarity.tolist()
    ranked = tuple(Ranked(seqs[i], scores[i], similarities[i] if has_dense else None) for i in order)
    return Ranking(ranked, best, len(seqs), tuple(dropped))


# The relevance floor when the config leaves it to the ranking (``relevance_floor=None``).
_FLOOR_WITH_DENSE = 0.5
_FLOOR_WITH_DENSE_FOR_SEVERAL = 0.4
_FLOOR_BY_WORDS = 0.25


def relevance_floor(config: RecallConfig, has_dense: bool, *, several: bool = False) -> float:
    """The fraction of the best score a candidate needs to be recalled.

    A question that asks for several things (`several`) has its answer spread
    over turns that each match it less than the best one does, so with dense
    search it gets a lower floor. By words only the floor is low already (the
    episode boost lifts every candidate of a good episode alike).
    """
    if config.relevance_floor is not None:
        return float(config.relevance_floor)
    if not has_dense:
        return _FLOOR_BY_WORDS
    return _FLOOR_WITH_DENSE_FOR_SEVERAL if several else _FLOOR_WITH_DENSE


def diversify(
    order: list[int],
    score: np.ndarray,
    seqs: Sequence[int],
    vectors: Mapping[int, np.ndarray],
    mmr_lambda: float,
) -> list[int]:
    """With ``mmr_lambda < 1``, re-rank the head of `order` by maximal marginal relevance.

    `order` holds positions into `score` and `seqs`; `vectors` are keyed by seq.
    Near-duplicates are dropped later, while filling, against what was actually picked.
    """
    if mmr_lambda >= 1.0 or not vectors or len(order) < 2:
        return order
    head = order[:_MMR_HEAD]
    dim = next(iter(vectors.values())).shape[0]
    matrix = np.stack([vectors.get(seqs[i], np.zeros(dim, np.float32)) for i in head])
    relevance = score[head]
    span = float(relevance.max() - relevance.min()) or 1.0
    relevance = (relevance - relevance.min()) / span
    max_sim = np.zeros(len(head), dtype=np.float64)
    alive = np.ones(len(head), dtype=bool)
    chosen: list[int] = []
    for _ in range(len(head)):
        mmr = mmr_lambda * relevance - (1 - mmr_lambda) * max_sim
        mmr[~alive] = -np.inf
        pick = int(np.argmax(mmr))
        alive[pick] = False
        chosen.append(head[pick])
        np.maximum(max_sim, matrix @ matrix[pick], out=max_sim)
    return chosen + order[len(head) :]


def named_speakers(speakers: Mapping[str, str], query: str) -> set[str]:
    """The speakers (``lowercased name -> name``) that `query` names, as whole words."""
    return {speakers[key] for key in _named_keys(speakers, query)}


def _named_keys(speakers: Mapping[str, str], query: str) -> list[str]:
    lowered = query.lower()
    return [
        key
        for key in speakers
        if (key in lowered if has_cjk(key) else re.search(rf"(?<!\w){re.escape(key)}(?!\w)", lowered))
    ]


def without_speakers(query: str, speakers: Mapping[str, str]) -> str:
    """`query` with the speakers it names (``lowercased name -> name``) put as "they"
    ("their" for "Caroline's"; 他们 in Chinese): what dense search embeds.

    Who said a message is matched by the speaker boost and by keywords; left in
    the query's vector, a name makes every line of that speaker, and every line
    that greets them, look alike, and drowns what the question is about.
    """
    for key in sorted(_named_keys(speakers, query), key=len, reverse=True):
        if has_cjk(key):  # matched in the lowered query, as `_named_keys` found it ("小A")
            query = re.sub(re.escape(key), "他们", query, flags=re.IGNORECASE)
            continue
        pattern = rf"(?<!\w){re.escape(key)}(?:(['’]s)(?!\w)|(?!\w))"
        query = re.sub(pattern, lambda m: "their" if m.group(1) else "they", query, flags=re.IGNORECASE)
    return query
