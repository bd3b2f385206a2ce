"""What the extractive summarizer keeps from one update to the next, and the shortcuts
it takes, never change a summary: the same inputs give the same text."""

from __future__ import annotations

import pytest

from convmem import ExtractiveSummarizer, Message, TiktokenCounter
from convmem._derived import summarizer as summarizer_module
from convmem._language import split_sentences
from convmem._models import Role
from convmem._salience import cue_value, information_value

COUNTER = TiktokenCounter()

FIRST = [
    Message.create("user", "My name is Alice and I live in Berlin. I moved here in 2019."),
    Message.create("assistant", "Nice! Berlin is great. Do you like the weather there?"),
]
SECOND = [
    Message.create("user", "We decided to book the flight to Tokyo for June 12."),
    Message.create("assistant", "Great, I will remind you of the deadline on Friday."),
]
OTHER_SESSION = [
    Message.create("user", "I'm Bob, a nurse in Leeds, and my cat is called Tom."),
    Message.create("assistant", "Thanks, Bob. Shall I plan your shifts for next week?"),
]


def test_a_summarizer_shared_by_two_sessions_writes_what_one_per_session_writes() -> None:
    shared = ExtractiveSummarizer(COUNTER)
    alone_a, alone_b = ExtractiveSummarizer(COUNTER), ExtractiveSummarizer(COUNTER)
    summary_a = shared.summarize(None, FIRST)
    summary_b = shared.summarize(None, OTHER_SESSION)
    assert summary_a == alone_a.summarize(None, FIRST)
    assert summary_b == alone_b.summarize(None, OTHER_SESSION)
    # Each session's next update, interleaved, reads the other's summary in between.
    assert shared.summarize(summary_a, SECOND) == alone_a.summarize(summary_a, SECOND)
    assert shared.summarize(summary_b, SECOND) == alone_b.summarize(summary_b, SECOND)


def test_the_same_summary_text_in_two_sessions_gives_the_same_update() -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    previous = summarizer.summarize(None, FIRST)
    first = summarizer.summarize(previous, SECOND)
    again = summarizer.summarize(previous, SECOND)
    assert first == again == ExtractiveSummarizer(COUNTER).summarize(previous, SECOND)


def test_a_summary_line_is_scored_once_while_it_lasts(monkeypatch: pytest.MonkeyPatch) -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    previous = summarizer.summarize(None, FIRST)
    current = summarizer.summarize(previous, SECOND)
    kept_lines = set(previous.splitlines()) & set(current.splitlines())
    assert kept_lines, "the test needs lines that outlive an update"
    scored: list[str] = []

    def counting(sentence: str, role: Role | None) -> float:
        scored.append(sentence)
        return information_value(sentence, role)

    monkeypatch.setattr(summarizer_module, "information_value", counting)
    summarizer.summarize(current, [Message.create("user", "My sister Carol lives in Paris.")])
    rescored = {sentence for line in kept_lines for sentence in split_sentences(line)} & set(scored)
    assert not rescored


def test_the_lines_kept_for_reuse_are_only_those_of_the_last_summary_read() -> None:
    summarizer = ExtractiveSummarizer(COUNTER)
    previous: str | None = None
    for number in range(40):
        message = Message.create("user", f"Meeting {number} with Dana is on day {number} in Oslo.")
        summary = summarizer.summarize(previous, [message], max_tokens=60)
        if number < 39:
            previous = summary
    assert previous is not None
    assert set(summarizer._summary_lines) == set(previous.splitlines())


@pytest.mark.parametrize("max_sentences", [1, 2, 3, 5])
@pytest.mark.parametrize("min_value", [-1.0, 0.0, 2.0, 4.0])
def test_each_message_keeps_its_most_valuable_sentences_earlier_first_among_equals(
    max_sentences: int, min_value: float
) -> None:
    text = (
        "Hello there. I will book the hotel in Rome for May 3. It was fun. The museum opens at 9:30. "
        "Anna and Marco said the budget is 400 euros. Ok. We should decide by Friday. It rained. "
        "The meeting is at 10:00 with Anna. I will book the hotel in Rome for May 3. Thanks!"
    )
    message = Message.create("user", text)
    summarizer = ExtractiveSummarizer(COUNTER, min_value=min_value, max_sentences_per_message=max_sentences)
    values = []
    for order, sentence in enumerate(split_sentences(text)):
        value = information_value(sentence, Role.USER)
        if value > 0 and value >= min_value:
            value /= max(1.0, COUNTER.count_text(sentence) / 60)
            values.append((-value, order, sentence))
    expected = [sentence for _, _, sentence in sorted(sorted(values)[:max_sentences], key=lambda v: v[1])]
    kept = summarizer._units_of_messages([message], first_order=0)
    assert [unit.text for unit in kept] == expected


ASCII_SENTENCES = [
    "I DECIDED to book a table for Friday.",
    "We Moved to Leeds last Week, and I really LIKE it!",
    "my Birthday is on 3 May.",
    "The train leaves at 10:30 on 2024-05-06?",
    "Let's meet in March, o'clock does not matter, say 5 p.m.",
    "Do not really enjoy the To-Do list, I'd cancel it.",
    "nothing here but plain words",
]


@pytest.mark.parametrize("sentence", ASCII_SENTENCES)
@pytest.mark.parametrize("role", [Role.USER, Role.ASSISTANT, Role.TOOL, None])
def test_an_ascii_sentence_is_worth_what_the_general_matching_finds(sentence: str, role: Role | None) -> None:
    # A trailing emoji changes no cue, but sends the sentence down the general path.
    assert cue_value(sentence, role) == cue_value(sentence + " 🙂", role)


def test_cue_words_count_in_any_case_and_script() -> None:
    plain = cue_value("the list is long", Role.USER)
    for sentence in ("the DEADLINE is long", "the deadline is long", "the ſchedule is long", "截止日期很长"):
        assert cue_value(sentence, Role.USER) > plain
