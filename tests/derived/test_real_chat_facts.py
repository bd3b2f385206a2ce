"""The rule extractor on real chats: what it emits is true of the speaker, judged against hand labels.

The chats (LongMemEval's 48 dev histories and LoCoMo) are read from
``../shared/data`` when it is there; the labels (`real_chat_fact_labels.jsonl`)
hold no text of them. `benchmarks/bench_fact_precision.py` prints the same
figures and lists what is not labelled yet.
"""

from __future__ import annotations

import json
import re

import pytest
from real_chat_facts import (
    LABELS,
    SOURCES,
    VERDICTS,
    Found,
    data_dir,
    find_facts,
    load_labels,
    names_nothing,
    score,
)

from convmem import Fact, RuleFactExtractor

PRECISION_FLOOR = 0.9
LABELLED_SHARE_FLOOR = 0.9
"""Precision is measured on labelled facts; nearly all that is emitted must be labelled."""


@pytest.fixture(scope="module")
def found() -> list[Found]:
    folder = data_dir()
    if folder is None:
        pytest.skip("the evaluation data (../shared/data) is not here; it is not part of the repository")
    return find_facts(folder, RuleFactExtractor().extract)


def test_the_labels_are_many_and_hold_no_text_of_the_chats() -> None:
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) >= 200
    allowed = {"source", "sample", "session", "turn", "key", "value_sha256", "negated", "verdict"}
    for row in rows:
        assert set(row) <= allowed, row
        assert row["source"] in SOURCES and row["verdict"] in VERDICTS
        assert re.fullmatch(r"[a-z_]+(?::#[0-9a-f]{16})?", row["key"]), row
        assert re.fullmatch(r"[0-9a-f]{16}", row["value_sha256"]), row
        assert re.fullmatch(r"[\w-]{1,40}", row["sample"]), row


@pytest.mark.slow
@pytest.mark.parametrize("source", [*SOURCES, None])
def test_most_facts_emitted_from_real_chats_are_true_of_their_speaker(
    found: list[Found], source: str | None
) -> None:
    figures = score(found, load_labels(), source)
    labelled = figures.good + figures.bad
    assert labelled / (labelled + figures.unlabelled) >= LABELLED_SHARE_FLOOR
    assert figures.precision >= PRECISION_FLOOR


@pytest.mark.slow
def test_no_fact_from_real_chats_names_only_a_little_word(found: list[Found]) -> None:
    assert [f"{item.fact.key} = {item.fact.value}" for item in found if names_nothing(item.fact)] == []


@pytest.mark.parametrize(
    ("key", "names"),
    [
        ("preference:it's", True),
        ("preference:and", True),
        ("preference:podcasts with a", True),
        ("preference:hiking", False),
        ("city", False),
    ],
)
def test_a_thing_of_little_words_names_nothing(key: str, names: bool) -> None:
    assert names_nothing(Fact(key, "likes")) is names
