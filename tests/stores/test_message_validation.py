"""Every path into a store validates a message, and a message has a serialized size cap.

`Message.create` is not the only way to get a `Message`: the dataclass
constructor and `dataclasses.replace` skip it. Stores therefore check each
message again (`validate_messages`) before writing anything; what each store
does with a malformed message is part of the store contract
(`test_store_contract.py`), run on every backend. This file keeps what the
memory adds on top: its own checks and the size cap.
"""

from __future__ import annotations

from typing import Any

import pytest

from convmem import ApproximateCounter, ConversationMemory, InvalidMessageError, MemoryConfig, Message, Store
from convmem._models import Role, validate_message
from convmem._stores.base import validate_messages

GOOD = Message.create("user", "hello")


def test_a_memory_keeps_an_empty_user_message_and_still_builds_a_context() -> None:
    memory = ConversationMemory("s", config=MemoryConfig(language="en"))
    memory.add_turn("", "You sent an empty message; what did you mean?")
    memory.add_turn("My dog is called Duoduo.", "Nice name!")
    assert memory.messages()[0].text == ""
    context = memory.build_context(query="what is my dog called?", budget=500)
    assert context.token_count <= 500
    assert "Duoduo" in "\n".join(str(m["content"]) for m in context.messages)


def test_the_validation_message_names_the_message_and_the_field() -> None:
    with pytest.raises(
        InvalidMessageError, match=r"message 1 of the append: a tool message needs the tool_call_id"
    ):
        validate_messages([GOOD, Message(role=Role.TOOL, content="x")])


# -- the serialized size cap -----------------------------------------------------------------------------

MB = 1_000_000


class CountingCounter(ApproximateCounter):
    """Records how often a message was counted: an oversized message must be refused before that."""

    def __init__(self) -> None:
        super().__init__()
        self.counted = 0

    def count_message(self, message: Message) -> int:
        self.counted += 1
        return super().count_message(message)


def image_part(size: int) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * size}}


OVERSIZED: dict[str, dict[str, Any]] = {
    "a 50 MB image part": {"role": "user", "content": ["what is this?", image_part(50 * MB)]},
    "50 MB of metadata": {"role": "user", "content": "hi", "metadata": {"blob": "x" * (50 * MB)}},
    "50 MB of tool-call arguments": {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "name": "upload", "args": {"data": "y" * (50 * MB)}}],
    },
    "6 MB of Chinese text in 2 M characters": {
        "role": "user",
        "content": [{"type": "note", "body": "长" * (2 * MB)}],
    },
}


@pytest.mark.parametrize("fields", list(OVERSIZED.values()), ids=list(OVERSIZED))
def test_an_oversized_message_is_refused_before_counting_and_nothing_is_stored(
    store: Store, fields: dict[str, Any]
) -> None:
    counter = CountingCounter()
    memory = ConversationMemory("s", store, MemoryConfig(max_message_bytes=4 * MB), counter=counter)
    memory.add("user", "before")
    counted = counter.counted
    with pytest.raises(InvalidMessageError, match="max_message_bytes=4000000"):
        memory.add(**fields)
    assert counter.counted == counted
    assert [m.text for m in memory.messages()] == ["before"]


def test_the_cap_counts_utf8_bytes_not_characters() -> None:
    text_part = {"type": "note", "body": "长" * 1000}  # 3,000 bytes in 1,000 characters
    message = Message.create("user", [text_part])
    validate_message(message, max_bytes=3100)
    with pytest.raises(InvalidMessageError, match="bytes serialized"):
        validate_message(message, max_bytes=2900)


def test_a_message_under_the_cap_is_stored_whole(store: Store) -> None:
    memory = ConversationMemory("s", store, MemoryConfig(max_message_bytes=2 * MB))
    image = image_part(MB)
    memory.add("user", ["what is this?", image])
    assert memory.messages()[0].content == ["what is this?", image]


def test_the_default_cap_is_a_few_megabytes() -> None:
    assert 1 * MB <= MemoryConfig().max_message_bytes <= 16 * MB
