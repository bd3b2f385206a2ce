"""Tokenization and the incremental BM25 index behind keyword recall."""

from __future__ import annotations

import string
from random import Random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem._recall.lexical import BM25Index, LexicalScores, tokenize
from convmem._recall.terms import _terms_of_pieces


def test_latin_words_are_lowercased_and_stopwords_dropped() -> None:
    assert tokenize("The Dog and THE Cat") == ["dog", "cat"]


def test_common_inflections_meet_on_one_stem() -> None:
    assert tokenize("running")[0] == tokenize("run")[0]
    assert tokenize("painted")[0] == tokenize("painting")[0]
    assert tokenize("parties")[0] == tokenize("party")[0]
    assert tokenize("dogs")[0] == tokenize("dog")[0]


def test_ly_comes_off_adverbs_only() -> None:
    assert tokenize("weekly") == tokenize("week")
    assert tokenize("carefully") == tokenize("careful")
    assert tokenize("finally") == tokenize("final")
    # Part of the word, not an adverb's ending: its forms meet, and no other word is made.
    assert tokenize("family") == tokenize("families")
    assert tokenize("apply") == tokenize("applies") == tokenize("applied")
    assert tokenize("apply") != tokenize("app")
    assert tokenize("Emily") == ["emily"]


def test_a_suffix_never_turns_a_word_into_another_common_word() -> None:
    for word, other in (("evening", "even"), ("news", "new"), ("early", "ear")):
        assert tokenize(word) != tokenize(other), word
    assert tokenize("evenings") == tokenize("evening")


def test_possessives_are_stripped() -> None:
    assert tokenize("Caroline's") == tokenize("Caroline")
    assert len(tokenize("Caroline's")) == 1


def test_words_that_only_look_plural_keep_their_s() -> None:
    assert tokenize("class status") == ["class", "status"]


def test_cjk_text_becomes_characters_and_character_pairs() -> None:
    tokens = tokenize("名字叫多多")
    assert {"名", "字", "叫", "多"} <= set(tokens)
    assert {"名字", "字叫", "叫多", "多多"} <= set(tokens)


def test_common_chinese_particles_are_not_unigram_terms() -> None:
    assert "的" not in tokenize("我的狗")
    assert "我的" in tokenize("我的狗")


def test_mixed_latin_and_cjk_text_is_split_at_the_script_boundary() -> None:
    tokens = tokenize("iPhone手机")
    assert tokenize("iPhone")[0] in tokens
    assert "手机" in tokens


def test_digits_are_kept_as_terms() -> None:
    assert "2023" in tokenize("back in 2023")


def test_bm25_ranks_the_document_sharing_the_rare_term_first() -> None:
    index = BM25Index()
    index.add(1, tokenize("I went hiking in the mountains last weekend"))
    index.add(2, tokenize("My corgi is called Duoduo"))
    index.add(3, tokenize("I went to the store last weekend"))
    best_id, _ = index.search(tokenize("what is the corgi called?"), top_k=3)[0]
    assert best_id == 2


def test_bm25_scores_only_documents_that_share_a_term() -> None:
    index = BM25Index()
    index.add(1, tokenize("apples and pears"))
    index.add(2, tokenize("trains and buses"))
    assert set(index.scores(tokenize("apple"))) == {1}


def test_removing_a_document_removes_it_from_results() -> None:
    index = BM25Index()
    index.add(1, tokenize("my dog Duoduo"))
    index.add(2, tokenize("my cat Mimi"))
    index.remove(1)
    assert 1 not in index
    assert index.scores(tokenize("Duoduo")) == {}
    assert len(index) == 1


def test_adding_an_existing_id_replaces_the_document() -> None:
    index = BM25Index()
    index.add(1, tokenize("my dog Duoduo"))
    index.add(1, tokenize("my cat Mimi"))
    assert index.scores(tokenize("Duoduo")) == {}
    assert 1 in index.scores(tokenize("Mimi"))


def test_an_empty_index_scores_nothing() -> None:
    assert BM25Index().search(tokenize("anything"), top_k=5) == []


def test_clear_empties_the_index() -> None:
    index = BM25Index()
    index.add(1, tokenize("hello world"))
    index.clear()
    assert len(index) == 0
    assert index.scores(tokenize("world")) == {}


def _loop_scores(index: BM25Index, query: list[str]) -> dict[int, float]:
    """BM25 as the textbook loop, the reference for the numpy path."""
    average = sum(index._lengths.values()) / len(index._lengths)
    out: dict[int, float] = {}
    for term in set(query):
        docs = index._postings.get(term, {})
        for doc_id, frequency in docs.items():
            norm = index.k1 * (1.0 - index.b + index.b * index._lengths[doc_id] / average)
            part = index.idf(term) * frequency * (index.k1 + 1.0) / (frequency + norm)
            out[doc_id] = out.get(doc_id, 0.0) + part
    return out


def test_scores_over_many_postings_are_the_loop_s_to_the_last_bit() -> None:
    random = Random(7)
    words = ["tea", "dog", "paris", "ramen", "garden", "rare", "sister", "novel"]
    index = BM25Index()
    for doc_id in range(1, 3001):
        index.add(doc_id, [random.choice(words) for _ in range(random.randint(1, 12))])
    for query in (["tea"], ["tea", "dog", "rare"], words, ["rare", "unknown"]):
        assert index.scores(query) == _loop_scores(index, query)
    # Edits after a query: the kept arrays of the terms they touch must not serve again.
    index.add(5000, ["garden"] * 40)  # a new document
    assert index.scores(words) == _loop_scores(index, words)
    for doc_id in range(1, 1500, 3):
        index.remove(doc_id)
    assert index.scores(words) == _loop_scores(index, words)
    for doc_id in range(2, 1500, 3):
        index.add(doc_id, ["rare", "rare", "tea"])  # replaced documents
    for query in (["tea"], ["tea", "dog", "rare"], words, ["garden"]):
        assert index.scores(query) == _loop_scores(index, query)
    index.clear()
    index.add(1, ["tea"])
    assert index.scores(["tea"]) == _loop_scores(index, ["tea"])


def test_lexical_scores_read_as_the_mapping_they_hold() -> None:
    scores = LexicalScores.of({9: 0.5, 2: 1.5, 4: 0.25})
    assert scores.ids.tolist() == [2, 4, 9]  # ascending, whatever order they came in
    assert scores == {2: 1.5, 4: 0.25, 9: 0.5}
    assert scores[9] == 0.5 and 3 not in scores and len(scores) == 3
    with pytest.raises(KeyError):
        scores[10]
    assert scores.best() == 1.5 and LexicalScores.of({}).best() == 0.0
    assert LexicalScores.of_rows([(9, 0.5), (2, 1.5), (4, 0.25)]) == scores


def test_lexical_scores_look_up_candidates_and_keep_a_subset() -> None:
    scores = LexicalScores.of({2: 1.5, 4: 0.25, 9: 0.5})
    assert scores.lookup(np.array([9, 1, 2, 10, 4], dtype=np.int64)).tolist() == [0.5, 0.0, 1.5, 0.0, 0.25]
    assert LexicalScores.of({}).lookup(np.array([1, 2], dtype=np.int64)).tolist() == [0.0, 0.0]
    assert scores.only(lambda doc_id: doc_id != 4) == {2: 1.5, 9: 0.5}
    assert sorted(scores.top(2).tolist()) == [2, 9]


def test_cached_postings_cannot_be_changed_through_the_scores_handed_out() -> None:
    index = BM25Index()
    for doc_id in range(600):
        index.add(doc_id, ["tea"])  # one term with many postings: scored in numpy from the cache
    scores = index.scores(["tea"])
    with pytest.raises(ValueError):
        scores.ids[0] = 12345
    assert index.scores(["tea"]).ids[0] == 0


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=string.printable + "'’_", max_size=80))
def test_ascii_text_gives_the_terms_of_the_rules_for_every_script(text: str) -> None:
    """ASCII text takes a faster path (no CJK, one regex group): the same terms."""
    assert tokenize(text) == _terms_of_pieces(text.lower())


@pytest.mark.parametrize(
    "text",
    ["Caroline's dogs weren't running", "x'y'z _a_ b__c 42nd", "'quoted' it's", "K\u212a is ascii lowered"],
)
def test_ascii_text_of_apostrophes_underscores_and_digits_gives_the_same_terms(text: str) -> None:
    assert tokenize(text) == _terms_of_pieces(text.lower())
