"""A message's fields as the JSON a store writes, measured and encoded once.

`validate_message` measures a message with these (nesting, then UTF-8 JSON
size) and keeps the JSON it encoded (`MessageJSON`). The memory checks each
message once, where it comes in, and writes it within `checked_messages`:
inside that block a store's `validate_messages` and the record codec find the
message by identity (`checked_json`) and neither check nor encode it again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ._errors import InvalidMessageError

__all__ = [
    "MAX_CONTENT_DEPTH",
    "MessageJSON",
    "checked_json",
    "checked_messages",
    "encoded",
    "scan_size",
    "too_large",
    "utf8_size",
]

# Deeper nesting than this is not a chat message; refusing it keeps JSON
# encoding and decoding far away from the interpreter's recursion limit.
MAX_CONTENT_DEPTH = 32


@dataclasses.dataclass(frozen=True)
class MessageJSON:
    """The JSON of a checked message's fields, as a store writes them.

    ``tool_calls`` is ``"[]"`` and ``metadata`` ``"{}"`` when the message has none.
    """

    content: str
    tool_calls: str
    metadata: str


# The messages a `checked_messages` block vouches for, by id; each entry holds its
# message, so an id cannot be reused by another object while it is listed.
_vouched: ContextVar[dict[int, tuple[object, MessageJSON]] | None] = ContextVar(
    "convmem_checked_messages", default=None
)


@contextmanager
def checked_messages(checked: Iterable[tuple[object, MessageJSON]]) -> Iterator[None]:
    """Within the block, `checked_json` returns the JSON of each of these message objects.

    Only these very objects are vouched for: a copy, even an equal one, is
    checked again like any message a store is given.
    """
    token = _vouched.set({id(message): (message, json_fields) for message, json_fields in checked})
    try:
        yield
    finally:
        _vouched.reset(token)


def checked_json(message: object) -> MessageJSON | None:
    """What the check made of `message`, if a `checked_messages` block vouches for it."""
    vouched = _vouched.get()
    if vouched is None:
        return None
    entry = vouched.get(id(message))
    return entry[1] if entry is not None and entry[0] is message else None


def scan_size(value: Any, what: str, depth: int) -> int:
    """Characters in `value`'s strings and keys; refuses nesting deeper than `MAX_CONTENT_DEPTH`."""
    if isinstance(value, str):
        return len(value)
    if depth > MAX_CONTENT_DEPTH:
        raise InvalidMessageError(
            f"{what} is nested more than {MAX_CONTENT_DEPTH} levels deep; flatten the parts"
        )
    if isinstance(value, dict):
        return sum(len(str(key)) + scan_size(item, what, depth + 1) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return sum(scan_size(item, what, depth + 1) for item in value)
    return 1


def encoded(value: Any, what: str) -> str:
    """`value` as a store writes it (JSON); refuses what could not be read back."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidMessageError(f"{what} must be JSON-serializable: {exc}") from None


def utf8_size(text: str, what: str) -> int:
    """Bytes of `text` in UTF-8; refuses a lone UTF-16 surrogate, which no store can keep."""
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"{what} contains text that is not valid UTF-8 (a lone UTF-16 surrogate at "
            f"position {exc.start}); decode the source with errors='replace' first"
        ) from None


def too_large(role: str, size: str, max_bytes: int) -> InvalidMessageError:
    return InvalidMessageError(
        f"a {role} message is {size} bytes serialized (content, tool calls and metadata); the limit "
        f"is max_message_bytes={max_bytes}. Raise it in MemoryConfig, or store large files "
        "elsewhere and keep a reference (a URL or an id) in the message"
    )
