"""What the store contract writes and expects: messages, hostile ids and texts, and the
small helpers every check uses."""

from __future__ import annotations

import dataclasses

from .._models import Message, Role
from .._stores.base import Store

__all__ = [
    "CALL",
    "GOOD",
    "HOSTILE_IDS",
    "MALFORMED",
    "SQL_LOOKING_TEXTS",
    "UNUSABLE_IDS",
    "assistant",
    "fill",
    "generation",
    "seqs",
    "texts",
    "user",
]

# Ids that validate_id accepts: every store keeps each one apart and gives it back exactly.
HOSTILE_IDS = [
    "a",
    "a*",
    "a?",
    "*",
    "a[bc]",
    "a:b",
    "a:b:log",
    "a:meta",
    "a%3Ab",
    "%",
    "%s",
    "%(x)s",
    "$1",
    "{a}",
    "a}",
    "{",
    "{}",
    "x{a}y:{b}",
    "'",
    "''",
    '"',
    "a'); DROP TABLE sessions; --",
    "1 OR 1=1",
    "../../etc/passwd",
    "..",
    "a/b",
    "a\\b",
    "a b",
    "é",
    "e\u0301",
    "会话",
    "🐶",
    "x" * 256,
    "界" * 255,
]
# Ids that validate_id refuses (the memory never passes them on): a store either keeps them
# apart like any other id, or refuses them with InvalidSessionIdError; it never mixes them up.
UNUSABLE_IDS = ["a\x00b", "x" * 10_000]
SQL_LOOKING_TEXTS = [
    "'; DROP TABLE messages; --",
    "Robert'); DELETE FROM sessions WHERE ('1'='1",
    "%s %(name)s %% $1 ? :name",
    "\\x00 \\ \\' \\\"",
    "E'\\\\' || chr(0)",
    "{}{{}}}{",
    "SELECT * FROM convmem.messages; COMMIT; BEGIN;",
]


def user(text: str, tokens: int | None = None) -> Message:
    return dataclasses.replace(Message.create("user", text), token_count=tokens)


def assistant(text: str, tokens: int | None = None) -> Message:
    return dataclasses.replace(Message.create("assistant", text), token_count=tokens)


def texts(messages: list[Message]) -> list[str]:
    return [m.text for m in messages]


def seqs(messages: list[Message]) -> list[int | None]:
    return [m.seq for m in messages]


def fill(store: Store, session_id: str, count: int) -> None:
    store.append(session_id, [user(f"m{i}") for i in range(1, count + 1)])


def generation(store: Store, session_id: str = "s") -> str | None:
    return store.stats(session_id).generation


# `Message.create` validates, but the dataclass constructor and `dataclasses.replace` do not:
# every store checks each message again (`validate_messages`) before it writes anything.
GOOD = Message.create("user", "hello")
CALL = {"id": "c1", "name": "weather", "args": {"city": "Paris"}}

MALFORMED: dict[str, Message] = {
    "dict content": dataclasses.replace(GOOD, content={"a": "b"}),  # type: ignore[arg-type]
    "int content": dataclasses.replace(GOOD, content=42),  # type: ignore[arg-type]
    "None content": dataclasses.replace(GOOD, content=None),  # type: ignore[arg-type]
    "bytes part": dataclasses.replace(GOOD, content=[b"raw"]),  # type: ignore[list-item]
    "role as a str": dataclasses.replace(GOOD, role="user"),  # type: ignore[arg-type]
    "status as a str": dataclasses.replace(GOOD, status="completed"),  # type: ignore[arg-type]
    "tool message without tool_call_id": Message(role=Role.TOOL, content="sunny"),
    "tool message with empty tool_call_id": Message(role=Role.TOOL, content="sunny", tool_call_id=""),
    "tool calls on a user message": dataclasses.replace(GOOD, tool_calls=(CALL,)),
    "tool call without a name": Message(
        role=Role.ASSISTANT, content="", tool_calls=({"id": "c", "args": {}},)
    ),
    "tool call args as a JSON string": Message(
        role=Role.ASSISTANT, content="", tool_calls=({"id": "c", "name": "f", "args": "{}"},)
    ),
    "metadata as a list": dataclasses.replace(GOOD, metadata=[("k", "v")]),  # type: ignore[arg-type]
    "metadata with an int key": dataclasses.replace(GOOD, metadata={1: "v"}),  # type: ignore[dict-item]
    "NaN in metadata": dataclasses.replace(GOOD, metadata={"score": float("nan")}),
    "an object in metadata": dataclasses.replace(GOOD, metadata={"when": object()}),
    "lone surrogate in name": dataclasses.replace(GOOD, name="bad \ud800"),
    "empty name": dataclasses.replace(GOOD, name=""),
    "NaN timestamp": dataclasses.replace(GOOD, timestamp=float("nan")),
    "negative token count": dataclasses.replace(GOOD, token_count=-1),
}
