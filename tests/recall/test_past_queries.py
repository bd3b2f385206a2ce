"""Which queries point to the past, scored on a labelled table rather than guessed from one word.

The table (`past_queries.py`) holds ordinary requests, general questions,
follow-ups, and questions about earlier conversation, about the user's own life
and about people the user spoke of, half English and half Chinese; 30% of it was
held out while the detector was tuned. `benchmarks/bench_intent.py` prints the
same figures with every miss.
"""

from __future__ import annotations

import pytest
from past_queries import CHINESE, ENGLISH, HELD_OUT, QUERIES, TUNING, score

from convmem._recall.intent import choose_recall_share, past_cue, points_to_past

PRECISION_FLOOR = 0.9
RECALL_FLOOR = 0.9


def test_the_table_is_large_half_chinese_and_has_a_held_out_part() -> None:
    assert len(QUERIES) >= 150
    assert len(CHINESE) == len(ENGLISH)
    assert 0.2 <= len(HELD_OUT) / len(QUERIES) <= 0.4
    assert len({query.text for query in QUERIES}) == len(QUERIES)
    assert 0.3 <= sum(query.past for query in QUERIES) / len(QUERIES) <= 0.7


@pytest.mark.parametrize("half", ["tuning", "held out"])
def test_precision_and_recall_reach_their_floors_on_both_halves(half: str) -> None:
    figures = score(points_to_past, TUNING if half == "tuning" else HELD_OUT)
    misses = [query.text for query in figures.false_positives + figures.false_negatives]
    assert figures.precision >= PRECISION_FLOOR, misses
    assert figures.recall >= RECALL_FLOOR, misses


@pytest.mark.parametrize("language", ["en", "zh"])
def test_precision_and_recall_reach_their_floors_in_each_language(language: str) -> None:
    figures = score(points_to_past, QUERIES, language)
    misses = [query.text for query in figures.false_positives + figures.false_negatives]
    assert figures.precision >= PRECISION_FLOOR, misses
    assert figures.recall >= RECALL_FLOOR, misses


@pytest.mark.parametrize(
    "query",
    [
        "Translate 'good morning' into French.",
        "Summarize the plot of Pride and Prejudice.",
        "What is the capital of Australia?",
        "When did the Berlin Wall fall?",
        "把“早上好”翻译成法语。",
        "澳大利亚的首都是哪里？",
    ],
)
def test_a_request_or_a_general_question_that_names_something_does_not_point_to_the_past(query: str) -> None:
    assert past_cue(query) is None
    assert choose_recall_share(query, base_share=0.25)[0] == 0.25


@pytest.mark.parametrize(
    "query",
    ["How many bikes do I own?", "What's my dog's name?", "Which city do I live in?", "我住在哪个城市？"],
)
def test_a_question_about_the_users_own_life_points_to_the_past(query: str) -> None:
    cue = past_cue(query)
    assert cue is not None and cue.reason == "asks about the user"


@pytest.mark.parametrize(
    "query", ["How do I reset my router?", "What should I cook for dinner tonight?", "我应该先学Rust还是Go？"]
)
def test_a_first_person_question_that_asks_for_advice_does_not_point_to_the_past(query: str) -> None:
    assert not points_to_past(query)


@pytest.mark.parametrize(
    ("query", "reason", "words"),
    [
        ("When did Caroline go to the support group?", "asks about a person", "Caroline"),
        ("What was grandma's gift to Caroline?", "asks about a person", "Caroline"),
        ("What did the book club pick in the end?", "asks about a finished event", "the book club"),
        (
            "What was the name of the restaurant you recommended?",
            "refers to earlier conversation",
            "you recommended",
        ),
        ("What happened in May 2023?", "names a time gone by", "May 2023"),
        ("她上个夏天画了什么？", "names a time gone by", "上个"),
    ],
)
def test_explain_says_which_words_point_to_the_past(query: str, reason: str, words: str) -> None:
    share, explanation = choose_recall_share(query, base_share=0.25)
    assert share > 0.25
    assert reason in explanation and words in explanation
