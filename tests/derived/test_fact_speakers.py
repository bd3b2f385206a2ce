"""In a chat of several people, facts belong to whoever stated them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from convmem import ConversationMemory, Fact, InMemoryStore, InvalidMessageError, Message, RuleFactExtractor
from convmem._derived.facts import FactBook


def said(text: str, seq: int, name: str | None = None, role: str = "user") -> Message:
    message = Message.create(role, text, name=name, timestamp=1_700_000_000.0 + seq)
    return dataclasses.replace(message, seq=seq)


def test_a_named_users_facts_carry_their_name() -> None:
    facts = RuleFactExtractor().extract([said("I live in Boston.", 1, name="Caroline")])
    assert [(fact.key, fact.value, fact.speaker) for fact in facts] == [("city", "Boston", "Caroline")]


def test_a_message_without_a_name_speaks_for_the_user() -> None:
    facts = RuleFactExtractor().extract([said("I live in Boston.", 1)])
    assert [(fact.key, fact.value, fact.speaker) for fact in facts] == [("city", "Boston", None)]


def test_what_a_named_assistant_says_is_no_fact() -> None:
    assert RuleFactExtractor().extract([said("I live in Boston.", 1, name="Melanie", role="assistant")]) == []


def test_one_speakers_value_does_not_supersede_anothers() -> None:
    book = FactBook(
        RuleFactExtractor().extract(
            [
                said("I live in Boston.", 1, name="Caroline"),
                said("I live in Denver.", 2, name="Melanie"),
                said("I live in Austin.", 3),
            ]
        )
    )
    assert book.get("city", "Caroline").value == "Boston"  # type: ignore[union-attr]
    assert book.get("city", "Melanie").value == "Denver"  # type: ignore[union-attr]
    assert book.get("city").value == "Austin"  # type: ignore[union-attr]
    assert len(book) == 3


def test_a_speakers_newer_value_supersedes_only_their_own() -> None:
    book = FactBook(
        RuleFactExtractor().extract(
            [
                said("I live in Boston.", 1, name="Caroline"),
                said("I live in Denver.", 2, name="Melanie"),
                said("I moved to Seattle.", 3, name="Caroline"),
            ]
        )
    )
    assert [fact.value for fact in book.history("city", "Caroline")] == ["Boston", "Seattle"]
    assert [fact.value for fact in book.history("city", "Melanie")] == ["Denver"]


def test_a_negation_ends_only_the_speakers_own_value() -> None:
    book = FactBook(
        [Fact("diet", "vegan", seq=1, speaker="Caroline"), Fact("diet", "vegan", seq=2, speaker="Melanie")]
    )
    book.apply([Fact("diet", "vegan", seq=3, negated=True, speaker="Melanie")])
    assert book.get("diet", "Caroline") is not None
    assert book.get("diet", "Melanie") is None


def test_lines_name_the_speaker_a_fact_is_about() -> None:
    book = FactBook(
        [
            Fact("city", "Boston", seq=1, timestamp=1.0, speaker="Caroline"),
            Fact("preference:coffee", "likes", seq=2, timestamp=2.0),
        ]
    )
    assert book.render_lines("en") == ["likes: coffee", "Caroline: city: Boston"]
    assert book.render_lines("zh") == ["喜欢：coffee", "Caroline：所在城市：Boston"]


def test_the_facts_of_one_named_person_read_as_a_one_person_chats() -> None:
    book = FactBook([Fact("city", "Boston", seq=1, speaker="Caroline")])
    assert book.render_lines("en") == ["city: Boston"]


def test_forgetting_a_speakers_key_leaves_the_others_and_old_messages_do_not_bring_it_back() -> None:
    book = FactBook([Fact("city", "Boston", seq=1, speaker="Caroline"), Fact("city", "Denver", seq=2)])
    assert book.forget("city", "Caroline")
    book.apply([Fact("city", "Boston", seq=1, speaker="Caroline")])
    assert book.get("city", "Caroline") is None
    assert book.get("city").value == "Denver"  # type: ignore[union-attr]
    book.apply([Fact("city", "Lisbon", seq=5, speaker="Caroline")])
    assert book.get("city", "Caroline").value == "Lisbon"  # type: ignore[union-attr]


def test_a_book_with_speakers_round_trips_through_json() -> None:
    book = FactBook(
        [
            Fact("city", "Boston", seq=1, timestamp=1.0, speaker="Caroline"),
            Fact("city", "Seattle", seq=3, timestamp=3.0, speaker="Caroline"),
            Fact("city", "Denver", seq=2, timestamp=2.0),
            Fact("pet", "dog", seq=4, timestamp=4.0, speaker="Melanie"),
        ]
    )
    book.forget("pet", "Melanie")
    text = book.to_json()
    again = FactBook.from_json(text)
    assert json.loads(text)["format"] == 3
    assert again.current() == book.current()
    assert again.history("city", "Caroline") == book.history("city", "Caroline")
    again.apply([Fact("pet", "dog", seq=4, speaker="Melanie")])
    assert again.get("pet", "Melanie") is None  # forgotten through seq 4, also after reloading


def test_a_book_without_speakers_keeps_the_layout_older_versions_read() -> None:
    data = json.loads(FactBook([Fact("city", "Denver", seq=1)]).to_json())
    assert data["format"] == 1
    assert set(data) == {"format", "history", "forgotten"}


def test_a_speaker_name_that_could_open_a_line_of_its_own_is_refused() -> None:
    for bad in ("Caroline: obey", "two\nlines", "", " padded "):
        with pytest.raises(InvalidMessageError, match="speaker"):
            Fact("city", "Boston", speaker=bad)


def test_merged_books_keep_speakers_apart() -> None:
    first = FactBook([Fact("city", "Boston", seq=1, timestamp=1.0, speaker="Caroline")])
    second = FactBook([Fact("city", "Denver", seq=1, timestamp=2.0, speaker="Melanie")])
    merged = FactBook.merged([("s1", first), ("s2", second)])
    assert {(fact.speaker, fact.value, fact.session_id) for fact in merged.current()} == {
        ("Caroline", "Boston", "s1"),
        ("Melanie", "Denver", "s2"),
    }


def test_a_chat_of_several_people_shows_each_ones_facts_under_their_name() -> None:
    memory = ConversationMemory("friends", InMemoryStore())
    memory.add("user", "I live in Boston.", name="Caroline")
    memory.add("user", "I live in Denver.", name="Melanie")
    assert {(fact.speaker, fact.value) for fact in memory.facts()} == {
        ("Caroline", "Boston"),
        ("Melanie", "Denver"),
    }
    text = "\n".join(message["content"] for message in memory.build_context(budget=500).messages)
    assert "Caroline: city: Boston" in text and "Melanie: city: Denver" in text
