"""The query rules that read a whole query take one pass over it.

A search for "[^.!?]*[?]", "translate[^:]*:" or "did .*? the" starts again from
every character (or every "did") of a long run that has no end for it: a
20,000-character query without a question mark took seconds. Each rule is now
one pass; these properties hold it to what the search it replaced found, kept
here as the specification.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from convmem import ConversationMemory, InMemoryStore
from convmem._recall.intent import _finished_event, past_cue
from convmem._recall.reading import _cut_at_material, _question_sentences, personal_reading

QUESTION_SENTENCE = re.compile(r"[^.!?。！？]*[?？]")
MATERIAL = re.compile(
    r"(?i:\b(?:translate|proofread|correct|rewrite|rephrase|paraphrase|summari[sz]e|fix)\b[^:：]*)[:：].*"
    r"|(?:翻译|润色|改写|修改|纠正|校对|总结|改一下)[^:：]*[:：].*",
    re.DOTALL,
)
FINISHED_EVENT = re.compile(
    r"(?i:\b(?:did|was|were|had|happened)\b).*?\b(?i:the)\s+(?P<thing>(?:[A-Z0-9+]{2,}\s+)?[a-z][a-z-]*"
    r"(?:\s+[a-z][a-z-]*)?)"
)

PIECES = [
    "I", "my", "a", "the", "The", "THE", "thee", "did", "was", "happened", "AB", "x-y", "fix", "Fix",
    "fixed", "translate", "翻译", "总结", "我", "的", "?", "？", ".", "!", "。", "！", ":", "：", ",",
    "，", " ", " ", "\n", "\r", "\t", "9",
]  # fmt: skip
texts = st.lists(st.sampled_from(PIECES), max_size=24).map("".join)
spaced = st.lists(st.sampled_from(PIECES), max_size=16).map(" ".join)


@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, spaced))
def test_question_sentences_are_what_the_search_found(text: str) -> None:
    assert _question_sentences(text) == QUESTION_SENTENCE.findall(text)


@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, spaced))
def test_material_is_cut_where_the_search_cut_it(text: str) -> None:
    assert _cut_at_material(text) == MATERIAL.sub(" ", text)


@settings(max_examples=600, deadline=None)
@given(st.one_of(texts, spaced))
def test_a_finished_event_is_the_thing_the_search_found(text: str) -> None:
    found = FINISHED_EVENT.search(text)
    assert _finished_event(text) == (found.group("thing") if found else None)


def test_the_rules_still_read_ordinary_queries() -> None:
    assert _question_sentences("I got a puppy. How often should it eat? Thanks!") == [
        " How often should it eat?"
    ]
    assert _cut_at_material("Translate this: I love you") == " "
    assert _cut_at_material("Translate 'hello' into French.") == "Translate 'hello' into French."
    cue = past_cue("What did the charity race raise?")
    assert cue is not None and cue.words == "the charity race"
    assert personal_reading("My sister turns 30, what's a fun party theme?") == (True, True)


LONG_QUERIES = {
    "first person, no question mark": "I word " * 2800,
    "my, no question mark": "my word " * 2500,
    "a Chinese first person, no question mark": "我 " * 10000,
    "past verbs, no 'the'": "did " * 5000,
    "request verbs, no colon": "fix " * 5000,
    "a past-pointing phrase": "last time I said " * 1200,
}


def test_long_queries_of_the_shapes_that_took_seconds_get_a_valid_context() -> None:
    # `benchmarks/bench_hostile_text.py` times them (the searches above: seconds each).
    memory = ConversationMemory("s", InMemoryStore(), user_id="u")
    memory.add_turn("I said I like hiking and my dog is Rex.", "Noted.")
    for name, text in LONG_QUERIES.items():
        context = memory.build_context(query=text, budget=60_000)
        assert context.messages[-1] == {"role": "user", "content": text}, name
        assert context.token_count <= 60_000, name
