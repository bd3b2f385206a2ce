"""A long message's terms are read off its passages' terms (`joined_terms`): the same
list as tokenizing the whole line, or None when a cut may split a term."""

from __future__ import annotations

import pytest

from convmem._recall.index_rows import joined_terms
from convmem._recall.passages import passage_spans
from convmem._recall.terms import tokenize

_LONG_TEXTS = [
    " ".join(f"Caroline's dogs were running to the park on day {i}." for i in range(120)),
    "\n\n".join(f"Step {i}: bake the cookies at 180 degrees, then let them cool." for i in range(80)),
    " ".join(f"Η ΟΔΟΣ ΣΟΦΙΑΣ {i} είναι εδώ ΜΑΣ." for i in range(150)),
    ("word" * 30 + " ") * 40,
]
_PREFIXES = ["", "Caroline: ", "ΟΔΟΣ: ", "多多: "]


@pytest.mark.parametrize("text", _LONG_TEXTS)
@pytest.mark.parametrize("prefix", _PREFIXES)
def test_passages_cut_at_whitespace_join_to_the_whole_line(text: str, prefix: str) -> None:
    spans = passage_spans(text)
    assert len(spans) > 1
    parts = [tokenize(prefix + text[start:end]) for start, end in spans]
    assert joined_terms(prefix, text, spans, parts) == tokenize(prefix + text)


@pytest.mark.parametrize("prefix", _PREFIXES)
def test_passages_cut_after_chinese_punctuation_give_way(prefix: str) -> None:
    text = "我的狗叫多多。" * 400
    spans = passage_spans(text)
    parts = [tokenize(prefix + text[start:end]) for start, end in spans]
    assert joined_terms(prefix, text, spans, parts) is None


def test_a_cut_inside_a_word_gives_way() -> None:
    text = "a" * 5000
    spans = [(0, 2500), (2500, 5000)]
    parts = [tokenize(text[start:end]) for start, end in spans]
    assert joined_terms("", text, spans, parts) is None


def test_a_final_sigma_at_a_cut_stays_final() -> None:
    # Lowercasing "Σ" depends on what follows it: with whitespace at the cut it is the same.
    text = "ΟΔΟΣ " * 600
    spans = [(0, 1500), (1500, len(text))]
    parts = [tokenize(text[start:end]) for start, end in spans]
    assert joined_terms("", text, spans, parts) == tokenize(text)
