"""How a session's ids, messages, counters and state records are written in Redis, and read back.

Ids are percent-encoded byte by byte (only ``A-Z a-z 0-9 - _ . ~`` stay as they
are), so an escaped id never holds ``:``, ``*``, ``?``, ``{``, ``}`` or NUL, and two
different ids never share a key. A message is a JSON record in its log hash, under
its seq; anything read back that convmem did not write raises `StoreError`.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, unquote_to_bytes

from ..._errors import InvalidMessageError, StoreError
from ..._models import Message
from ..base import SessionStats, StateRecord
from ..capabilities import LogRead
from ..codec import message_from_record, message_to_record


def _escape(value: str) -> str:
    # surrogatepass: an id with a lone surrogate still maps to its own key.
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _unescape(value: str | bytes, where: str) -> str:
    """The id that `_escape` turned into `value`; anything else found in Redis is a `StoreError`."""
    try:
        text = value.decode("ascii") if isinstance(value, bytes) else value
        decoded = unquote_to_bytes(text).decode("utf-8", "surrogatepass")
    except (UnicodeDecodeError, UnicodeEncodeError):
        decoded = None
    # Only the canonical escape of an id names it: "%zz", raw bytes or "%61" (for "a") do not.
    if decoded is None or _escape(decoded) != text:
        raise StoreError(
            f"{where} holds {value!r:.80}, which is not an id escaped by convmem; "
            "delete that entry (or key), which was not written by this store"
        )
    return decoded


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _stats_of(session_id: str, meta: str, raw: Any) -> SessionStats:
    """The `SessionStats` in a session's meta hash (HGETALL's reply)."""
    fields = {_text(k): _text(v) for k, v in dict(raw or {}).items()}
    if not fields:
        return SessionStats(session_id, 0, 0, 0)
    try:
        return SessionStats(
            session_id,
            message_count=int(fields.get("count", 0)),
            last_seq=int(fields.get("last_seq", 0)),
            total_tokens=int(fields.get("tokens", 0)),
            user_id=_unescape(fields["user_id"], f"the user_id of {meta}") if "user_id" in fields else None,
            created_at=float(fields["created_at"]) if "created_at" in fields else None,
            updated_at=float(fields["updated_at"]) if "updated_at" in fields else None,
            generation=fields.get("generation"),
        )
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(
            f"the counters of session {session_id!r:.80} in {meta!r:.120} are malformed ({exc})"
        ) from None


def _state_of(session_id: str, key: str, value: Any, version: Any) -> StateRecord | None:
    """The state record `key` from its value and version fields (None when it has none)."""
    if value is None or version is None:
        return None
    try:
        return StateRecord(_text(value), int(version))
    except (ValueError, UnicodeDecodeError) as exc:
        raise StoreError(f"state {key!r} of session {session_id!r:.80} is malformed ({exc})") from None


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def _encode_record(message: Message, session_id: str) -> bytes:
    record = message_to_record(message)
    # The seq is the hash field; keeping it out of the record lets the script assign it.
    del record["seq"]
    if record["reply_to_seq"] is None:  # most messages; records written before it lack it too
        del record["reply_to_seq"]
    try:
        return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidMessageError(
            f"a message for session {session_id!r:.80} is not valid UTF-8 text ({exc.reason}); "
            "nothing was stored. Build messages with Message.create, which rejects lone surrogates"
        ) from None


def _decode_record(raw: str | bytes, seq: int, session_id: str) -> Message:
    try:
        record = json.loads(raw)
        if not isinstance(record, dict):
            raise TypeError(f"a record must be a JSON object, got {type(record).__name__}")
    except (ValueError, TypeError) as exc:
        raise StoreError(
            f"stored message seq={seq} of session {session_id!r:.80} is malformed "
            f"({type(exc).__name__}: {exc}); other sessions are unaffected"
        ) from None
    record["seq"] = seq
    return message_from_record(record, session_id)


def _log_read(session_id: str, meta: str, before: Any, log: Any, after: Any) -> LogRead:
    """The `LogRead` of a session from its HGETALL replies (counters, log, counters)."""
    records = sorted(
        (int(name), raw)
        for field, raw in dict(log or {}).items()
        if (name := _text(field)).isdecimal() and name.isascii()
    )
    return LogRead(
        _stats_of(session_id, meta, before),
        [_decode_record(raw, seq, session_id) for seq, raw in records if seq >= 1],
        _stats_of(session_id, meta, after),
    )
