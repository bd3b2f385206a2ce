"""Message <-> JSON-safe record, shared by the stores that keep text.

Only JSON is ever stored: nothing read back is unpickled or evaluated. A
record that does not decode raises `StoreError` naming the session and seq,
so one damaged row never takes other sessions down with it.
"""

from __future__ import annotations

import json
from typing import Any

from .._errors import StoreError
from .._message_json import checked_json
from .._models import Message, Role, TurnStatus

__all__ = ["message_from_record", "message_to_record"]


def message_to_record(message: Message, *, seq: int | None = None) -> dict[str, Any]:
    """`message` as a row: JSON text for content, tool calls and metadata (NULL when
    there are none). `seq` replaces ``message.seq`` when given. A message the memory
    checked (see `checked_messages`) is not encoded again: the check kept its JSON."""
    checked = checked_json(message)
    if checked is not None:
        content = checked.content
        tool_calls = checked.tool_calls if message.tool_calls else None
        metadata = checked.metadata if message.metadata else None
    else:
        content = json.dumps(message.content, ensure_ascii=False)
        tool_calls = json.dumps(list(message.tool_calls), ensure_ascii=False) if message.tool_calls else None
        metadata = json.dumps(message.metadata, ensure_ascii=False) if message.metadata else None
    return {
        "seq": message.seq if seq is None else seq,
        "role": message.role.value,
        "content": content,
        "name": message.name,
        "tool_calls": tool_calls,
        "tool_call_id": message.tool_call_id,
        "metadata": metadata,
        "status": message.status.value,
        "ts": message.timestamp,
        "token_count": message.token_count,
        "reply_to_seq": message.reply_to_seq,
    }


_ROLES = {role.value: role for role in Role}
_STATUSES = {status.value: status for status in TurnStatus}


def _decode_content(raw: str) -> Any:
    # Most content is a plain string: a JSON string without a backslash has
    # no escapes, so its text is what lies between the quotes.
    if raw.startswith('"') and raw.endswith('"') and len(raw) >= 2 and "\\" not in raw:
        return raw[1:-1]
    return json.loads(raw)


def message_from_record(record: dict[str, Any], session_id: str) -> Message:
    try:
        content = _decode_content(record["content"])
        tool_calls = json.loads(record["tool_calls"]) if record.get("tool_calls") else []
        metadata = json.loads(record["metadata"]) if record.get("metadata") else {}
        if (
            not isinstance(content, (str, list))
            or not isinstance(tool_calls, list)
            or not isinstance(metadata, dict)
        ):
            raise TypeError("unexpected JSON types")
        return Message(
            role=_ROLES[record["role"]],
            content=content,
            name=record.get("name"),
            tool_calls=tuple(tool_calls),
            tool_call_id=record.get("tool_call_id"),
            metadata=metadata,
            timestamp=float(record["ts"]),
            status=_STATUSES[record["status"]],
            seq=int(record["seq"]),
            token_count=None if record.get("token_count") is None else int(record["token_count"]),
            reply_to_seq=None if record.get("reply_to_seq") is None else int(record["reply_to_seq"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(
            f"stored message seq={record.get('seq')!r} of session {session_id!r} is malformed "
            f"({type(exc).__name__}: {exc}); other sessions are unaffected"
        ) from None
