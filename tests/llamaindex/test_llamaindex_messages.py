"""ChatMessage <-> convmem Message: what LlamaIndex puts in comes back equal."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import (
    AudioBlock,
    ChatMessage,
    DocumentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ThinkingBlock,
    ToolCallBlock,
)
from pydantic import BaseModel

from convmem import InvalidMessageError, Message, TiktokenCounter
from convmem._models import Role
from llamaindex_convmem import from_chat_message, from_chat_messages, to_chat_message

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def round_trip(message: ChatMessage) -> ChatMessage:
    stored = from_chat_message(message)
    return to_chat_message(stored)


@pytest.mark.parametrize(
    "message",
    [
        ChatMessage(role="user", content="My dog is called Duoduo."),
        ChatMessage(role="assistant", content="What a lovely name!"),
        ChatMessage(role="system", content="You are helpful."),
        ChatMessage(role="developer", content="Answer briefly."),
        ChatMessage(role="model", content="Gemini-style answer"),
        ChatMessage(role="chatbot", content="Cohere-style answer"),
        ChatMessage(role="assistant", content=""),
        ChatMessage(role="user", content="我叫李雷，我住在杭州。"),
    ],
    ids=lambda m: m.role.value,
)
def test_text_messages_round_trip_with_their_role(message: ChatMessage) -> None:
    assert round_trip(message) == message


def test_multimodal_blocks_round_trip() -> None:
    message = ChatMessage(
        role="user",
        blocks=[
            TextBlock(text="What is in these?"),
            ImageBlock(image=PNG, image_mimetype="image/png"),
            ImageBlock(url="https://example.com/cat.png", detail="low"),
            AudioBlock(audio=b"RIFF0000WAVE", format="wav"),
            DocumentBlock(data=b"%PDF-1.4 tiny", title="tiny.pdf"),
        ],
    )
    assert round_trip(message) == message


def test_thinking_block_round_trips() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[ThinkingBlock(content="Let me think.", num_tokens=4), TextBlock(text="42")],
    )
    assert round_trip(message) == message


def test_tool_call_blocks_round_trip_and_reach_convmem_as_tool_calls() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text="Checking."),
            ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Paris"}),
            ToolCallBlock(tool_call_id="c2", tool_name="time", tool_kwargs='{"tz": "CET"}'),
        ],
    )
    stored = from_chat_message(message)
    assert stored.tool_calls == (
        {"id": "c1", "name": "weather", "args": {"city": "Paris"}},
        {"id": "c2", "name": "time", "args": {"tz": "CET"}},
    )
    assert stored.content == "Checking."
    assert to_chat_message(stored) == message


def test_unparseable_streamed_tool_arguments_are_kept_verbatim() -> None:
    message = ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs='{"city": "Par')],
    )
    assert round_trip(message) == message


def test_openai_style_tool_calls_in_additional_kwargs_round_trip() -> None:
    message = ChatMessage(
        role="assistant",
        content=None,
        additional_kwargs={
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                }
            ]
        },
    )
    stored = from_chat_message(message)
    assert stored.tool_calls == ({"id": "call_1", "name": "weather", "args": {"city": "Paris"}},)
    assert to_chat_message(stored) == message


def test_tool_call_objects_in_additional_kwargs_come_back_as_dicts() -> None:
    class Function(BaseModel):
        name: str
        arguments: str

    class ToolCall(BaseModel):
        id: str
        type: str = "function"
        function: Function

    call = ToolCall(id="call_9", function=Function(name="search", arguments='{"q": "corgi"}'))
    message = ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [call]})
    restored = round_trip(message)
    assert restored.additional_kwargs["tool_calls"] == [call.model_dump()]
    assert from_chat_message(message).tool_calls[0]["args"] == {"q": "corgi"}


def test_tool_result_keeps_its_tool_call_id_and_name() -> None:
    message = ChatMessage(
        role="tool", content="sunny, 21 °C", additional_kwargs={"tool_call_id": "c1", "name": "weather"}
    )
    stored = from_chat_message(message)
    assert (stored.role, stored.tool_call_id, stored.name) == (Role.TOOL, "c1", "weather")
    assert to_chat_message(stored) == message


def test_tool_result_without_an_id_is_stored_and_comes_back_without_one() -> None:
    message = ChatMessage(role="function", content="42", additional_kwargs={"name": "calculator"})
    stored = from_chat_message(message)
    assert stored.role is Role.TOOL
    assert to_chat_message(stored) == message


def test_a_legacy_function_call_becomes_a_tool_call_its_result_answers() -> None:
    call = ChatMessage(
        role="assistant",
        content="",
        additional_kwargs={"function_call": {"name": "weather", "arguments": '{"city": "Paris"}'}},
    )
    result = ChatMessage(role="function", content="sunny", additional_kwargs={"name": "weather"})
    stored_call, stored_result = from_chat_messages([call, result])
    [tool_call] = stored_call.tool_calls
    assert (tool_call["name"], tool_call["args"]) == ("weather", {"city": "Paris"})
    assert stored_result.tool_call_id == tool_call["id"]
    assert [to_chat_message(stored_call), to_chat_message(stored_result)] == [call, result]


def test_two_legacy_function_calls_get_ids_of_their_own() -> None:
    call = ChatMessage(role="assistant", content="", additional_kwargs={"function_call": {"name": "now"}})
    first, second = from_chat_messages([call, call])
    assert first.tool_calls[0]["id"] != second.tool_calls[0]["id"]


def test_other_additional_kwargs_round_trip() -> None:
    message = ChatMessage(
        role="user", content="hi", additional_kwargs={"lang": "en", "scores": [1, 2.5, None]}
    )
    assert round_trip(message) == message


def test_unserializable_additional_kwargs_are_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    message = ChatMessage(role="assistant", content="hi", additional_kwargs={"raw": object(), "keep": 1})
    restored = round_trip(message)
    assert restored.additional_kwargs == {"keep": 1}
    assert "raw" in caplog.text


def test_messages_written_by_convmem_itself_come_back_with_tool_call_blocks() -> None:
    stored = Message.create(
        "assistant", "", tool_calls=[{"id": "c1", "name": "weather", "args": {"city": "Oslo"}}]
    )
    restored = to_chat_message(stored)
    assert restored.role is MessageRole.ASSISTANT
    assert restored.blocks == [
        ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Oslo"})
    ]


def test_openai_image_url_parts_written_elsewhere_become_image_blocks() -> None:
    stored = Message.create(
        "user",
        [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://e.com/a.png"}}],
    )
    blocks = to_chat_message(stored).blocks
    assert isinstance(blocks[1], ImageBlock)
    assert str(blocks[1].url) == "https://e.com/a.png"


def test_tool_calls_and_images_are_counted() -> None:
    counter = TiktokenCounter()
    plain = from_chat_message(ChatMessage(role="assistant", content="ok"))
    with_call = from_chat_message(
        ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text="ok"),
                ToolCallBlock(tool_call_id="c1", tool_name="search", tool_kwargs={"q": "x" * 400}),
            ],
        )
    )
    with_image = from_chat_message(
        ChatMessage(role="assistant", blocks=[TextBlock(text="ok"), ImageBlock(url="https://e.com/a.png")])
    )
    assert counter.count_message(with_call) > counter.count_message(plain) + 50
    assert counter.count_message(with_image) > counter.count_message(plain) + 50


def test_an_unknown_role_is_an_invalid_message_error() -> None:
    message = ChatMessage.model_construct(role="wizard", blocks=[TextBlock(text="hi")], additional_kwargs={})
    with pytest.raises(InvalidMessageError, match="unknown role 'wizard'"):
        from_chat_message(message)


def test_an_empty_user_message_is_kept() -> None:
    assert from_chat_message(ChatMessage(role="user", content="")).text == ""


def test_something_other_than_a_chat_message_is_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="expected a llama_index ChatMessage"):
        from_chat_message({"role": "user", "content": "hi"})  # type: ignore[arg-type]


def test_a_single_message_given_as_a_list_of_messages_is_rejected() -> None:
    with pytest.raises(InvalidMessageError, match="use put"):
        from_chat_messages(ChatMessage(role="user", content="hi"))  # type: ignore[arg-type]
