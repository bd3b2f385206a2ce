"""A message the memory writes is checked and encoded once, where it comes in.

The memory checks each message with its limits (`check_message`), counts it,
and hands the store the very objects it checked inside `checked_messages`: the
store's `validate_messages` and the record codec take them as checked. Anything
else a store is given, a copy included, is checked again as before.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

import convmem._models as models
import convmem._stores.base as store_base
from convmem import ApproximateCounter, ConversationMemory, InvalidMessageError, Message, SQLiteStore
from convmem._message_json import checked_json, checked_messages
from convmem._models import Role, check_message
from convmem._stores.base import validate_messages
from convmem._stores.codec import message_to_record


def tool_call_message() -> Message:
    return Message.create(
        "assistant",
        "",
        tool_calls=[{"id": "c1", "name": "weather", "args": {"city": "Zürich", "days": [1, 2.5]}}],
        metadata={"source": "café", "n": 3},
    )


def test_the_json_a_check_keeps_is_the_json_the_codec_writes() -> None:
    for message in (Message.create("user", 'a "quoted" line\nand ünïcode ☀'), tool_call_message()):
        plain = message_to_record(message, seq=7)
        with checked_messages([(message, check_message(message))]):
            assert message_to_record(message, seq=7) == plain


def test_only_the_very_objects_checked_are_vouched_for() -> None:
    message = Message.create("user", "hi")
    copy = dataclasses.replace(message)
    with checked_messages([(message, check_message(message))]):
        assert checked_json(message) is not None
        assert checked_json(copy) is None
    assert checked_json(message) is None


def test_a_store_checks_a_message_nobody_vouched_for() -> None:
    broken = Message(role=Role.TOOL, content="x")
    with pytest.raises(InvalidMessageError, match="message 0 of the append: a tool message needs"):
        validate_messages([broken])
    other = Message.create("user", "hi")
    with (
        checked_messages([(other, check_message(other))]),
        pytest.raises(InvalidMessageError, match="message 0 of the append: a tool message needs"),
    ):
        validate_messages([broken])


def test_add_checks_a_message_once(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    checks: list[object] = []
    original = models.check_message

    def counting_check(message: object, **limits: Any) -> Any:
        checks.append(message)
        return original(message, **limits)

    monkeypatch.setattr(models, "check_message", counting_check)
    monkeypatch.setattr("convmem._operations.check_message", counting_check)
    monkeypatch.setattr(store_base, "validate_message", lambda message: checks.append(message) or message)
    memory = ConversationMemory("s", SQLiteStore(tmp_path / "m.db"))
    memory.add("user", "My dog is called Duoduo.", metadata={"k": 1})
    memory.add_turn("And my cat?", "Tell me about her.")
    memory.add_messages([{"role": "user", "content": "hi"}, Message.create("assistant", "hello")])
    # One check for each message written; Message.create's own check is the one extra.
    assert len(checks) == 6
    stored = memory.messages()
    assert [m.text for m in stored][:2] == ["My dog is called Duoduo.", "And my cat?"]
    assert stored[0].metadata == {"k": 1}


def test_the_public_api_still_refuses_bad_input_with_the_same_errors() -> None:
    memory = ConversationMemory("s")
    with pytest.raises(InvalidMessageError, match="role must be one of"):
        memory.add("robot", "hi")
    with pytest.raises(InvalidMessageError, match="a tool message needs the tool_call_id"):
        memory.add("tool", "sunny")
    with pytest.raises(InvalidMessageError, match="metadata must be JSON-serializable"):
        memory.add("user", "hi", metadata={"when": object()})
    with pytest.raises(InvalidMessageError, match="content contains text that is not valid UTF-8"):
        memory.add("user", "bad \ud800 text")
    with pytest.raises(InvalidMessageError, match="nested more than"):
        memory.add("user", [{"type": "x", "v": json.loads("[" * 40 + "]" * 40)}])
    memory.add_turn("q", "a")
    with pytest.raises(InvalidMessageError, match="a user message starts a turn and answers none"):
        memory.add("user", "q2", reply_to_seq=1)
    assert [m.text for m in memory.messages()] == ["q", "a"]


class NegativeCounter(ApproximateCounter):
    def count_message(self, message: Message) -> int:
        return -1


def test_a_count_no_store_accepts_is_refused_by_the_store_as_before() -> None:
    memory = ConversationMemory("s", counter=NegativeCounter())
    with pytest.raises(InvalidMessageError, match="token_count must be None or an int >= 0"):
        memory.add("user", "hi")
    assert memory.messages() == []
