"""Conversion between LangChain messages and convmem messages, both ways, without loss.

A LangChain message becomes a convmem `Message` with the same role, content
(a string or a list of content blocks), name, tool calls and tool call id. The
fields convmem has no column for (``id``, ``additional_kwargs``,
``response_metadata``, ``usage_metadata``, ``invalid_tool_calls``, a tool
message's ``artifact`` and ``status``, a `ChatMessage`'s role) travel in the
message's metadata under ``"langchain"`` and come back when the message is
converted back, so a message read from the store compares equal to the one
that was written. Values JSON has no type for (a tool's `Document` artifacts,
datetimes, bytes, pydantic models) are stored tagged: see `_serialize`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    BaseMessageChunk,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    message_chunk_to_message,
)

from convmem import BuiltContext, InvalidMessageError, Message, Role, TurnStatus
from convmem.integration import chat_api_message, group_turns

from ._serialize import from_storable, to_storable

__all__ = [
    "CONTEXT_MESSAGE_ID",
    "LANGCHAIN_METADATA_KEY",
    "MEMORY_MESSAGE_ID",
    "context_to_langchain",
    "fallback_message_id",
    "from_convmem_message",
    "latest_human_text",
    "stored_message_id",
    "to_convmem_message",
    "to_convmem_messages",
    "to_convmem_role",
]

LANGCHAIN_METADATA_KEY = "langchain"
CONTEXT_MESSAGE_ID = "convmem-context"
"""Id that earlier releases gave the context message they put in agent state (never logged)."""
MEMORY_MESSAGE_ID = "convmem-memory"
"""Id of the message that carries facts, summary and recalled turns in a model request."""

_SUPPORTED = "HumanMessage, AIMessage, SystemMessage, ToolMessage or ChatMessage"
_CHAT_ROLES = {
    "user": Role.USER,
    "human": Role.USER,
    "assistant": Role.ASSISTANT,
    "ai": Role.ASSISTANT,
    "system": Role.SYSTEM,
    "developer": Role.SYSTEM,
}


def to_convmem_role(chat_role: str) -> Role:
    """The convmem role a `ChatMessage` role is stored and counted as.

    LangChain lets a `ChatMessage` carry any role (``"critic"``, ``"narrator"``,
    another agent's name); one that names no user or system role is a speaker
    other than the user, so it joins the turn as an assistant message would.
    The role itself is kept and comes back on the way out.
    """
    return _CHAT_ROLES.get(chat_role.strip().lower(), Role.ASSISTANT)


def to_convmem_message(
    message: BaseMessage,
    *,
    status: TurnStatus | str = TurnStatus.COMPLETED,
    reply_to_seq: int | None = None,
) -> Message:
    """Convert a LangChain message to an unsaved convmem `Message`.

    Chunks (e.g. the ``AIMessageChunk`` a stream adds up to) are stored as the
    complete message. ``reply_to_seq`` files an answer or a tool step under the
    question stored with that seq (see `Message`). Raises `InvalidMessageError`
    for anything that is not a human, AI, system, tool or chat message, and for
    ``None`` content.
    """
    if not isinstance(message, BaseMessage):
        raise InvalidMessageError(
            f"expected a LangChain message ({_SUPPORTED}), got {type(message).__name__}: "
            f"{message!r:.80}; convert dicts, tuples and strings with "
            "langchain_core.messages.convert_to_messages first"
        )
    kind = type(message).__name__
    if isinstance(message, BaseMessageChunk):
        message = message_chunk_to_message(message)
    if message.content is None:
        raise InvalidMessageError(
            f"{kind} content is None; use a string (it may be empty for an AI message) "
            "or a list of content blocks"
        )
    extras: dict[str, Any] = {}
    if message.id is not None:
        extras["id"] = message.id
    if message.additional_kwargs:
        extras["additional_kwargs"] = to_storable(message.additional_kwargs, f"{kind}.additional_kwargs")
    if message.response_metadata:
        extras["response_metadata"] = to_storable(message.response_metadata, f"{kind}.response_metadata")
    tool_calls: list[dict[str, Any]] = []
    tool_call_id: str | None = None
    if isinstance(message, AIMessage):
        role = Role.ASSISTANT
        tool_calls = [{"id": c.get("id"), "name": c["name"], "args": c["args"]} for c in message.tool_calls]
        if message.invalid_tool_calls:
            extras["invalid_tool_calls"] = to_storable(
                [dict(c) for c in message.invalid_tool_calls], f"{kind}.invalid_tool_calls"
            )
        if message.usage_metadata is not None:
            extras["usage_metadata"] = to_storable(dict(message.usage_metadata), f"{kind}.usage_metadata")
    elif isinstance(message, HumanMessage):
        role = Role.USER
    elif isinstance(message, SystemMessage):
        role = Role.SYSTEM
    elif isinstance(message, ToolMessage):
        role = Role.TOOL
        tool_call_id = message.tool_call_id
        if message.artifact is not None:
            extras["artifact"] = to_storable(message.artifact, f"{kind}.artifact")
        if message.status != "success":
            extras["status"] = message.status
    elif isinstance(message, ChatMessage):
        if not isinstance(message.role, str) or not message.role.strip():
            raise InvalidMessageError(
                f"ChatMessage role must be a non-empty str (any role, e.g. 'critic'), got {message.role!r:.60}"
            )
        role = to_convmem_role(message.role)
        extras["chat_role"] = message.role
    else:
        raise InvalidMessageError(
            f"cannot store a {kind} (type {message.type!r}) in a conversation memory; "
            f"supported: {_SUPPORTED} (a FunctionMessage is the legacy form of a ToolMessage)"
        )
    metadata = {LANGCHAIN_METADATA_KEY: extras} if extras else None
    try:
        return Message.create(
            role,
            message.content,
            name=message.name,
            tool_calls=tool_calls or None,
            tool_call_id=tool_call_id,
            metadata=metadata,
            status=status,
            reply_to_seq=reply_to_seq,
        )
    except InvalidMessageError as exc:
        raise InvalidMessageError(f"{kind} rejected: {exc}") from None


def to_convmem_messages(
    messages: Iterable[BaseMessage], *, status: TurnStatus | str = TurnStatus.COMPLETED
) -> list[Message]:
    """Convert several messages; validates all of them before anything is stored."""
    if isinstance(messages, (BaseMessage, str, bytes, Mapping)):
        raise InvalidMessageError(
            f"expected a list of LangChain messages, got a single {type(messages).__name__}; wrap it in a list"
        )
    return [to_convmem_message(m, status=status) for m in messages]


def from_convmem_message(message: Message) -> BaseMessage:
    """Convert a convmem `Message` (e.g. read from a store) back to a LangChain message.

    The result shares nothing mutable with `message`, so changing it cannot
    change what the memory holds.
    """
    extras: Mapping[str, Any] = message.metadata.get(LANGCHAIN_METADATA_KEY) or {}
    fields: dict[str, Any] = {
        "content": _copy(message.content),
        "name": message.name,
        "id": extras.get("id"),
        "additional_kwargs": from_storable(extras.get("additional_kwargs") or {}),
        "response_metadata": from_storable(extras.get("response_metadata") or {}),
    }
    chat_role = extras.get("chat_role")
    if isinstance(chat_role, str):
        return ChatMessage(role=chat_role, **fields)
    if message.role is Role.USER:
        return HumanMessage(**fields)
    if message.role is Role.SYSTEM:
        return SystemMessage(**fields)
    if message.role is Role.TOOL:
        return ToolMessage(
            tool_call_id=message.tool_call_id or "",
            artifact=from_storable(extras.get("artifact")),
            status=extras.get("status", "success"),
            **fields,
        )
    ai_fields: dict[str, Any] = {
        "tool_calls": [
            {
                "id": c.get("id"),
                "name": c["name"],
                "args": _copy(c.get("args", {})),
                "type": "tool_call",
            }
            for c in message.tool_calls
        ],
        "invalid_tool_calls": _copy(extras.get("invalid_tool_calls") or []),
    }
    if extras.get("usage_metadata") is not None:
        ai_fields["usage_metadata"] = _copy(extras["usage_metadata"])
    return AIMessage(**fields, **ai_fields)


def _copy(value: Any) -> Any:
    # The memory hands out its own objects: a copy keeps callers from changing the log.
    return copy.deepcopy(value)


def stored_message_id(message: Message) -> str | None:
    """The LangChain id a stored message was written with, if any."""
    extras = message.metadata.get(LANGCHAIN_METADATA_KEY) or {}
    value = extras.get("id")
    return value if isinstance(value, str) else None


def fallback_message_id(seq: int | None) -> str:
    """A stable id for a stored message written without a LangChain id."""
    return f"convmem-seq-{seq}"


def context_to_langchain(
    context: BuiltContext,
    *,
    system_message_id: str | None = None,
    stable_ids: bool = False,
    turn: int | None = None,
) -> list[BaseMessage]:
    """The managed context as LangChain messages, without the query.

    A leading `SystemMessage` carries the system prompt, facts, summary and
    recalled turns (when there are any); the recent window follows, each
    message exactly as it was stored. With ``stable_ids``, a message stored
    without a LangChain id gets ``convmem-seq-<seq>`` and the memory message
    `MEMORY_MESSAGE_ID`. With `turn` (the seq of the question being answered),
    turns that other requests started after it are left out, so the model
    answers this question and not one asked meanwhile.
    """
    messages: list[BaseMessage] = []
    if context.system_text:
        messages.append(SystemMessage(content=context.system_text, id=system_message_id))
    memory_id = f"{system_message_id}-memory" if system_message_id else None
    memory = memory_message(context, MEMORY_MESSAGE_ID if stable_ids and memory_id is None else memory_id)
    if memory is not None:
        messages.append(memory)
    later = _started_after(context.window, turn) if turn is not None else set()
    for stored in context.window:
        if stored.seq in later:
            continue
        message = from_convmem_message(chat_api_message(stored))
        if stable_ids and message.id is None:
            message.id = fallback_message_id(stored.seq)
        messages.append(message)
    return messages


def _started_after(window: Iterable[Message], turn: int) -> set[int | None]:
    """Seqs of the window's messages that belong to turns whose question came after seq `turn`."""
    return {
        message.seq
        for stored_turn in group_turns(list(window))
        if stored_turn.messages[0].role is Role.USER and (stored_turn.messages[0].seq or 0) > turn
        for message in stored_turn.messages
    }


def memory_message(context: BuiltContext, message_id: str | None) -> BaseMessage | None:
    """The delimited memory message (facts, summary, recalled turns), or None.

    With the default ``memory_placement="user"`` it is a `HumanMessage`; with
    ``"developer"`` a `SystemMessage` that OpenAI models receive in the developer
    role; with ``"system"`` the memory is already part of the system message.
    """
    memory = context.memory_message
    if memory is None:
        return None
    if memory["role"] == "developer":
        return SystemMessage(
            content=memory["content"], id=message_id, additional_kwargs={"__openai_role__": "developer"}
        )
    return HumanMessage(content=memory["content"], id=message_id)


def latest_human_text(messages: Iterable[BaseMessage]) -> str | None:
    """The text of the last human message, the query that recall searches for."""
    text = None
    for message in messages:
        if isinstance(message, HumanMessage) or (
            isinstance(message, ChatMessage) and to_convmem_role(message.role) is Role.USER
        ):
            text = str(message.text) or None
    return text
