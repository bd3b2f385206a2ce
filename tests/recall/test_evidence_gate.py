"""The evidence gate: when a request that stands on its own may take memory at all."""

from __future__ import annotations

import dataclasses

import numpy as np

from convmem import RecallConfig
from convmem._recall.gate import judge
from convmem._recall.rank import Evidence, Ranked, Ranking

CONFIG = RecallConfig()


def candidates(
    coverage: list[float], similarity: list[float], typical: float = 0.05
) -> tuple[Ranking, Evidence]:
    """Candidates 1..n ranked in that order, each with its keyword coverage and cosine
    similarity to the query; the query's similarity to the history's typical message is
    `typical` for all of them."""
    seqs = list(range(1, len(coverage) + 1))
    zeros = np.zeros(len(seqs), dtype=np.float32)
    evidence = Evidence(
        seqs=seqs,
        dense_message=np.array(similarity, dtype=np.float32),
        dense_exchange=np.array(similarity, dtype=np.float32),
        lexical_message=zeros,
        lexical_exchange=zeros,
        said_by_named=np.zeros(len(seqs), dtype=bool),
        ages=zeros,
        episodes=seqs,
        vectors={},
        coverage=np.array(coverage, dtype=np.float32),
        typical=np.full(len(seqs), typical, dtype=np.float32),
    )
    ranked = tuple(
        Ranked(seq, 1.0 - i / 10, sim) for i, (seq, sim) in enumerate(zip(seqs, similarity, strict=True))
    )
    return Ranking(ranked, max(similarity), len(seqs), ()), evidence


# "What is 17 times 23?" against a history of math homework and dated lists: one passage
# holds "17", "23" and "times" by chance, another is a request of the same kind.
WORDS_HERE_MEANING_THERE = ([0.84, 0.30], [0.25, 0.55])


def test_a_standalone_request_is_not_recalled_for_words_in_one_message_and_meaning_in_another() -> None:
    ranking, evidence = candidates(*WORDS_HERE_MEANING_THERE)

    verdict = judge(ranking, evidence, CONFIG, personal=False)

    assert not verdict.passed
    assert "by its words and by its meaning" in verdict.reason
    assert "no message is both" in verdict.reason
    assert verdict.dropped and verdict.dropped[0].section == "recall"


def test_a_standalone_request_is_recalled_when_one_message_holds_its_words_and_its_meaning() -> None:
    ranking, evidence = candidates([0.84, 0.30, 0.90], [0.25, 0.55, 0.60])

    verdict = judge(ranking, evidence, CONFIG, personal=False)

    assert verdict.passed
    assert "holds 90% of the query's informative words" in verdict.reason
    assert "0.55 more similar" in verdict.reason


def test_a_standalone_request_is_recalled_by_a_message_that_holds_every_one_of_its_words() -> None:
    # "corgi Duoduo" against the message it searches for, under an encoder that misses it
    ranking, evidence = candidates([0.84, 1.0], [0.25, 0.20])

    verdict = judge(ranking, evidence, CONFIG, personal=False)

    assert verdict.passed
    assert "every informative word" in verdict.reason


def test_a_question_about_the_user_is_recalled_on_either_scale() -> None:
    by_words, by_meaning = candidates([0.84], [0.10]), candidates([0.05], [0.55])

    assert judge(*by_words, CONFIG, personal=True).passed
    assert judge(*by_meaning, CONFIG, personal=True).passed
    assert judge(*candidates(*WORDS_HERE_MEANING_THERE), CONFIG, personal=True).passed


def test_a_query_about_the_user_only_by_its_first_person_needs_more_of_its_words() -> None:
    # "I have a job interview tomorrow, any tips?" against a message sharing "tomorrow":
    # what the user says of themselves in passing is weaker evidence than a question about them.
    ranking, evidence = candidates([0.2], [0.10])
    assert judge(ranking, evidence, CONFIG, personal=True).passed
    verdict = judge(ranking, evidence, CONFIG, personal=True, first_person_only=True)
    assert not verdict.passed
    assert "(needs 30%)" in verdict.reason
    # meaning still counts, and so does a message holding most of its words
    assert judge(*candidates([0.2], [0.55]), CONFIG, personal=True, first_person_only=True).passed
    assert judge(*candidates([0.35], [0.10]), CONFIG, personal=True, first_person_only=True).passed
    # a configured bar above it wins
    strict = RecallConfig(min_coverage=0.4)
    assert not judge(*candidates([0.35], [0.10]), strict, personal=True, first_person_only=True).passed


def one_episode_of_the_user() -> tuple[Ranking, Evidence]:
    """One episode: a user message that is evidence (place 10) and its answer (11), an
    assistant message that shares a word (30), and another thing the user said (50)."""
    ranking, evidence = candidates([0.35, 0.05, 0.2, 0.1], [0.10, 0.10, 0.10, 0.10])
    return ranking, dataclasses.replace(
        evidence,
        episodes=[0, 0, 0, 0],
        positions=[10, 11, 30, 50],
        from_user=np.array([True, False, False, True]),
    )


def test_a_query_about_the_user_only_by_its_first_person_recalls_their_words_and_evidence() -> None:
    ranking, evidence = one_episode_of_the_user()

    verdict = judge(ranking, evidence, CONFIG, personal=True, first_person_only=True)

    assert verdict.passed
    assert verdict.evidence == frozenset({1, 2, 4})
    assert "only the user's own messages" in verdict.reason
    # a question about the user may recall every candidate
    assert judge(ranking, evidence, CONFIG, personal=True).evidence is None


def test_a_request_in_passing_whose_subject_the_history_never_mentions_recalls_only_evidence() -> None:
    # "I'm thinking about learning the ukulele, is it hard?": a message of the user holding
    # "learning" and "hard" (place 10) is evidence by its words, but "ukulele" carries 37%
    # of the request and the history never says it: the user's other match (50) is chance.
    ranking, evidence = one_episode_of_the_user()

    verdict = judge(
        ranking,
        evidence,
        CONFIG,
        personal=True,
        first_person_only=True,
        unheard=0.37,
        unheard_words=["ukulele"],
    )

    assert verdict.passed
    assert verdict.evidence == frozenset({1, 2})  # the evidence and its answer
    assert "never mentions 'ukulele'" in verdict.reason
    # a word the history never used that carries less than `min_coverage` is not its subject
    below = judge(ranking, evidence, CONFIG, personal=True, first_person_only=True, unheard=0.1)
    assert below.evidence == frozenset({1, 2, 4})
    # nor does it narrow a question about the user
    assert judge(ranking, evidence, CONFIG, personal=True, unheard=0.37).evidence is None


def test_without_vectors_a_standalone_request_is_judged_by_its_words_alone() -> None:
    ranking, evidence = candidates([0.84, 0.30], [0.0, 0.0])
    ranking = Ranking(tuple(r._replace(similarity=None) for r in ranking.ranked), None, 2, ())
    words_only = dataclasses.replace(evidence, dense_message=None, dense_exchange=None, typical=None)

    assert judge(ranking, words_only, CONFIG, personal=False).passed
    low = dataclasses.replace(words_only, coverage=np.array([0.5, 0.3], dtype=np.float32))
    verdict = judge(ranking, low, CONFIG, personal=False)
    assert not verdict.passed
    assert "evidence by its words:" in verdict.reason


def test_a_standalone_sentence_with_one_informative_word_passes_by_meaning_only() -> None:
    # "Hi! How are you today?": one message holds "today", its only informative word
    ranking, evidence = candidates([1.0, 0.2], [0.25, 0.20])
    words_only = dataclasses.replace(evidence, dense_message=None, dense_exchange=None, typical=None)
    no_vectors = Ranking(tuple(r._replace(similarity=None) for r in ranking.ranked), None, 2, ())

    verdict = judge(no_vectors, words_only, CONFIG, personal=False, words=1)
    assert not verdict.passed
    assert "one informative word" in verdict.reason
    assert not judge(ranking, evidence, CONFIG, personal=False, words=1).passed  # no "every word" pass
    close = candidates([1.0, 0.2], [0.60, 0.20])
    assert judge(*close, CONFIG, personal=False, words=1).passed
    # a question about the user, or keywords searched for (words=None), are judged as before
    assert judge(no_vectors, words_only, CONFIG, personal=True, words=1).passed
    assert judge(no_vectors, words_only, CONFIG, personal=False).passed
