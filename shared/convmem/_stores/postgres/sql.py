"""What every PostgreSQL query of convmem is made of: a statement request (`_Sql`), an
operation (a generator of statements, run by `PostgresStore` and `AsyncPostgresStore`), and the
checks made on what a statement binds.

Ids and text are always bound parameters; the only name put into SQL text is
the schema, which must be a plain lower-case identifier. Times are the
server's clock, so every process agrees on what is idle.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, TypeVar

from ..._errors import ConfigError, InvalidMessageError
from ..._models import Message
from ..._sansio import Flow
from ..base import MAX_ID_LENGTH, validate_id
from ..codec import message_to_record

_T = TypeVar("_T")

DEFAULT_SCHEMA = "convmem"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
_COLUMNS = (
    "seq",
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "metadata",
    "status",
    "ts",
    "token_count",
    "reply_to_seq",
)
_NOW = "extract(epoch FROM clock_timestamp())::float8"


@dataclasses.dataclass(frozen=True)
class _Sql:
    """One parameterised statement; its reply is the list of rows it returned (maybe empty)."""

    text: str
    params: tuple[Any, ...] = ()


# An operation is a generator: it yields statements, is sent their rows, and returns its
# result. The sync and async stores only differ in how they drive it.
_Operation = Flow[_Sql, _T]


class _RollBack(Exception):
    """Raised by an operation to end its transaction without writing; carries its result."""

    def __init__(self, result: object) -> None:
        super().__init__("rolled back on purpose")
        self.result = result


def _check_id(value: str, what: str) -> str:
    # PostgreSQL text cannot hold NUL, and a key must fit a btree entry: refuse what
    # validate_id refuses rather than fail deep in the server. The common case costs O(1).
    if len(value) > MAX_ID_LENGTH or "\x00" in value:
        validate_id(value, what)
    return value


def _check_text(value: str | None, what: str) -> None:
    if value is not None and "\x00" in value:
        raise InvalidMessageError(
            f"{what} contains a NUL character at position {value.index(chr(0))}; PostgreSQL text "
            "cannot hold NUL, so nothing was stored. Remove it or encode it (e.g. as \\u0000)"
        )


def _row_values(message: Message, session_id: str) -> dict[str, Any]:
    record = message_to_record(message)
    # content, tool_calls and metadata are JSON, which escapes NUL; the plain fields are not.
    _check_text(record["name"], f"the name of a message for session {session_id!r:.80}")
    _check_text(record["tool_call_id"], f"the tool_call_id of a message for session {session_id!r:.80}")
    return record


def _not_utf8(action: str, exc: UnicodeEncodeError) -> InvalidMessageError:
    return InvalidMessageError(
        f"{action}: the text is not valid UTF-8 ({exc.reason}); nothing was stored. "
        "Build messages with Message.create, which rejects lone surrogates"
    )


def _check_schema(schema: object) -> str:
    if not isinstance(schema, str) or not _SCHEMA_NAME.fullmatch(schema):
        raise ConfigError(
            f"schema must be a lower-case SQL identifier (letters, digits, '_', at most 63 "
            f"characters, not starting with a digit), got {schema!r}"
        )
    return schema


class SchemaSql:
    """The schema a query class writes its statements for, checked and quoted (``self.s``)."""

    def __init__(self, schema: str) -> None:
        self.schema = _check_schema(schema)
        self.s = f'"{self.schema}"'
