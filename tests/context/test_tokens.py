from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem import ApproximateCounter, ConfigError, Message, TiktokenCounter, count_messages

# The worked example of OpenAI's cookbook "How to count tokens with tiktoken":
# for cl100k chat models the API bills 129 prompt tokens for these messages.
COOKBOOK_MESSAGES = [
    {
        "role": "system",
        "content": "You are a helpful, pattern-following assistant that translates corporate jargon "
        "into plain English.",
    },
    {"role": "system", "name": "example_user", "content": "New synergies will help drive top-line growth."},
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Things working well together will increase revenue.",
    },
    {
        "role": "system",
        "name": "example_user",
        "content": "Let's circle back when we have more bandwidth to touch base on opportunities for "
        "increased leverage.",
    },
    {
        "role": "system",
        "name": "example_assistant",
        "content": "Let's talk later when we're less busy about how to do better.",
    },
    {
        "role": "user",
        "content": "This late pivot means we don't have time to boil the ocean for the client deliverable.",
    },
]

CHINESE = [
    "我养了一只狗，品种是柯基，名字叫多多。",
    "我住在杭州，最近搬到了北京。",
    "项目预算是三十万元，截止日期是十二月十五号。",
    "周末常去西湖边散步，喜欢喝龙井茶。",
]


def test_tiktoken_counter_matches_what_the_chat_api_bills() -> None:
    counter = TiktokenCounter()
    assert counter.is_exact
    assert counter.name == "tiktoken:cl100k_base"
    assert count_messages(counter, COOKBOOK_MESSAGES) == 129


def test_model_name_selects_its_encoding() -> None:
    assert TiktokenCounter(model="gpt-4").name == "tiktoken:cl100k_base"


def test_unknown_model_name_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="does not know the model"):
        TiktokenCounter(model="no-such-model-xyz")


def test_approximate_counter_never_undercounts_chinese() -> None:
    exact, approx = TiktokenCounter(), ApproximateCounter()
    for text in CHINESE:
        assert approx.count_text(text) >= exact.count_text(text), text
    # The chars/4 rule it replaces undercounts the same text about fourfold.
    total_exact = sum(exact.count_text(t) for t in CHINESE)
    assert sum(len(t) // 4 for t in CHINESE) * 3 < total_exact


def test_approximate_counter_stays_close_on_english() -> None:
    exact, approx = TiktokenCounter(), ApproximateCounter()
    text = "Yesterday I went hiking near the lake with my sister, and we saw 3 deer around 7pm."
    assert exact.count_text(text) <= approx.count_text(text) <= 2 * exact.count_text(text)


def test_media_parts_cost_a_fixed_amount_not_their_payload_size() -> None:
    counter = TiktokenCounter()
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 200_000}}
    message = Message.create("user", [{"type": "text", "text": "what is this?"}, image])
    assert counter.count_message(message) < 120


def test_tool_calls_are_counted() -> None:
    counter = TiktokenCounter()
    plain = Message.create("assistant", "", status="failed")
    with_call = Message.create(
        "assistant", "", tool_calls=[{"id": "call_1", "name": "search", "args": {"query": "hiking trails"}}]
    )
    assert counter.count_message(with_call) > counter.count_message(plain) + 5


def test_unloadable_encoding_falls_back_to_approximate_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from convmem import _tokens

    monkeypatch.setattr(_tokens, "_load_encoding", lambda name: None)
    with pytest.warns(RuntimeWarning, match="approximate"):
        counter = TiktokenCounter("cl100k_base")
    assert not counter.is_exact
    assert counter.count_text("你好世界") == ApproximateCounter().count_text("你好世界")


# Characters where cl100k_base's chunks could run across a line start: whitespace of
# several kinds, punctuation that takes newlines into its chunk, contractions, digits,
# CJK, emoji, and the control characters Python calls whitespace and Unicode does not.
_BOUNDARY_ALPHABET = "ab Z9.,'s/\n\r\t \u00a0\u3000\u2028\x1c\x85-:!?<>中文😊"


@settings(max_examples=1500, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(alphabet=_BOUNDARY_ALPHABET, max_size=12),
            st.sampled_from(["", "\n", "\r\n", " \n", ".\n"]),
        ),
        max_size=8,
    )
)
def test_counting_pieces_apart_equals_counting_them_joined(lines: list[tuple[str, str]]) -> None:
    pieces = [text + end for text, end in lines]
    counter = TiktokenCounter()
    assert counter.count_pieces(pieces) == counter.count_text("".join(pieces))


def test_recalled_lines_are_counted_apart_from_the_cache() -> None:
    """A section of passages joined by newlines is counted from its lines' own counts
    (rendering counts each line alone first), without encoding a line again."""
    counter = TiktokenCounter()
    lines = [f"[8 May 2023]\nAlice: I moved to Lisbon in spring, number {i}." for i in range(40)]
    pieces = [line + "\n" for line in lines[:-1]] + [lines[-1]]
    for line in lines:
        counter.count_text(line)  # counted once, as rendering counts each line
    encoded: list[str] = []
    encoding = counter._encoding
    assert encoding is not None
    original = encoding.encode

    def spy(text: str, **kwargs: object) -> list[int]:
        encoded.append(text)
        return original(text, **kwargs)  # type: ignore[arg-type]

    encoding.encode = spy  # type: ignore[method-assign]
    try:
        total = counter.count_pieces(pieces)
    finally:
        del encoding.encode
    assert total == len(original("".join(pieces), disallowed_special=()))
    # At most the line's last chunk, with and without its newline: ".", ".\n".
    assert all(len(text) <= 2 for text in encoded)


@settings(max_examples=2000, deadline=None)
@given(
    st.text(alphabet=_BOUNDARY_ALPHABET + '\u0301é)("#\x1d\u200b\x0b\x0c。！\u2003', min_size=1, max_size=16)
)
def test_a_line_and_its_newline_count_as_the_line_and_what_the_newline_adds(line: str) -> None:
    counter = TiktokenCounter()
    assert counter.count_pieces([line + "\n", "Next line"]) == counter.count_text(line + "\nNext line")


def test_an_encoding_whose_splitting_is_unchecked_counts_the_joined_text() -> None:
    class Other(ApproximateCounter):
        pass

    approximate = Other()
    pieces = ["one two\n", "three"]
    assert approximate.count_pieces(pieces) == approximate.count_text("one two\nthree")
    counter = TiktokenCounter()
    assert counter._encoding is not None
    joined: list[str] = []
    original = counter.count_text

    def count_text(text: str) -> int:
        joined.append(text)
        return original(text)

    counter.count_text = count_text  # type: ignore[method-assign]
    encoding = counter._encoding
    pattern = encoding._pat_str
    try:
        encoding._pat_str = pattern + "|x"  # a pattern not checked for line starts
        assert counter.count_pieces(pieces) == original("one two\nthree")
    finally:
        encoding._pat_str = pattern
    assert joined == ["one two\nthree"]


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet=_BOUNDARY_ALPHABET + '\x1d\x1e\x1f\u2029\u200b\x0b\x0c()"#', max_size=40))
def test_the_lower_bound_of_a_count_never_exceeds_it(text: str) -> None:
    # recall skips a message whose bound alone is over its room, without encoding it
    counter = TiktokenCounter()
    assert counter.at_least(text) <= counter.count_text(text)


def test_the_lower_bound_is_close_on_prose_and_zero_where_it_cannot_be_known() -> None:
    counter = TiktokenCounter()
    prose = "Poles and shorter steps take load off the knees on the way down, my friend. " * 20
    assert 0.7 * counter.count_text(prose) <= counter.at_least(prose) <= counter.count_text(prose)
    assert counter.at_least("") == 0
    encoding = counter._encoding
    assert encoding is not None
    pattern = encoding._pat_str
    try:
        encoding._pat_str = pattern + "|x"  # a splitting not checked: no bound
        assert counter.at_least(prose) == 0
    finally:
        encoding._pat_str = pattern
