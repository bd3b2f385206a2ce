"""Tool calls and results reach a model in an order chat APIs accept.

A tool result with no call, two calls of one message with one id, or a call
with no id used to be stored as given, and `build_context` then produced a
history that OpenAI and Anthropic refuse. Such input is now refused when it is
added; a call left unanswered across turns (the process stopped before the
tool returned) is taken out of the built context, and `explain()` says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convmem import ConversationMemory, InMemoryStore, InvalidMessageError, Message
from convmem._tool_sequence import repair_tool_exchanges


def call(*ids: str | None) -> Message:
    calls = [{"id": call_id, "name": "weather", "args": {}} for call_id in ids]
    return Message.create("assistant", None, tool_calls=calls)


def result(call_id: str, text: str = "sunny") -> Message:
    return Message.create("tool", text, tool_call_id=call_id)


def assert_chat_api_accepts(messages: list[dict[str, Any]]) -> None:
    """OpenAI's and Anthropic's rule: a tool-calling assistant message is followed at once by
    exactly one result per call, and no tool result appears anywhere else."""
    index = 0
    while index < len(messages):
        message = messages[index]
        assert message["role"] != "tool", f"tool result with no call right before it: {messages}"
        calls = message.get("tool_calls") or []
        ids = [c["id"] for c in calls]
        assert all(ids) and len(set(ids)) == len(ids), messages
        answers = [m.get("tool_call_id") for m in messages[index + 1 : index + 1 + len(ids)]]
        assert sorted(answers, key=str) == sorted(ids), f"calls {ids} answered by {answers}: {messages}"
        index += 1 + len(ids)


# -- refused when added ------------------------------------------------------------------


def test_a_tool_call_without_an_id_is_refused_by_the_store() -> None:
    store = InMemoryStore()
    with pytest.raises(InvalidMessageError, match=r"tool_calls\[0\] \('weather'\) has no id"):
        store.append("s", [Message.create("user", "Q"), call(None)])
    assert store.messages("s") == []


def test_two_calls_of_one_message_with_one_id_are_refused() -> None:
    memory = ConversationMemory("s")
    with pytest.raises(InvalidMessageError, match="two tool calls share the id 'c1'"):
        memory.add_messages([Message.create("user", "Q"), call("c1", "c1")])
    assert memory.messages() == []


def test_a_tool_result_with_no_call_is_refused() -> None:
    memory = ConversationMemory("s")
    memory.add("user", "Q")
    with pytest.raises(InvalidMessageError, match="tool result for call 'c9', but no tool call"):
        memory.add_messages([result("c9")])
    assert len(memory.messages()) == 1


def test_a_second_result_for_one_call_is_refused() -> None:
    memory = ConversationMemory("s")
    memory.add_messages([Message.create("user", "Q"), call("c1"), result("c1")])
    with pytest.raises(InvalidMessageError, match="answered already"):
        memory.add_messages([result("c1", "again")])


def test_a_result_added_after_its_call_is_accepted() -> None:
    memory = ConversationMemory("s")
    memory.add_messages([Message.create("user", "Q"), call("c1", "c2")])
    memory.add_messages([result("c2")])
    memory.add_messages([result("c1"), Message.create("assistant", "Sunny everywhere.")])
    assert [m.role.value for m in memory.messages()] == ["user", "assistant", "tool", "tool", "assistant"]


# -- repaired in the built context ---------------------------------------------------------


def crashed_turn_then_question() -> ConversationMemory:
    memory = ConversationMemory("s")
    memory.add_messages([Message.create("user", "Weather in Paris?"), call("c1")])
    # The process stopped before the tool returned; the next question comes in.
    memory.add_messages([Message.create("user", "Never mind. Hello!"), Message.create("assistant", "Hi!")])
    return memory


def test_a_call_left_unanswered_is_taken_out_of_the_context() -> None:
    context = crashed_turn_then_question().build_context("And now?", budget=1000)
    assert_chat_api_accepts(context.messages)
    assert not any(m.get("tool_calls") for m in context.messages)
    assert "Weather in Paris?" in [m["content"] for m in context.messages]


def test_explain_says_which_call_was_taken_out_and_why() -> None:
    context = crashed_turn_then_question().build_context("And now?", budget=1000)
    assert "tool call 'weather' (id 'c1') has no result in the log" in context.explain()


def test_a_call_keeps_its_message_text_when_the_call_is_taken_out() -> None:
    memory = ConversationMemory("s")
    memory.add_messages(
        [
            Message.create("user", "Q"),
            Message.create(
                "assistant", "Let me check.", tool_calls=[{"id": "c1", "name": "weather", "args": {}}]
            ),
        ]
    )
    memory.add("user", "Q2")
    context = memory.build_context(budget=1000, include_query=False)
    assert_chat_api_accepts(context.messages)
    assert "Let me check." in [m["content"] for m in context.messages]


def test_a_result_stored_away_from_its_call_is_moved_up_to_it() -> None:
    messages = [
        Message.create("user", "Q"),
        call("c1"),
        Message.create("assistant", "still working"),
        result("c1"),
    ]
    repaired, repairs = repair_tool_exchanges(messages)
    assert [m.role.value for m in repaired] == ["user", "assistant", "tool", "assistant"]
    assert repairs == ()


def test_a_valid_window_comes_back_unchanged() -> None:
    messages = [Message.create("user", "Q"), call("c1", "c2"), result("c1"), result("c2")]
    assert repair_tool_exchanges(messages) == (tuple(messages), ())


def test_a_result_whose_call_is_not_in_the_window_is_dropped_and_explained() -> None:
    store = InMemoryStore()
    # Written straight to the store, past the memory's check.
    store.append("s", [Message.create("user", "Q"), result("c7"), Message.create("assistant", "A")])
    context = ConversationMemory("s", store).build_context(budget=1000, include_query=False)
    assert_chat_api_accepts(context.messages)
    assert "tool result for call 'c7', which is not in the context; dropped" in context.explain()


# Any log the store accepts (the memory's checks bypassed) builds a context chat APIs accept.
_steps = st.lists(
    st.one_of(
        st.just(("user",)),
        st.just(("assistant",)),
        st.tuples(st.just("call"), st.lists(st.sampled_from("abcd"), min_size=1, max_size=3, unique=True)),
        st.tuples(st.just("result"), st.sampled_from("abcde")),
    ),
    max_size=14,
)


@settings(max_examples=80, deadline=None)
@given(_steps)
def test_every_stored_log_builds_a_context_chat_apis_accept(steps: list[tuple[Any, ...]]) -> None:
    messages = []
    for step in steps:
        if step[0] == "user":
            messages.append(Message.create("user", "question"))
        elif step[0] == "assistant":
            messages.append(Message.create("assistant", "answer"))
        elif step[0] == "call":
            messages.append(call(*step[1]))
        else:
            messages.append(result(step[1]))
    store = InMemoryStore()
    if messages:
        store.append("s", [dataclasses.replace(m, token_count=5) for m in messages])
    context = ConversationMemory("s", store).build_context("now?", budget=4000)
    assert_chat_api_accepts(context.messages)


def test_an_id_used_again_by_a_later_exchange_keeps_both_exchanges() -> None:
    """Models that number their calls per turn ("call_0" every time): the second exchange's
    call takes the result after it, not the first exchange's, and neither is dropped."""
    memory = ConversationMemory("s")
    for city, weather in (("Paris", "sunny"), ("Oslo", "snow")):
        memory.add("user", f"Weather in {city}?")
        memory.add("assistant", "", tool_calls=[{"id": "call_0", "name": "weather", "args": {"city": city}}])
        memory.add("tool", weather, tool_call_id="call_0")
        memory.add("assistant", f"It is {weather} in {city}.")
    context = memory.build_context(budget=2000)
    assert_chat_api_accepts(context.messages)
    assert [m["content"] for m in context.messages if m["role"] == "tool"] == ["sunny", "snow"]
    assert not [d for d in context.dropped if d.section == "window"]


def test_an_unanswered_call_does_not_take_the_result_of_a_later_call_of_its_id() -> None:
    """The first call of "call_0" never returned (the user changed their mind); the
    result after the next "call_0" is that call's, not the first's."""
    first, second = call("call_0"), call("call_0")
    repaired, repairs = repair_tool_exchanges([first, second, result("call_0", "ACME: 42.10")])
    assert [m.text for m in repaired] == ["", "ACME: 42.10"] and repaired[0] is second
    assert [r.reason for r in repairs] == [
        "tool call 'weather' (id 'call_0') has no result in the log (the tool never returned); removed with its message"
    ]
