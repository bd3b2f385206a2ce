"""Language knowledge in one place: scripts, detection, sentence splitting, speaker labels
and section headers (Chinese and English)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from convmem import ConfigError, InvalidMessageError
from convmem._language import (
    CJK,
    FACT_SECTION_HEADERS,
    HAN,
    LANGUAGES,
    SECTION_HEADERS,
    WIDE_CJK,
    check_language,
    detect_language,
    iter_sentences,
    resolve_language,
    speaker_label,
    speaker_prefix,
    split_sentences,
)
from convmem._models import Role


def test_detect_language_is_chinese_when_han_characters_dominate() -> None:
    assert detect_language("我上个月搬到了北京，现在住在朝阳区。") == "zh"


def test_detect_language_is_english_with_a_few_chinese_words() -> None:
    assert detect_language("My friend 小明 lives in Beijing with his dog.") == "en"


def test_detect_language_weighs_characters_against_words_not_letters() -> None:
    # 4 Han characters against 3 Latin words (19 letters): still a Chinese sentence.
    assert detect_language("帮我debug这个Python function") == "zh"
    assert detect_language("我在Google工作") == "zh"


def test_detect_language_without_letters_returns_the_default() -> None:
    assert detect_language("") == "en"
    assert detect_language("12345 !!! 👍") == "en"
    assert detect_language("42", default="zh") == "zh"


def test_detect_language_rejects_non_text() -> None:
    with pytest.raises(ConfigError, match="needs a str"):
        detect_language(None)  # type: ignore[arg-type]


def test_han_matches_chinese_characters_only() -> None:
    assert all(HAN.match(char) for char in "我爱北京豈𠀀")
    assert not any(HAN.match(char) for char in "aあア한。，")


def test_cjk_adds_kana_and_hangul_and_wide_cjk_adds_cjk_punctuation() -> None:
    assert all(CJK.match(char) for char in "我あア한")
    assert not any(CJK.match(char) for char in "a。，！")
    assert all(WIDE_CJK.match(char) for char in "我あ한。，！　ㄅ")
    assert not any(WIDE_CJK.match(char) for char in "a.,!1 ")


def test_check_language_rejects_an_unknown_language() -> None:
    with pytest.raises(ConfigError, match=r"language must be one of \['auto', 'zh', 'en'\], got 'fr'"):
        check_language("fr")


def test_check_language_without_auto_rejects_auto() -> None:
    with pytest.raises(ConfigError, match="got 'auto'"):
        check_language("auto", allow_auto=False)


def test_resolve_language_detects_only_when_auto() -> None:
    assert resolve_language("auto", "你好，我叫小明") == "zh"
    assert resolve_language("en", "你好，我叫小明") == "en"


def test_split_sentences_at_chinese_marks() -> None:
    assert split_sentences("我叫小明。你呢？我很好！今天下雨；明天晴……好吧") == [
        "我叫小明。",
        "你呢？",
        "我很好！",
        "今天下雨；",
        "明天晴……",
        "好吧",
    ]


def test_split_sentences_at_english_marks_followed_by_space() -> None:
    assert split_sentences("I live in Beijing. Do you? Great! Bye") == [
        "I live in Beijing.",
        "Do you?",
        "Great!",
        "Bye",
    ]


def test_split_sentences_keeps_abbreviations_and_initials_whole() -> None:
    assert split_sentences("Dr. Li met J. K. Rowling at 5 p.m. yesterday. Then he left.") == [
        "Dr. Li met J. K. Rowling at 5 p.m. yesterday.",
        "Then he left.",
    ]


def test_split_sentences_keeps_decimals_urls_and_versions_whole() -> None:
    text = "Use v1.2.3 from https://example.com/a.b?x=1 today. It costs 3.5 dollars."
    assert split_sentences(text) == [
        "Use v1.2.3 from https://example.com/a.b?x=1 today.",
        "It costs 3.5 dollars.",
    ]


def test_split_sentences_splits_a_dotted_abbreviation_before_a_capital() -> None:
    assert split_sentences("I live in the U.S. My name is Bob.") == ["I live in the U.S.", "My name is Bob."]


def test_split_sentences_at_line_breaks() -> None:
    assert split_sentences("first line\nsecond line\r\n\n third ") == ["first line", "second line", "third"]


def test_split_sentences_does_not_split_list_numbers() -> None:
    assert split_sentences("1. Buy milk\n2. Call mom") == ["1. Buy milk", "2. Call mom"]


def test_split_sentences_keeps_closing_quotes_with_their_sentence() -> None:
    assert split_sentences('He said "Stop." Then he left.') == ['He said "Stop."', "Then he left."]
    assert split_sentences("她说：“明天见！”我点了点头。") == ["她说：“明天见！”", "我点了点头。"]


def test_split_sentences_splits_english_mark_before_chinese() -> None:
    assert split_sentences("OK.我知道了") == ["OK.", "我知道了"]


def test_split_sentences_joins_a_punctuation_only_piece_to_the_previous_sentence() -> None:
    assert split_sentences("Really\n!!!") == ["Really!!!"]


def test_split_sentences_of_blank_text_is_empty() -> None:
    assert split_sentences("  \n\n ") == []


def test_split_sentences_rejects_non_text() -> None:
    with pytest.raises(ConfigError, match="needs a str"):
        split_sentences(["a"])  # type: ignore[arg-type]


_TEXT = st.lists(
    st.sampled_from([*"abc XYZ.!?;,\n\r。！？；…”」12我你好", "Dr.", "e.g.", " 3.5 ", "1. "]), max_size=40
).map("".join)


@given(_TEXT)
def test_split_sentences_loses_no_text(text: str) -> None:
    sentences = split_sentences(text)
    assert re.sub(r"\s", "", "".join(sentences)) == re.sub(r"\s", "", text)


@given(_TEXT)
def test_split_sentences_returns_stripped_single_line_sentences(text: str) -> None:
    for sentence in split_sentences(text):
        assert sentence == sentence.strip()
        assert sentence
        assert "\n" not in sentence


def test_speaker_labels_and_prefixes_per_language() -> None:
    assert speaker_label("user", "zh") == "用户"
    assert speaker_label(Role.TOOL, "en") == "Tool"
    assert speaker_prefix(Role.ASSISTANT, "zh") == "助手："
    assert speaker_prefix("system", "en") == "System: "


def test_speaker_label_rejects_an_unknown_role() -> None:
    with pytest.raises(InvalidMessageError):
        speaker_label("narrator", "en")


def test_every_language_names_the_same_sections() -> None:
    assert set(SECTION_HEADERS) == set(LANGUAGES)
    assert SECTION_HEADERS["zh"].keys() == SECTION_HEADERS["en"].keys()
    assert SECTION_HEADERS["en"]["recall"] == "Relevant earlier conversation:"


def test_fact_section_headers_are_the_facts_headings_without_the_english_colon() -> None:
    assert FACT_SECTION_HEADERS["zh"] == SECTION_HEADERS["zh"]["facts"]
    assert FACT_SECTION_HEADERS["en"] + ":" == SECTION_HEADERS["en"]["facts"]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "!!",
        "Thanks!! ok",
        "...hello",
        "我叫小明。I live in Beijing! Dr. Li said 3.5 is fine.",
        "a.\n\n!?",
        "\u201cHi.\u201d she said. Then e.g. this; U.S. stuff etc. and more",
        "1. Buy milk\n2. Bake bread.",
    ],
)
def test_iter_sentences_yields_what_split_sentences_returns_one_at_a_time(text: str) -> None:
    sentences = iter_sentences(text)
    assert not isinstance(sentences, list)
    assert list(sentences) == split_sentences(text)
