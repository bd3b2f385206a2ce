"""LangChain messages survive a trip through convmem unchanged; bad ones are refused clearly."""

from __future__ import annotations

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)

from convmem import InvalidMessageError, TurnStatus
from convmem._models import Role
from langchain_convmem import from_convmem_message, to_convmem_message, to_convmem_messages

IMAGE_BLOCK = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 5000}}

ROUND_TRIP = [
    HumanMessage("hello"),
    HumanMessage("hello", id="m-1", name="ana", additional_kwargs={"k": [1, 2]}),
    HumanMessage(content=[{"type": "text", "text": "what is this?"}, IMAGE_BLOCK]),
    HumanMessage(content=["plain string part", {"type": "text", "text": "and a block"}]),
    SystemMessage("You are terse.", id="sys"),
    AIMessage("It is sunny.", id="run-1", response_metadata={"model_name": "fake", "finish_reason": "stop"}),
    AIMessage(
        "",
        tool_calls=[
            {"id": "c1", "name": "weather", "args": {"city": "Paris", "days": [1, 2]}},
            {"id": "c2", "name": "time", "args": {}},
        ],
        usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13},
    ),
    AIMessage(
        content=[
            {"type": "text", "text": "calling"},
            {"type": "tool_use", "id": "c3", "name": "x", "input": {}},
        ],
        tool_calls=[{"id": "c3", "name": "x", "args": {}}],
        invalid_tool_calls=[
            {"type": "invalid_tool_call", "id": "c4", "name": "y", "args": "{oops", "error": "bad"}
        ],
    ),
    ToolMessage("sunny, 21 °C", tool_call_id="c1"),
    ToolMessage("failed", tool_call_id="c2", status="error", artifact={"raw": [1, 2, 3]}, name="time"),
    ChatMessage(role="assistant", content="from a generic chat message"),
    ChatMessage(role="critic", content="The plan misses the budget.", id="c-1"),
    HumanMessage("我叫李雷，我住在杭州。"),
]


@pytest.mark.parametrize("message", ROUND_TRIP, ids=lambda m: f"{type(m).__name__}")
def test_message_round_trips_without_loss(message: BaseMessage) -> None:
    assert from_convmem_message(to_convmem_message(message)) == message


def test_round_trip_keeps_the_message_type() -> None:
    for message in ROUND_TRIP:
        assert type(from_convmem_message(to_convmem_message(message))) is type(message)


def test_roles_and_tool_fields_map_to_convmem() -> None:
    call = to_convmem_message(ROUND_TRIP[6])
    result = to_convmem_message(ROUND_TRIP[8])
    assert call.role is Role.ASSISTANT
    assert call.tool_calls == (
        {"id": "c1", "name": "weather", "args": {"city": "Paris", "days": [1, 2]}},
        {"id": "c2", "name": "time", "args": {}},
    )
    assert result.role is Role.TOOL and result.tool_call_id == "c1"
    assert to_convmem_message(HumanMessage("x")).role is Role.USER
    assert to_convmem_message(SystemMessage("x")).role is Role.SYSTEM


@pytest.mark.parametrize(
    ("chat_role", "role"),
    [
        ("critic", Role.ASSISTANT),
        ("Narrator", Role.ASSISTANT),
        ("human", Role.USER),
        ("developer", Role.SYSTEM),
    ],
)
def test_a_chat_message_of_any_role_is_stored_and_comes_back_with_that_role(
    chat_role: str, role: Role
) -> None:
    stored = to_convmem_message(ChatMessage(role=chat_role, content="x"))
    assert stored.role is role
    assert from_convmem_message(stored) == ChatMessage(role=chat_role, content="x")


def test_a_chunk_is_stored_as_the_complete_message() -> None:
    chunk = AIMessageChunk(content="Hel", id="r1") + AIMessageChunk(content="lo", id="r1")
    back = from_convmem_message(to_convmem_message(chunk))
    assert type(back) is AIMessage
    assert back == AIMessage("Hello", id="r1")


def test_status_is_set_on_the_stored_message() -> None:
    assert to_convmem_message(HumanMessage("q"), status="running").status is TurnStatus.RUNNING


def test_converted_message_shares_no_mutable_state_with_the_store() -> None:
    stored = to_convmem_message(HumanMessage(content=[{"type": "text", "text": "original"}]))
    back = from_convmem_message(stored)
    back.content[0]["text"] = "changed"  # type: ignore[index]
    assert stored.content == [{"type": "text", "text": "original"}]


@pytest.mark.parametrize(
    "message",
    [
        FunctionMessage(content="x", name="legacy"),
        RemoveMessage(id="m-1"),
        ChatMessage(role="  ", content="x"),
    ],
    ids=["FunctionMessage", "RemoveMessage", "ChatMessage-blank-role"],
)
def test_unsupported_message_types_are_refused_with_a_clear_error(message: BaseMessage) -> None:
    with pytest.raises(InvalidMessageError) as info:
        to_convmem_message(message)
    assert type(message).__name__ in str(info.value)


@pytest.mark.parametrize("value", [("human", "hi"), "hi", {"role": "user", "content": "hi"}, None])
def test_non_messages_are_refused_with_a_hint(value: object) -> None:
    with pytest.raises(InvalidMessageError, match="convert_to_messages"):
        to_convmem_message(value)  # type: ignore[arg-type]


def test_none_content_is_refused() -> None:
    broken = HumanMessage.model_construct(content=None)
    with pytest.raises(InvalidMessageError, match="content is None"):
        to_convmem_message(broken)


def test_empty_human_message_is_kept_as_langchain_allows_it() -> None:
    assert to_convmem_message(HumanMessage("")).content == ""


def test_non_json_extras_are_refused_naming_the_field() -> None:
    with pytest.raises(InvalidMessageError, match=r"AIMessage\.additional_kwargs"):
        to_convmem_message(AIMessage("x", additional_kwargs={"parsed": object()}))


def test_a_single_message_is_not_a_list() -> None:
    with pytest.raises(InvalidMessageError, match="wrap it in a list"):
        to_convmem_messages(HumanMessage("hi"))  # type: ignore[arg-type]
