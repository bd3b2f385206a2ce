from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

import pytest

from convmem import ConversationMemory, InMemoryStore, InvalidMessageError, Message, TurnStatus
from convmem._models import Role, group_turns


@pytest.mark.parametrize("value", ["user", "USER", " User ", Role.USER, "human"])
def test_role_parses_names_case_insensitively_and_langchain_aliases(value: object) -> None:
    assert Role.parse(value) is Role.USER  # type: ignore[arg-type]


def test_unknown_role_is_rejected_with_allowed_values() -> None:
    with pytest.raises(InvalidMessageError, match=r"role must be one of .*'wizard'"):
        Message.create("wizard", "hi")


@pytest.mark.parametrize("value", ["completed", "COMPLETED", "Completed", TurnStatus.COMPLETED])
def test_turn_status_accepts_enum_or_name_in_any_case(value: object) -> None:
    assert TurnStatus.parse(value) is TurnStatus.COMPLETED  # type: ignore[arg-type]


def test_unknown_turn_status_is_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="status must be one of"):
        Message.create("user", "hi", status="done")


def test_openai_tool_call_shape_is_normalized_to_id_name_args() -> None:
    message = Message.create(
        "assistant",
        None,
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    )
    assert message.tool_calls == ({"id": "call_1", "name": "weather", "args": {"city": "Paris"}},)
    assert message.content == ""


def test_tool_call_with_invalid_json_arguments_is_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="not valid JSON"):
        Message.create(
            "assistant", "", tool_calls=[{"id": "c", "function": {"name": "f", "arguments": "{oops"}}]
        )


@pytest.mark.parametrize("role", ["user", "system"])
def test_none_content_is_rejected_for_user_and_system(role: str) -> None:
    with pytest.raises(InvalidMessageError, match="must not be None"):
        Message.create(role, None)


@pytest.mark.parametrize("role", ["user", "system", "assistant"])
@pytest.mark.parametrize("content", ["", "   ", []])
def test_empty_content_is_accepted_as_langchain_accepts_it(role: str, content: object) -> None:
    assert Message.create(role, content).content == content


def test_assistant_may_be_empty_only_with_tool_calls_or_unfinished() -> None:
    with pytest.raises(InvalidMessageError):
        Message.create("assistant", None)
    assert Message.create("assistant", None, status="failed").content == ""
    assert Message.create("assistant", "", tool_calls=[{"id": "1", "name": "f", "args": {}}]).has_tool_calls


@pytest.mark.parametrize("content", [42, b"bytes", {"text": "dict"}, [1, 2]])
def test_non_text_content_is_rejected_with_its_type(content: object) -> None:
    with pytest.raises(InvalidMessageError, match="content"):
        Message.create("user", content)


def test_tool_message_needs_tool_call_id() -> None:
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        Message.create("tool", "result")


def test_lone_surrogates_are_rejected_before_storage() -> None:
    with pytest.raises(InvalidMessageError, match="surrogate"):
        Message.create("user", "bad \ud800 text")


def test_deeply_nested_content_parts_are_rejected() -> None:
    part: dict[str, object] = {"type": "text", "text": "x"}
    for _ in range(40):
        part = {"type": "wrapper", "inner": part}
    with pytest.raises(InvalidMessageError, match="nested"):
        Message.create("user", [part])


def test_multimodal_parts_are_kept_and_text_comes_from_text_parts() -> None:
    parts = [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
    ]
    message = Message.create("user", parts)
    assert message.content == parts
    assert message.text == "look"


def test_a_timestamp_in_milliseconds_is_refused_with_a_hint_and_nothing_is_stored() -> None:
    """``Date.now()`` or ``time.time() * 1000`` is a date 50,000 years ahead, which no
    date label can show: taken, it made recall fail for the whole user."""
    store = InMemoryStore()
    memory = ConversationMemory("a", store, user_id="u")
    memory.add("user", "My fencing club is Quillon.", timestamp=1_700_000_000)
    with pytest.raises(
        InvalidMessageError, match=r"years 1 to 9999.*in milliseconds\? 1700000000 is in seconds"
    ):
        memory.add("user", "hi", timestamp=1_700_000_000_000)
    for far in (1e300, -1e18):
        with pytest.raises(InvalidMessageError, match=r"^timestamp must be epoch seconds from .* got"):
            memory.add("user", "hi", timestamp=far)
    made = dataclasses.replace(Message.create("user", "hi"), seq=None, timestamp=1.7e12)
    with pytest.raises(InvalidMessageError, match="years 1 to 9999"):
        memory.add_messages([made])
    assert [m.text for m in memory.messages()] == ["My fencing club is Quillon."]
    new_chat = ConversationMemory("b", store, user_id="u")
    context = new_chat.build_context("What is my fencing club?", budget=500)
    assert context.section("recall").items == 1 and "Quillon" in str(context.messages)


def test_the_first_and_last_dates_are_epoch_seconds_a_timestamp_may_be() -> None:
    for moment in (datetime(1, 1, 2, tzinfo=timezone.utc), datetime(9999, 12, 30, tzinfo=timezone.utc)):
        assert Message.create("user", "hi", timestamp=moment).timestamp == moment.timestamp()
    with pytest.raises(InvalidMessageError, match="years 1 to 9999"):
        Message.create("user", "hi", timestamp=datetime(9999, 12, 31, tzinfo=timezone.utc))


def test_timestamp_accepts_datetime_and_rejects_nan() -> None:
    moment = datetime(2024, 5, 8, 13, 56, tzinfo=timezone.utc)
    assert Message.create("user", "hi", timestamp=moment).timestamp == moment.timestamp()
    with pytest.raises(InvalidMessageError, match="timestamp"):
        Message.create("user", "hi", timestamp=float("nan"))


def test_group_turns_starts_a_turn_at_each_user_message() -> None:
    messages = [
        Message.create("assistant", "Welcome!"),
        Message.create("user", "q1"),
        Message.create("assistant", "", tool_calls=[{"id": "1", "name": "f", "args": {}}]),
        Message.create("tool", "r", tool_call_id="1"),
        Message.create("assistant", "a1"),
        Message.create("user", "q2"),
    ]
    turns = group_turns(messages)
    assert [len(t.messages) for t in turns] == [1, 4, 1]
    assert turns[1].answer is not None and turns[1].answer.text == "a1"
    assert turns[0].question is None
