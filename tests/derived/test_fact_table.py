"""The rule extractor against the statement table: precision, recall, silence where nothing is said.

The table (`fact_statements.py`) was written before the rules were tuned on
it; `benchmarks/bench_facts.py` prints the same figures with every miss.
"""

from __future__ import annotations

import dataclasses
import unicodedata

import pytest
from fact_statements import HELD_OUT, STATEMENTS, Statement, outcomes, score

from convmem import Message, RuleFactExtractor
from convmem._derived.fact_rules import EN_NEGATIONS, EN_RULES, ZH_NEGATIONS, ZH_RULES, _with_chinese_subjects
from convmem._derived.rule_extractor import _sentences_to_scan

PRECISION_TARGET = 0.95
RECALL_TARGET = 0.85


@pytest.fixture(scope="module")
def results() -> list:  # type: ignore[type-arg]
    return outcomes(RuleFactExtractor().extract)


def test_the_table_is_large_mostly_chinese_and_full_of_silence() -> None:
    assert len(STATEMENTS) >= 150
    assert sum(statement.language == "zh" for statement in STATEMENTS) >= len(STATEMENTS) / 2
    assert sum(not statement.facts for statement in STATEMENTS) >= 40
    assert len({statement.text for statement in STATEMENTS + HELD_OUT}) == len(STATEMENTS + HELD_OUT)


@pytest.mark.parametrize("language", [None, "en", "zh"])
def test_precision_and_recall_meet_their_targets(results: list, language: str | None) -> None:  # type: ignore[type-arg]
    figures = score(results, language)
    misses = [
        (r.statement.text, sorted(r.wrong), sorted(r.missed))
        for r in results
        if (r.wrong or r.missed) and language in (None, r.statement.language)
    ]
    assert figures.precision >= PRECISION_TARGET, misses
    assert figures.recall >= RECALL_TARGET, misses


@pytest.mark.parametrize(
    "statement", [s for s in STATEMENTS + HELD_OUT if not s.facts], ids=lambda statement: statement.text
)
def test_a_statement_that_says_nothing_about_the_user_yields_nothing(statement: Statement) -> None:
    message = dataclasses.replace(Message.create("user", statement.text), seq=1)
    assert RuleFactExtractor().extract([message]) == []


def test_every_value_is_short_single_line_and_free_of_control_characters() -> None:
    for result in outcomes(RuleFactExtractor().extract, STATEMENTS + HELD_OUT):
        for key, value, _ in result.got:
            assert 0 < len(value) <= 40, (key, value)
            assert not any(unicodedata.category(char).startswith("C") for char in value), (key, value)


@pytest.mark.parametrize("rules", [EN_RULES, EN_NEGATIONS, ZH_RULES, ZH_NEGATIONS])
def test_every_cue_is_a_word_of_its_pattern(rules: list) -> None:  # type: ignore[type-arg]
    for pattern, _, cues in rules:
        assert cues, pattern.pattern
        for cue in cues:
            assert cue == cue.lower() and cue in pattern.pattern.lower(), (cue, pattern.pattern)


def test_cues_never_hide_a_match_in_the_table() -> None:
    """A rule skipped for want of a cue must not have matched: cues save time, never facts."""
    sentences = [
        _with_chinese_subjects(sentence)
        for statement in STATEMENTS + HELD_OUT
        for sentence in _sentences_to_scan(statement.text)
    ]
    for pattern, _, cues in EN_RULES + EN_NEGATIONS + ZH_RULES + ZH_NEGATIONS:
        for sentence in sentences:
            if pattern.search(sentence):
                assert any(cue in sentence.lower() for cue in cues), (pattern.pattern, sentence)
