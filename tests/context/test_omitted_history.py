"""What a context says about history it leaves out: deleted turns are not "left out", and
the note is an option that, when off with every memory section off, costs nothing."""

from __future__ import annotations

import pytest

from convmem import ConfigError, ConversationMemory, MemoryConfig, count_messages

OMITTED_LINE = "(Some earlier conversation is not included here.)"
PLAIN = MemoryConfig(
    extract_facts=False, recall_earlier_turns=False, summary_trigger="never", prune_low_information=False
)


def chat(config: MemoryConfig, turns: int) -> ConversationMemory:
    memory = ConversationMemory("s", config=config)
    for index in range(turns):
        memory.add_turn(f"Question {index} about the garden shed roof?", f"Answer {index}: use felt.")
    return memory


def test_deleting_the_first_turns_does_not_make_the_rest_left_out() -> None:
    memory = chat(MemoryConfig(), 4)
    memory.delete_messages([1, 2, 3, 4])
    context = memory.build_context("And the gutters?", budget=2000)
    assert OMITTED_LINE not in (context.memory_text or "")
    assert "older than the recent window" not in context.explain()
    assert [m.seq for m in context.window] == [5, 6, 7, 8]


def test_history_older_than_the_window_is_still_reported_after_a_delete() -> None:
    memory = chat(MemoryConfig(), 40)
    memory.delete_messages([1, 2])
    context = memory.build_context("And the gutters?", budget=200)
    assert OMITTED_LINE in context.memory_text
    assert "older than the recent window" in context.explain() or "over the window" in context.explain()


def test_without_the_note_and_memory_sections_the_window_is_the_newest_turns_that_fit() -> None:
    memory = chat(PLAIN.replace(note_omitted_history=False), 30)
    budget = 300
    context = memory.build_context("And the gutters?", budget=budget)
    assert context.memory_text == ""
    # The reference: newest whole turns while their stored counts fit what is left.
    room = budget - count_messages(memory.counter, [context.messages[-1]])  # query + reply priming
    expected: list[int] = []
    for turn in reversed(memory.turns()):
        cost = sum(m.token_count or 0 for m in turn.messages)
        if cost > room:
            break
        room -= cost
        expected[:0] = [m.seq or 0 for m in turn.messages]
    assert [m.seq for m in context.window] == expected
    assert context.token_count <= budget


def test_the_note_alone_never_takes_a_turns_room() -> None:
    with_note = chat(PLAIN, 30).build_context("And the gutters?", budget=300)
    without = chat(PLAIN.replace(note_omitted_history=False), 30).build_context(
        "And the gutters?", budget=300
    )
    assert [m.seq for m in with_note.window] == [m.seq for m in without.window]
    # It is there when the turns leave room for it.
    roomy = chat(PLAIN, 30).build_context("And the gutters?", budget=300 + 40)
    assert OMITTED_LINE in roomy.memory_text and roomy.token_count <= 340


def test_beside_memory_items_the_note_is_paid_for_up_front() -> None:
    memory = chat(MemoryConfig(recall_earlier_turns=False), 30)
    memory.add("user", "My name is Ana and I live in Porto.")
    context = memory.build_context("And what about my gutters?", budget=300)
    assert context.section("facts").items >= 1
    assert OMITTED_LINE in context.memory_text


def test_note_omitted_history_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match="note_omitted_history"):
        MemoryConfig(note_omitted_history="no")  # type: ignore[arg-type]
