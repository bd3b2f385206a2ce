"""The domain model: roles, turn statuses, messages and turns.

A `Message` is immutable. `Message.create` normalizes and validates its
fields; `validate_message` holds the rules themselves, and every store runs it
again on append, because a `Message` built with its constructor or changed with
`dataclasses.replace` never went through `create` (the memory checks a message
once, where it comes in, and vouches for it on its way to the store: see
`convmem._message_json`). The store only adds `seq` (its position in the
session's log); the memory adds `token_count` (counted once, on write).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from typing import Any, cast

from ._errors import InvalidMessageError
from ._message_json import MAX_CONTENT_DEPTH as MAX_CONTENT_DEPTH
from ._message_json import MessageJSON, encoded, scan_size, too_large, utf8_size

__all__ = [
    "Content",
    "ContentPart",
    "Message",
    "Role",
    "ToolCall",
    "Turn",
    "TurnStatus",
    "group_turns",
    "validate_message",
]

ContentPart = str | dict[str, Any]
Content = str | list[ContentPart]
ToolCall = dict[str, Any]


class Role(str, Enum):
    """Who wrote a message. Parsed from the enum or its name, case-insensitively."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"

    @classmethod
    def parse(cls, value: Role | str) -> Role:
        """Return the role for `value` (``"user"``, ``"USER"``, ``Role.USER``, or the
        LangChain aliases ``"human"`` and ``"ai"``)."""
        if isinstance(value, Role):
            return value
        if isinstance(value, str):
            role = _ROLES_BY_NAME.get(value.strip().lower())
            if role is not None:
                return role
        raise InvalidMessageError(
            f"role must be one of {[r.value for r in cls]} (or 'human'/'ai'), got {value!r}"
        )


_ROLE_ALIASES = {"human": "user", "ai": "assistant", "function": "tool"}
# Every message written parses its role: one lookup, aliases included.
_ROLES_BY_NAME = {role.value: role for role in Role} | {
    alias: Role(value) for alias, value in _ROLE_ALIASES.items()
}


class TurnStatus(str, Enum):
    """The state of a conversational turn (a question and its answer)."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @classmethod
    def parse(cls, value: TurnStatus | str) -> TurnStatus:
        """Return the status for `value`: the enum, or its name in any case."""
        if isinstance(value, TurnStatus):
            return value
        if isinstance(value, str):
            key = value.strip().lower()
            for status in cls:
                if status.value == key:
                    return status
        raise InvalidMessageError(f"status must be one of {[s.name for s in cls]} (any case), got {value!r}")


# Epoch seconds a date can be made of in any time zone: years 1 to 9999, a day kept from each end.
MIN_TIMESTAMP = -62135510400.0  # 2 January 1, UTC
MAX_TIMESTAMP = 253402128000.0  # 30 December 9999, UTC


def _timestamp(value: float | int | datetime | None) -> float:
    if value is None:
        return time.time()
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.timestamp()  # its range is checked with the message's (`check_message`)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise InvalidMessageError(
        f"timestamp must be a datetime or epoch seconds (a finite number), got {value!r}"
    )


def check_timestamp(timestamp: float) -> None:
    """Refuse epoch seconds no date is made of: milliseconds (``Date.now()``,
    ``time.time() * 1000``) are a date tens of thousands of years ahead."""
    if not MIN_TIMESTAMP <= timestamp <= MAX_TIMESTAMP:
        hint = (
            f" (in milliseconds? {timestamp / 1000:.0f} is in seconds)"
            if timestamp > MAX_TIMESTAMP and timestamp / 1000 <= MAX_TIMESTAMP
            else ""
        )
        raise InvalidMessageError(
            f"timestamp must be epoch seconds from {MIN_TIMESTAMP:.0f} to {MAX_TIMESTAMP:.0f} "
            f"(years 1 to 9999), got {timestamp!r:.40}{hint}"
        )


def _normalize_content(content: Any) -> Content:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts: list[ContentPart] = []
        for index, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                parts.append(dict(part))
            else:
                raise InvalidMessageError(
                    f"content part {index} must be a str or a dict, got {type(part).__name__}"
                )
        return parts
    raise InvalidMessageError(
        "content must be a str or a list of parts (str or dict), "
        f"got {type(content).__name__}: {content!r:.80}"
    )


def _normalize_tool_call(call: Any, index: int) -> ToolCall:
    if not isinstance(call, Mapping):
        raise InvalidMessageError(
            f"tool_calls[{index}] must be a dict like {{'id', 'name', 'args'}}, got {call!r:.80}"
        )
    if "function" in call:  # OpenAI's shape
        function = call["function"]
        if not isinstance(function, Mapping) or "name" not in function:
            raise InvalidMessageError(f"tool_calls[{index}]['function'] must have a 'name'")
        name = function["name"]
        args: Any = function.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args) if args.strip() else {}
            except json.JSONDecodeError as exc:
                raise InvalidMessageError(
                    f"tool_calls[{index}] arguments are not valid JSON ({exc.msg}): {args!r:.80}"
                ) from None
    else:
        name = call.get("name")
        args = call.get("args", {})
    call_id = call.get("id")
    if not isinstance(name, str) or not name:
        raise InvalidMessageError(f"tool_calls[{index}] needs a non-empty 'name', got {name!r}")
    if call_id is not None and not isinstance(call_id, str):
        raise InvalidMessageError(f"tool_calls[{index}]['id'] must be a str, got {call_id!r}")
    if not isinstance(args, Mapping):
        raise InvalidMessageError(f"tool_calls[{index}] args must be a dict, got {type(args).__name__}")
    return {"id": call_id, "name": name, "args": dict(args)}


@dataclasses.dataclass(frozen=True)
class Message:
    """One entry of a conversation log.

    Build one with :meth:`create`, which validates and normalizes its fields::

        Message.create("user", "My dog is called Duoduo.")
        Message.create("assistant", "", tool_calls=[{"id": "c1", "name": "weather", "args": {}}])
        Message.create("tool", "sunny", tool_call_id="c1")

    ``seq`` and ``token_count`` are ``None`` until a store has written the message.

    ``reply_to_seq`` is the seq of the question an answer (or a tool step)
    belongs to. Leave it None when the answer is written right after its
    question; set it when the question was stored first and other turns may
    have been stored in between (two tabs, a double submit), so the answer is
    paired with its own question and not with the newest one::

        question = memory.add("user", "Q1", status="running")
        ...
        memory.add("assistant", "A1", reply_to_seq=question.seq)
    """

    role: Role
    content: Content
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)
    timestamp: float = 0.0
    status: TurnStatus = TurnStatus.COMPLETED
    seq: int | None = None
    token_count: int | None = None
    reply_to_seq: int | None = None

    @classmethod
    def create(
        cls,
        role: Role | str,
        content: Any,
        *,
        name: str | None = None,
        tool_calls: Iterable[Mapping[str, Any]] | None = None,
        tool_call_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timestamp: float | int | datetime | None = None,
        status: TurnStatus | str = TurnStatus.COMPLETED,
        reply_to_seq: int | None = None,
    ) -> Message:
        """Validate the fields and return a new, unsaved message.

        Rules (checked by `validate_message`): content is text, a str or a list
        of parts (str, or dict such as ``{"type": "image_url", ...}``); it may be
        empty for every role, as in LangChain (``HumanMessage("")``) and the chat
        APIs. ``None`` content is accepted only for an assistant message that
        carries tool calls or did not complete (it becomes ``""``). A tool message
        needs ``tool_call_id``. Raises :class:`InvalidMessageError` naming the
        field that is wrong.
        """
        return validate_message(
            _normalized(
                cls,
                role,
                content,
                name=name,
                tool_calls=tool_calls,
                tool_call_id=tool_call_id,
                metadata=metadata,
                timestamp=timestamp,
                status=status,
                reply_to_seq=reply_to_seq,
            )
        )

    @property
    def text(self) -> str:
        """The message's text: the content string, or its text parts joined by newlines."""
        return content_text(self.content)

    @property
    def has_tool_calls(self) -> bool:
        """True when the message asks for tool calls (an assistant message awaiting tool results)."""
        return bool(self.tool_calls)

    def to_dict(self) -> dict[str, Any]:
        """A chat-API style dict: role and content, plus tool fields and name when set."""
        out: dict[str, Any] = {"role": self.role.value, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [dict(c) for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out


def normalized_message(role: Role | str, content: Any, **fields: Any) -> Message:
    """A `Message` built as `Message.create` builds it, but not yet checked by
    `validate_message`: for a caller that checks it next, with its limits."""
    return _normalized(Message, role, content, **fields)


def _normalized(
    cls: type[Message],
    role: Role | str,
    content: Any,
    *,
    name: str | None = None,
    tool_calls: Iterable[Mapping[str, Any]] | None = None,
    tool_call_id: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    timestamp: float | int | datetime | None = None,
    status: TurnStatus | str = TurnStatus.COMPLETED,
    reply_to_seq: int | None = None,
) -> Message:
    parsed_role = Role.parse(role)
    parsed_status = TurnStatus.parse(status)
    if tool_calls is not None and not isinstance(tool_calls, (list, tuple)):
        raise InvalidMessageError(f"tool_calls must be a list of dicts, got {type(tool_calls).__name__}")
    calls = tuple(_normalize_tool_call(c, i) for i, c in enumerate(tool_calls or ()))
    if content is None:
        if not (parsed_role is Role.ASSISTANT and (calls or parsed_status is not TurnStatus.COMPLETED)):
            raise InvalidMessageError(
                f'content of a {parsed_role.value} message must not be None; use "" for an empty '
                "message (None stands for no content only on an assistant message with tool_calls, "
                "or an unfinished one)"
            )
        content = ""
    if metadata is not None and not isinstance(metadata, Mapping):
        raise InvalidMessageError(f"metadata must be a dict or None, got {type(metadata).__name__}")
    return cls(
        role=parsed_role,
        content=_normalize_content(content),
        name=name,
        tool_calls=calls,
        tool_call_id=tool_call_id,
        metadata=dict(metadata or {}),
        timestamp=_timestamp(timestamp),
        status=parsed_status,
        reply_to_seq=reply_to_seq,
    )


def content_text(content: Content) -> str:
    """The text of a content value; non-text parts (images, audio) contribute nothing."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if isinstance(part, str):
            texts.append(part)
        elif part.get("type") == "text" and isinstance(part.get("text"), str):
            texts.append(part["text"])
    return "\n".join(texts)


def validate_message(
    message: object, *, max_chars: int | None = None, max_bytes: int | None = None
) -> Message:
    """Return `message` if a store can keep it and give it back unchanged; else raise `InvalidMessageError`.

    `Message.create` ends with this check, and every store's ``append`` runs it
    again before writing anything: a `Message` built with its constructor or
    changed with `dataclasses.replace` skipped `create`, and one bad row would
    make every later read of its session fail. Nothing is normalized here
    (build messages with `Message.create` for that). The rules:

    - ``role`` is a `Role`, ``status`` a `TurnStatus`, ``timestamp`` epoch seconds of years 1 to 9999;
    - ``content`` is a str (possibly empty) or a list of parts, each a str or a
      dict (e.g. ``{"type": "image_url", ...}``), nested at most
      ``MAX_CONTENT_DEPTH`` levels;
    - only an assistant message has ``tool_calls``, each ``{"id": str | None,
      "name": str, "args": dict}``; a tool message has a non-empty
      ``tool_call_id``; ``name`` is None or a non-empty str;
    - ``metadata`` is a dict with str keys; ``token_count`` is None or an int >= 0;
    - ``reply_to_seq`` is None or an int >= 1, and never on a user message (a
      question starts a turn; it answers none);
    - everything is JSON (no NaN, sets or objects) and valid UTF-8 (no lone surrogates).

    The limits (``MemoryConfig.max_message_chars`` and ``max_message_bytes``):
    with `max_chars`, the text (`Message.text`) must be at most that many
    characters; with `max_bytes`, the message serialized as a store keeps it
    (content, tool calls and metadata as UTF-8 JSON, plus name and ids) must be
    at most that many bytes. An oversized message is refused before it is
    encoded in full.

        validate_message(Message.create("user", "hi"))  # returns the message
    """
    check_message(message, max_chars=max_chars, max_bytes=max_bytes)
    return cast(Message, message)  # check_message refuses anything else


def is_token_count(value: object) -> bool:
    """Whether `value` is a token count a message may carry: an int >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_message(
    message: object, *, max_chars: int | None = None, max_bytes: int | None = None
) -> MessageJSON:
    """`validate_message`, returning the JSON it encoded the message's fields into."""
    if not isinstance(message, Message):
        raise InvalidMessageError(
            f"expected a convmem Message, got {type(message).__name__}: {message!r:.80}"
        )
    if not isinstance(message.role, Role):
        raise InvalidMessageError(
            f"role must be a Role, got {message.role!r:.80}; build it with Message.create"
        )
    role = message.role.value
    if not isinstance(message.status, TurnStatus):
        raise InvalidMessageError(f"status must be a TurnStatus, got {message.status!r:.80}")
    timestamp = message.timestamp
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or not math.isfinite(timestamp):
        raise InvalidMessageError(f"timestamp must be finite epoch seconds, got {timestamp!r:.80}")
    check_timestamp(timestamp)
    token_count = message.token_count
    if token_count is not None and not is_token_count(token_count):
        raise InvalidMessageError(f"token_count must be None or an int >= 0, got {token_count!r:.80}")
    reply_to_seq = message.reply_to_seq
    if reply_to_seq is not None:
        if isinstance(reply_to_seq, bool) or not isinstance(reply_to_seq, int) or reply_to_seq < 1:
            raise InvalidMessageError(
                f"reply_to_seq must be None or the seq (an int >= 1) of a stored question, got {reply_to_seq!r:.80}"
            )
        if message.role is Role.USER:
            raise InvalidMessageError(
                f"a user message starts a turn and answers none; reply_to_seq={reply_to_seq} belongs on "
                "the assistant and tool messages that answer that question"
            )
    if message.name is not None and (not isinstance(message.name, str) or not message.name):
        raise InvalidMessageError(f"name must be a non-empty str or None, got {message.name!r:.80}")
    if message.role is Role.TOOL:
        if not isinstance(message.tool_call_id, str) or not message.tool_call_id:
            raise InvalidMessageError(
                f"a tool message needs the tool_call_id of the call it answers, got {message.tool_call_id!r:.80}"
            )
    elif message.tool_call_id is not None and not isinstance(message.tool_call_id, str):
        raise InvalidMessageError(f"tool_call_id must be a str, got {message.tool_call_id!r:.80}")

    content = message.content
    if isinstance(content, list):
        for index, part in enumerate(content):
            if not isinstance(part, (str, dict)):
                raise InvalidMessageError(
                    f"content part {index} of a {role} message must be a str or a dict, got {type(part).__name__}"
                )
    elif not isinstance(content, str):
        raise InvalidMessageError(
            f"content of a {role} message must be a str or a list of parts (str or dict), "
            f"got {type(content).__name__}: {content!r:.80}"
        )
    calls = message.tool_calls
    if not isinstance(calls, (tuple, list)):
        raise InvalidMessageError(f"tool_calls must be a tuple of dicts, got {type(calls).__name__}")
    if calls and message.role is not Role.ASSISTANT:
        raise InvalidMessageError(f"only assistant messages carry tool_calls, not {role}")
    for index, call in enumerate(calls):
        if (
            not isinstance(call, dict)
            or not isinstance(call.get("name"), str)
            or not call["name"]
            or not isinstance(call.get("id"), (str, type(None)))
            or not isinstance(call.get("args"), dict)
        ):
            raise InvalidMessageError(
                f"tool_calls[{index}] must be a dict {{'id': str | None, 'name': str, 'args': dict}}, "
                f"got {call!r:.80}; build tool calls with Message.create"
            )
    if not isinstance(message.metadata, dict):
        raise InvalidMessageError(f"metadata must be a dict, got {type(message.metadata).__name__}")
    if any(not isinstance(key, str) for key in message.metadata):
        raise InvalidMessageError("metadata keys must be strings")

    if max_chars is not None:
        chars = len(content) if isinstance(content, str) else len(content_text(content))
        if chars > max_chars:
            raise InvalidMessageError(
                f"a {role} message is {chars} characters long; the limit is max_message_chars="
                f"{max_chars} (raise it in MemoryConfig, or store large documents elsewhere and "
                "keep a reference)"
            )
    # Every character takes at least one byte, so the characters counted while
    # checking the nesting refuse a huge message before any JSON is built.
    size = (
        scan_size(content, "content", depth=0)
        + scan_size(calls, "tool_calls", depth=0)
        + scan_size(message.metadata, "metadata", depth=0)
        + scan_size(message.name, "name", depth=0)
        + scan_size(message.tool_call_id, "tool_call_id", depth=0)
    )
    if max_bytes is not None and size > max_bytes:
        raise too_large(role, f"at least {size}", max_bytes)
    # Empty tool calls and metadata are "[]" and "{}", and None is "null": only what
    # holds text is encoded, and the JSON is kept for the store that writes it next.
    content_json = encoded(content, "content")
    size = utf8_size(content_json, "content")
    calls_json = encoded(list(calls), "tool_calls") if calls else "[]"
    size += utf8_size(calls_json, "tool_calls")
    metadata_json = encoded(message.metadata, "metadata") if message.metadata else "{}"
    size += utf8_size(metadata_json, "metadata")
    if message.name is not None:
        size += utf8_size(encoded(message.name, "name"), "name")
    else:
        size += 4  # null
    if message.tool_call_id is not None:
        size += utf8_size(encoded(message.tool_call_id, "tool_call_id"), "tool_call_id")
    else:
        size += 4
    if max_bytes is not None and size > max_bytes:
        raise too_large(role, str(size), max_bytes)
    return MessageJSON(content_json, calls_json, metadata_json)


@dataclasses.dataclass(frozen=True)
class Turn:
    """A user question and everything that answered it.

    ``messages`` holds the question first (when there is one), then assistant
    and tool messages, oldest first (see `group_turns` for which messages
    belong to which question). A turn's status is the status of its last
    assistant message, or of the question when nothing answered it yet.
    """

    messages: tuple[Message, ...]

    @property
    def question(self) -> Message | None:
        """The user message that opened the turn; ``None`` for messages before the first question."""
        first = self.messages[0]
        return first if first.role is Role.USER else None

    @property
    def answer(self) -> Message | None:
        """The last assistant message that is not a tool call request."""
        for message in reversed(self.messages):
            if message.role is Role.ASSISTANT and not message.tool_calls:
                return message
        return None

    @property
    def status(self) -> TurnStatus:
        """Its last assistant message's status, or the question's while nothing answered it."""
        for message in reversed(self.messages):
            if message.role is Role.ASSISTANT:
                return message.status
        return self.messages[0].status

    @functools.cached_property
    def token_count(self) -> int:
        """The stored token counts of its messages, summed once (a window re-reads it often)."""
        return sum(m.token_count or 0 for m in self.messages)

    @property
    def first_seq(self) -> int:
        """The seq of its first message (0 for messages not stored yet)."""
        return self.messages[0].seq or 0

    @property
    def last_seq(self) -> int:
        """The seq of its last message (0 for messages not stored yet)."""
        return self.messages[-1].seq or 0


def group_turns(messages: Sequence[Message]) -> list[Turn]:
    """Split a log (oldest first) into turns; a turn starts at each user message.

    An assistant or tool message joins the turn of the question its
    ``reply_to_seq`` names, a tool result the turn of the call it answers, and
    any other message the turn of the newest question before it. So when two
    turns interleave (Q1, Q2, A2, A1), A1 still pairs with Q1. Messages before
    the first user message form a leading turn of their own, as does a
    message answering a question that is not in `messages` (its turn has no
    question). Turns are in the order their first message was written.
    """
    turns: list[list[Message]] = []
    questions: dict[int, list[Message]] = {}
    calls: dict[str, list[Message]] = {}
    current: list[Message] | None = None
    for message in messages:
        if message.role is Role.USER:
            current = [message]
            turns.append(current)
            if message.seq is not None:
                questions[message.seq] = current
            continue
        target: list[Message] | None
        if message.reply_to_seq is not None:
            target = questions.get(message.reply_to_seq)
            if target is None:  # its question is older than `messages`
                target = [message]
                turns.append(target)
                _note_calls(calls, message, target)
                continue
        elif message.role is Role.TOOL and message.tool_call_id in calls:
            target = calls[message.tool_call_id]
        else:
            target = current
        if target is None:  # before the first question
            current = target = []
            turns.append(target)
        target.append(message)
        _note_calls(calls, message, target)
    return [Turn(tuple(turn)) for turn in turns]


def _note_calls(calls: dict[str, list[Message]], message: Message, turn: list[Message]) -> None:
    for call in message.tool_calls:
        if isinstance(call.get("id"), str):
            calls[call["id"]] = turn
