"""Conversion between LlamaIndex `ChatMessage` and convmem `Message`.

A round trip gives back an equal `ChatMessage`: the role, every content block
(text, images, audio, documents, thinking, ...), tool calls in either of
LlamaIndex's two shapes (``ToolCallBlock`` content blocks, or OpenAI-style
``additional_kwargs["tool_calls"]``) and the other ``additional_kwargs``.

OpenAI's legacy function calling (an assistant message with
``additional_kwargs["function_call"]``, answered by a ``"function"`` message
naming the function) is read as a tool call and its result: the call gets an
id made up when it is converted, and `answer_function_calls` gives the
result that id, from the message right before it, where the legacy protocol
puts the call it answers.

convmem sees the parts it understands: text parts, media parts (counted at a
flat rate), tool calls as ``{"id", "name", "args"}`` (counted, and kept
together with their results when the window is trimmed), ``tool_call_id`` and
``name``. Whatever only LlamaIndex needs back travels in
``Message.metadata["llamaindex"]``.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ContentBlock,
    ImageBlock,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from pydantic import BaseModel, TypeAdapter, ValidationError

from convmem import InvalidMessageError, Message, Role

__all__ = [
    "METADATA_KEY",
    "answer_function_calls",
    "answers_function_call",
    "from_chat_message",
    "from_chat_messages",
    "to_chat_message",
    "to_chat_messages",
]

logger = logging.getLogger("llamaindex_convmem")

METADATA_KEY = "llamaindex"
"""Key of `Message.metadata` holding what only LlamaIndex needs back."""

_CORE_ROLE = {
    MessageRole.SYSTEM: Role.SYSTEM,
    MessageRole.DEVELOPER: Role.SYSTEM,
    MessageRole.USER: Role.USER,
    MessageRole.ASSISTANT: Role.ASSISTANT,
    MessageRole.MODEL: Role.ASSISTANT,
    MessageRole.CHATBOT: Role.ASSISTANT,
    MessageRole.TOOL: Role.TOOL,
    MessageRole.FUNCTION: Role.TOOL,
}
_LLAMAINDEX_ROLE = {role: MessageRole(role.value) for role in Role}
# The made-up id of a call read from additional_kwargs["function_call"] starts with this.
FUNCTION_CALL_ID_PREFIX = "function_call-"
_BLOCK_ADAPTER: TypeAdapter[Any] = TypeAdapter(ContentBlock)


class _NotJSON(Exception):
    pass


def _jsonable(value: Any) -> Any:
    """`value` as plain JSON data (pydantic models dumped, bytes base64), or `_NotJSON`."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    raise _NotJSON(type(value).__name__)


def _parse_args(value: Any) -> tuple[dict[str, Any], str | None]:
    """Tool-call arguments as a dict, plus the raw string when they were given as one."""
    if value is None:
        return {}, None
    if isinstance(value, Mapping):
        return dict(_jsonable(value)), None
    if isinstance(value, str):
        try:
            parsed = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            # Streaming models can leave half-written arguments; keep them as text.
            return {"arguments": value}, value
        if isinstance(parsed, dict):
            return parsed, value
        return {"arguments": parsed}, value
    return {"arguments": _jsonable(value)}, None


def _call_from_kwargs(item: Any) -> dict[str, Any] | None:
    """A convmem tool call from one ``additional_kwargs["tool_calls"]`` entry, any common shape."""
    data = _jsonable(item)
    if not isinstance(data, dict):
        return None
    function = data.get("function")
    if isinstance(function, dict):  # OpenAI
        name = function.get("name")
        args, _ = _parse_args(function.get("arguments"))
    else:  # LlamaIndex ToolSelection, Anthropic tool_use, LangChain
        name = data.get("name") or data.get("tool_name")
        raw = next((data[k] for k in ("args", "input", "tool_kwargs", "arguments") if k in data), None)
        args, _ = _parse_args(raw)
    call_id = data.get("id") or data.get("tool_id") or data.get("tool_call_id")
    if not isinstance(name, str) or not name:
        return None
    return {"id": call_id if isinstance(call_id, str) else None, "name": name, "args": args}


def _block_part(block: Any) -> dict[str, Any]:
    data = block.model_dump(mode="json")
    block_type = data.pop("block_type")
    return {"type": block_type, **data}


def from_chat_message(message: ChatMessage) -> Message:
    """A convmem `Message` for a LlamaIndex `ChatMessage` (unsaved: no seq, no token count).

    Raises `InvalidMessageError` (a `ValueError`) for what convmem cannot store:
    an unknown role, or content convmem cannot store (see `Message.create`).
    """
    if not isinstance(message, ChatMessage):
        raise InvalidMessageError(
            f"expected a llama_index ChatMessage, got {type(message).__name__}: {message!r:.80}"
        )
    try:
        li_role = MessageRole(message.role)
    except ValueError:
        raise InvalidMessageError(
            f"unknown role {message.role!r}; LlamaIndex roles are {[r.value for r in MessageRole]}"
        ) from None
    role = _CORE_ROLE[li_role]
    extra: dict[str, Any] = {}
    if li_role.value != role.value:
        extra["role"] = li_role.value

    kwargs = dict(message.additional_kwargs)
    tool_call_id = kwargs.pop("tool_call_id", None)
    if tool_call_id is not None and not isinstance(tool_call_id, str):
        kwargs["tool_call_id"] = tool_call_id
        tool_call_id = None
    name = kwargs.get("name")
    if isinstance(name, str) and name:
        del kwargs["name"]
    else:
        name = None

    parts: list[dict[str, Any]] = []
    call_blocks: list[ToolCallBlock] = []
    for block in message.blocks:
        if isinstance(block, ToolCallBlock) and role is Role.ASSISTANT:
            call_blocks.append(block)
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        else:
            parts.append(_block_part(block))
    # [] for a message without blocks (e.g. tool calls only), so it comes back without any.
    content: str | list[dict[str, Any]] = (
        parts[0]["text"] if len(parts) == 1 and parts[0]["type"] == "text" else parts
    )

    calls: list[dict[str, Any]] = []
    raw_kwargs: dict[str, str] = {}
    for index, block in enumerate(call_blocks):
        args, raw = _parse_args(block.tool_kwargs)
        calls.append({"id": block.tool_call_id, "name": block.tool_name, "args": args})
        if raw is not None:
            raw_kwargs[str(index)] = raw
    if call_blocks:
        extra["tool_call_blocks"] = len(call_blocks)
    if raw_kwargs:
        extra["raw_tool_kwargs"] = raw_kwargs
    kwarg_calls = kwargs.get("tool_calls")
    # convmem keeps tool calls on assistant messages only; metadata keeps any others.
    if role is Role.ASSISTANT and isinstance(kwarg_calls, (list, tuple)):
        seen = {c["id"] for c in calls if c["id"]}
        for item in kwarg_calls:
            call = _call_from_kwargs(item)
            if call is not None and (call["id"] is None or call["id"] not in seen):
                calls.append(call)

    legacy_call = kwargs.get("function_call")
    if role is Role.ASSISTANT and not calls and legacy_call is not None:
        call = _call_from_kwargs(legacy_call)
        if call is not None:
            # Legacy function calls have no id; the result takes this one (answer_function_calls).
            calls.append({**call, "id": FUNCTION_CALL_ID_PREFIX + uuid.uuid4().hex})

    if role is Role.TOOL and not tool_call_id:
        # LlamaIndex allows a tool or function result without an id; convmem needs one.
        tool_call_id = name or li_role.value
        extra["synthetic_tool_call_id"] = True

    kept: dict[str, Any] = {}
    for key, value in kwargs.items():
        try:
            kept[str(key)] = _jsonable(value)
        except _NotJSON as exc:
            logger.warning(
                "additional_kwargs[%r] of a %s message holds a %s, which cannot be stored; it is dropped",
                key,
                li_role.value,
                exc,
            )
    if kept:
        extra["additional_kwargs"] = kept

    return Message.create(
        role,
        content,
        name=name,
        tool_calls=calls or None,
        tool_call_id=tool_call_id,
        metadata={METADATA_KEY: extra} if extra else None,
    )


def from_chat_messages(messages: Sequence[ChatMessage]) -> list[Message]:
    """`from_chat_message` for each, a legacy function result taking the id of the call
    before it (a first message that is one is left for `answer_function_calls`, which
    finds its call in the log); raises before converting anything if given a single message."""
    if isinstance(messages, (ChatMessage, str, bytes, Mapping)):
        raise InvalidMessageError(
            f"expected a list of ChatMessage, got {type(messages).__name__}; use put() for one message"
        )
    return _answered([from_chat_message(m) for m in messages], None, strict=False)


def answers_function_call(message: Message) -> bool:
    """Whether `message` is the result of a legacy function call (a ``"function"``
    message without a ``tool_call_id``), which answers the message right before it."""
    extra = message.metadata.get(METADATA_KEY)
    return (
        message.role is Role.TOOL
        and isinstance(extra, dict)
        and extra.get("role") == MessageRole.FUNCTION.value
        and bool(extra.get("synthetic_tool_call_id"))
    )


def answer_function_calls(messages: Sequence[Message], before: Message | None = None) -> list[Message]:
    """`messages` (converted, oldest first) with each legacy function result given the id
    of the call it answers: the function_call of the message right before it (`before`,
    the log's newest message, for the first). Raises `InvalidMessageError` for a result
    that follows no function_call of its function."""
    return _answered(messages, before, strict=True)


def _answered(messages: Sequence[Message], before: Message | None, *, strict: bool) -> list[Message]:
    # Not strict: a result whose call is not among `messages` keeps its placeholder id.
    answered: list[Message] = []
    previous = before
    for index, message in enumerate(messages):
        if answers_function_call(message):
            call_id = _function_call_id(previous, message.name)
            if call_id is None and not strict:
                call_id = message.tool_call_id
            if call_id is None:
                follows = "nothing" if previous is None else f"a {previous.role.value} message"
                raise InvalidMessageError(
                    f"message {index} is a 'function' message (OpenAI's legacy function calling) for "
                    f"{message.name!r:.60}, which answers the function_call of the assistant message right "
                    f"before it, but it follows {follows} without that function_call; put the assistant "
                    "message with additional_kwargs['function_call'] right before it (nothing was stored)"
                )
            message = dataclasses.replace(message, tool_call_id=call_id)
        answered.append(message)
        previous = message
    return answered


def _function_call_id(message: Message | None, name: str | None) -> str | None:
    if message is None or message.role is not Role.ASSISTANT:
        return None
    for call in message.tool_calls:
        call_id = call.get("id")
        legacy = isinstance(call_id, str) and call_id.startswith(FUNCTION_CALL_ID_PREFIX)
        if legacy and (name is None or call.get("name") == name):
            return call_id
    return None


def _restore_block(part: Any) -> Any:
    if isinstance(part, str):
        return TextBlock(text=part)
    kind = part.get("type")
    if kind == "text" and isinstance(part.get("text"), str):
        return TextBlock(text=part["text"])
    fields = {k: v for k, v in part.items() if k != "type"}
    try:
        return _BLOCK_ADAPTER.validate_python({"block_type": kind, **fields})
    except ValidationError:
        pass
    # Parts written by other frameworks (e.g. OpenAI's {"type": "image_url", ...}).
    image_url = part.get("image_url")
    if kind == "image_url":
        url = image_url.get("url") if isinstance(image_url, dict) else image_url
        if isinstance(url, str):
            return ImageBlock(url=url)
    return TextBlock(text=json.dumps(part, ensure_ascii=False))


def to_chat_message(message: Message) -> ChatMessage:
    """The LlamaIndex `ChatMessage` for a stored convmem `Message`."""
    if (
        isinstance(message.content, str)
        and not message.metadata
        and not message.tool_calls
        and message.tool_call_id is None
        and message.name is None
    ):  # plain text, most of any history: the short way
        return ChatMessage(role=_LLAMAINDEX_ROLE[message.role], blocks=[TextBlock(text=message.content)])
    extra = message.metadata.get(METADATA_KEY)
    if not isinstance(extra, dict):
        extra = {}
    role = MessageRole(extra.get("role", message.role.value))
    kwargs: dict[str, Any] = dict(extra.get("additional_kwargs") or {})
    if message.tool_call_id is not None and not extra.get("synthetic_tool_call_id"):
        kwargs["tool_call_id"] = message.tool_call_id
    if message.name is not None:
        kwargs["name"] = message.name

    content = message.content
    blocks: list[Any]
    if isinstance(content, str):
        # A tool-call message written by other code has "" for content: no text block.
        foreign_empty = not content and message.tool_calls and METADATA_KEY not in message.metadata
        blocks = [] if foreign_empty else [TextBlock(text=content)]
    else:
        blocks = [_restore_block(p) for p in content]
    block_calls = int(extra.get("tool_call_blocks", 0))
    if "tool_call_blocks" not in extra and "tool_calls" not in kwargs and "function_call" not in kwargs:
        block_calls = len(message.tool_calls)  # written by other code: LlamaIndex 0.14's native shape
    raw_kwargs = extra.get("raw_tool_kwargs") or {}
    for index, call in enumerate(message.tool_calls[:block_calls]):
        raw = raw_kwargs.get(str(index))
        blocks.append(
            ToolCallBlock(
                tool_call_id=call.get("id"),
                tool_name=call["name"],
                tool_kwargs=raw if raw is not None else dict(call.get("args") or {}),
            )
        )
    return ChatMessage(role=role, blocks=blocks, additional_kwargs=kwargs)


def to_chat_messages(messages: Sequence[Message]) -> list[ChatMessage]:
    """`to_chat_message` for each, in order."""
    return [to_chat_message(m) for m in messages]
