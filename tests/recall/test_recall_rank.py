"""Recall ranking over plain arrays: fusion, the relevance floor, boosts and MMR (no index needed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from convmem import RecallConfig
from convmem._recall.rank import (
    Evidence,
    blend,
    dense_similarities,
    diversify,
    named_speakers,
    normalized,
    rank,
    relevance_floor,
    without_speakers,
)

# Boosts off unless a test turns one on, so each test sees one effect.
PLAIN = RecallConfig(
    speaker_weight=0.0,
    episode_weight=0.0,
    neighbour_weight=0.0,
    recency_weight=0.0,
    granularity="message",
    relevance_floor=0.0,
    feedback_weight=0.0,
)


def evidence(
    dense: Sequence[float] | None,
    lexical: Sequence[float],
    *,
    named: Sequence[bool] | None = None,
    ages: Sequence[float] | None = None,
    episodes: Sequence[int] | None = None,
    positions: Sequence[int] | None = None,
    vectors: dict[int, np.ndarray] | None = None,
) -> Evidence:
    n = len(lexical)
    seqs = list(range(1, n + 1))
    dense_array = None if dense is None else np.array(dense, dtype=np.float32)
    lexical_array = np.array(lexical, dtype=np.float32)
    return Evidence(
        seqs=seqs,
        dense_message=dense_array,
        dense_exchange=dense_array,
        lexical_message=lexical_array,
        lexical_exchange=lexical_array,
        said_by_named=np.array(named or [False] * n, dtype=bool),
        ages=np.array(ages or [0.0] * n, dtype=np.float64),
        episodes=list(episodes or seqs),
        vectors=vectors or {},
        positions=positions,
    )


def order(evidence: Evidence, config: RecallConfig = PLAIN, **changes: Any) -> list[int]:
    return [r.seq for r in rank(evidence, config.replace(**changes)).ranked]


def test_the_candidate_best_by_meaning_and_words_ranks_first() -> None:
    assert order(evidence([0.2, 0.9, 0.5], [0.1, 1.0, 0.3])) == [2, 3, 1]


def test_dense_weight_decides_between_meaning_and_words() -> None:
    candidates = evidence([0.9, 0.3], [0.0, 1.0])
    assert order(candidates, dense_weight=0.9) == [1, 2]
    assert order(candidates, dense_weight=0.1) == [2, 1]


def test_candidates_below_min_score_without_a_strong_keyword_match_are_dropped() -> None:
    ranking = rank(evidence([0.8, 0.05, 0.05], [0.0, 0.2, 0.9]), PLAIN)
    assert [r.seq for r in ranking.ranked] == [1, 3]
    assert ranking.considered == 3
    assert "below min_score" in ranking.dropped[0].reason


def test_without_dense_search_any_keyword_match_is_eligible_and_no_similarity_is_reported() -> None:
    ranking = rank(evidence(None, [0.0, 0.4, 1.0]), PLAIN)
    assert [r.seq for r in ranking.ranked] == [3, 2]
    assert ranking.best_similarity is None
    assert all(r.similarity is None for r in ranking.ranked)


def test_best_similarity_is_the_highest_cosine_among_eligible_candidates() -> None:
    ranking = rank(evidence([0.3, 0.7, 0.05], [0.2, 0.1, 0.0]), PLAIN)
    assert ranking.best_similarity == pytest.approx(0.7)


def test_rrf_fusion_scores_by_rank_and_the_best_scores_one() -> None:
    ranking = rank(evidence([0.9, 0.5, 0.2], [1.0, 0.6, 0.1]), PLAIN.replace(fusion="rrf"))
    assert [r.seq for r in ranking.ranked] == [1, 2, 3]
    assert ranking.ranked[0].score == pytest.approx(1.0)


def test_a_speaker_the_query_names_lifts_their_messages() -> None:
    candidates = evidence([0.6, 0.6], [0.5, 0.5], named=[False, True])
    assert order(candidates) == [1, 2]
    assert order(candidates, speaker_weight=0.2) == [2, 1]


def test_recency_lifts_newer_messages_when_weighted() -> None:
    candidates = evidence([0.6, 0.6], [0.5, 0.5], ages=[0.0, 90 * 86400.0])
    assert order(candidates, recency_weight=0.5) == [1, 2]
    assert order(evidence([0.6, 0.6], [0.5, 0.5], ages=[90 * 86400.0, 0.0]), recency_weight=0.5) == [2, 1]


def test_a_message_in_the_best_episode_outranks_an_equal_one_elsewhere() -> None:
    candidates = evidence([0.9, 0.5, 0.5], [1.0, 0.4, 0.4], episodes=[7, 8, 7])
    assert order(candidates) == [1, 2, 3]
    assert order(candidates, episode_weight=0.3) == [1, 3, 2]


def test_a_message_next_to_the_best_one_outranks_an_equal_one_further_away() -> None:
    candidates = evidence(None, [1.0, 0.35, 0.1, 0.4], episodes=[1, 1, 1, 1])
    assert order(candidates) == [1, 4, 2, 3]
    assert order(candidates, neighbour_weight=0.3) == [1, 2, 4, 3]


def test_neighbours_are_next_to_each_other_in_the_log_and_in_one_episode() -> None:
    # seq 2 follows seq 1 in the log, but after a pause (another episode)
    across_a_pause = evidence(None, [1.0, 0.35, 0.4], episodes=[1, 2, 2])
    assert order(across_a_pause, neighbour_weight=0.3) == [1, 3, 2]
    # a message the log holds between seqs 1 and 2 (a tool result, say) keeps them apart
    apart = evidence(None, [1.0, 0.35, 0.4], episodes=[1, 1, 1], positions=[0, 2, 3])
    assert order(apart, neighbour_weight=0.3) == [1, 3, 2]


def test_mmr_pushes_a_near_duplicate_of_the_best_down() -> None:
    same, other = np.array([1.0, 0.0], np.float32), np.array([0.0, 1.0], np.float32)
    candidates = evidence([0.9, 0.85, 0.8], [0.5, 0.5, 0.5], vectors={1: same, 2: same, 3: other})
    assert order(candidates) == [1, 2, 3]
    assert order(candidates, mmr_lambda=0.5) == [1, 3, 2]


def test_mmr_leaves_the_order_alone_at_lambda_one_or_without_vectors() -> None:
    score = np.array([0.3, 0.9, 0.5])
    assert diversify([1, 2, 0], score, [10, 11, 12], {}, 0.5) == [1, 2, 0]
    assert diversify([1, 2, 0], score, [10, 11, 12], {10: np.ones(2, np.float32)}, 1.0) == [1, 2, 0]


def test_no_candidates_rank_to_nothing() -> None:
    ranking = rank(evidence([], []), PLAIN)
    assert ranking.ranked == ()
    assert ranking.best_similarity is None
    assert ranking.considered == 0


def test_a_message_without_its_own_vector_takes_its_exchanges_similarity() -> None:
    query = np.array([1.0, 0.0], np.float32)
    vectors = {1: np.array([0.5, 0.5], np.float32), 100: np.array([0.8, 0.2], np.float32)}
    dense_m, dense_x = dense_similarities([1, 2], {1: 100, 2: 100}, vectors, query, "both")
    assert dense_m.tolist() == pytest.approx([0.5, 0.8])
    assert dense_x.tolist() == pytest.approx([0.8, 0.8])


def test_with_exchange_granularity_a_message_scores_as_its_exchange() -> None:
    query = np.array([1.0, 0.0], np.float32)
    vectors = {1: np.array([0.5, 0.5], np.float32), 100: np.array([0.8, 0.2], np.float32)}
    dense_m, _ = dense_similarities([1], {1: 100}, vectors, query, "exchange")
    assert dense_m.tolist() == pytest.approx([0.8])


def test_lexical_scores_are_normalized_by_the_best_match() -> None:
    assert normalized([1, 2, 3], {1: 2.0, 2: 4.0, 9: 8.0}).tolist() == pytest.approx([0.25, 0.5, 0.0])
    assert normalized([1], {}).tolist() == [0.0]


def test_granularity_both_blends_message_and_exchange_scores() -> None:
    message, exchange = np.array([1.0], np.float32), np.array([0.0], np.float32)
    assert blend(message, exchange, "message", 0.5).tolist() == [1.0]
    assert blend(message, exchange, "exchange", 0.5).tolist() == [0.0]
    assert blend(message, exchange, "both", 0.25).tolist() == pytest.approx([0.75])


def test_speakers_are_named_by_whole_words_or_by_chinese_characters() -> None:
    speakers = {"ann": "Ann", "caroline": "Caroline", "小明": "小明"}
    assert named_speakers(speakers, "What did Caroline say to Annabel?") == {"Caroline"}
    assert named_speakers(speakers, "小明说了什么？") == {"小明"}


def test_the_relevance_floor_left_to_the_ranking_is_higher_with_dense_search() -> None:
    assert relevance_floor(RecallConfig(), has_dense=True) == 0.5
    assert relevance_floor(RecallConfig(), has_dense=False) == 0.25


def test_a_question_asking_for_several_things_gets_a_lower_floor_with_dense_search() -> None:
    assert relevance_floor(RecallConfig(), has_dense=True, several=True) == 0.4
    assert relevance_floor(RecallConfig(), has_dense=False, several=True) == 0.25
    assert relevance_floor(RecallConfig(relevance_floor=0.6), has_dense=True, several=True) == 0.6
    # seq 2 scores 0.45 of the best (dense scores are scaled to the range of the
    # candidates'): kept for "What books has Tim read?", cut for "What is my dog's name?"
    candidates = evidence([0.9, 0.46, 0.1], [0.0, 0.0, 0.0])
    config = PLAIN.replace(relevance_floor=None, dense_weight=1.0, neighbour_min_score=None)
    assert [r.seq for r in rank(candidates, config, several=True).ranked] == [1, 2]
    assert [r.seq for r in rank(candidates, config).ranked] == [1]


def test_a_turn_next_to_a_clear_match_passes_though_it_looks_unlike_the_query() -> None:
    # seq 2 answers seq 1 ("What's the name of it?" / "It's by Patrick Rothfuss"): below
    # min_score on its own, but right next to a clear match in the same episode.
    candidates = evidence([0.6, 0.05, 0.3, 0.05], [0.0, 0.0, 0.0, 0.0], episodes=[1, 1, 1, 2])
    assert order(candidates) == [1, 3, 2]
    # Not without an anchor that clearly matches: seq 4 is alone in its episode, and a
    # weak match (0.15, under neighbour_min_score) lends nothing to the turn beside it.
    assert order(candidates, neighbour_min_score=None) == [1, 3]
    weak = evidence([0.15, 0.05], [0.0, 0.0], episodes=[1, 1])
    assert order(weak) == [1]
    # Nor across an episode break, nor from an anchor below the relevance floor.
    split = evidence([0.6, 0.05], [0.0, 0.0], episodes=[1, 2])
    assert order(split) == [1]
    under_floor = evidence([0.9, 0.35, 0.05], [0.0, 0.0, 0.0], episodes=[1, 2, 2])
    assert order(under_floor, relevance_floor=0.5) == [1]


def test_a_configured_relevance_floor_holds_whatever_the_ranking() -> None:
    config = RecallConfig(relevance_floor=0.0)
    assert relevance_floor(config, has_dense=True) == relevance_floor(config, has_dense=False) == 0.0


def test_candidates_below_the_relevance_floor_are_dropped_with_a_reason() -> None:
    ranking = rank(evidence(None, [1.0, 0.6, 0.2]), PLAIN.replace(relevance_floor=0.5))
    assert [r.seq for r in ranking.ranked] == [1, 2]
    assert any("relevance floor" in d.reason for d in ranking.dropped)


def test_an_episode_boost_every_candidate_shares_does_not_lift_them_over_the_floor() -> None:
    one_episode = evidence(None, [1.0, 0.6, 0.2], episodes=[1, 1, 1])
    assert order(one_episode, episode_weight=0.3, relevance_floor=0.5) == [1, 2]
    two_episodes = evidence(None, [1.0, 0.3, 0.2], episodes=[1, 1, 2])
    # the weak one in the best episode passes on its episode; the one alone does not
    assert order(two_episodes, episode_weight=1.0, relevance_floor=0.5) == [1, 2]


def test_the_best_candidates_are_the_ones_a_full_sort_keeps_ties_going_to_smaller_ids() -> None:
    from random import Random

    from convmem._recall.lexical import LexicalScores

    random = Random(3)
    for size, k in ((0, 5), (3, 5), (5, 5), (50, 10), (5000, 200), (5000, 1), (40, 0)):
        # Few distinct values: many ties, at the boundary too.
        scores = {random.randrange(10**6): float(random.randrange(7)) for _ in range(size)}
        expected = [doc for doc, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:k]]
        assert sorted(LexicalScores.of(scores).top(k)) == sorted(expected)


def test_a_dense_query_names_the_speakers_it_asks_about_as_they() -> None:
    speakers = {"caroline": "Caroline", "ann": "Ann", "小明": "小明", "小a": "小A"}
    assert without_speakers("What did Caroline research?", speakers) == "What did they research?"
    assert without_speakers("What are CAROLINE's hobbies?", speakers) == "What are their hobbies?"
    assert without_speakers("Did Ann and Caroline meet?", speakers) == "Did they and they meet?"
    # Whole words only, and names it does not know stay.
    assert without_speakers("Annual plans of Bob?", speakers) == "Annual plans of Bob?"
    assert without_speakers("小明的狗叫什么？", speakers) == "他们的狗叫什么？"
    assert without_speakers("小A住在哪里？", speakers) == "他们住在哪里？"
    assert without_speakers("What did Caroline research?", {}) == "What did Caroline research?"


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


def test_feedback_lifts_a_candidate_like_the_best_ones_over_an_equal_one_unlike_them() -> None:
    # Ten candidates about one subject (the first axis) score best; the other forty
    # score less and talk of other things, and two of them tie on the query: only
    # the first of the two talks like the best ten.
    vectors = {s: unit(1.0, 0.1 * (s % 3), 0.0, 0.0) for s in range(1, 11)}
    vectors.update({s: unit(0.0, 1.0, 0.1 * (s % 5), 0.0) for s in range(11, 49)})
    like, unlike = unit(1.0, 0.0, 0.0, 0.3), unit(0.0, 0.0, 0.3, 1.0)
    dense = [0.9] * 10 + [0.2] * 38 + [0.4, 0.4]

    def last_two(first: np.ndarray, second: np.ndarray, **changes: Any) -> list[int]:
        candidates = evidence(dense, [0.0] * 50, vectors={**vectors, 49: first, 50: second})
        return order(candidates, **changes)[10:12]

    assert last_two(like, unlike) == last_two(unlike, like) == [49, 50]  # a tie keeps log order
    assert last_two(like, unlike, feedback_weight=0.2) == [49, 50]
    assert last_two(unlike, like, feedback_weight=0.2) == [50, 49]


def test_feedback_needs_vectors_and_a_pool_where_the_best_ten_are_a_few() -> None:
    # With eleven candidates the best ten are nearly the whole session: no feedback,
    # though most of them talk like 11 and not like 10.
    a, b = unit(1.0, 0.0), unit(0.0, 1.0)
    vectors = {1: a, **{s: b for s in range(2, 10)}, 10: a, 11: b}
    small = evidence([0.9] + [0.6] * 8 + [0.3, 0.3], [0.0] * 11, vectors=vectors)
    assert order(small)[-2:] == order(small, feedback_weight=0.9)[-2:] == [10, 11]
    without_vectors = evidence([0.9 - 0.01 * i for i in range(60)], [0.0] * 60)
    assert order(without_vectors, feedback_weight=0.9) == order(without_vectors)
