"""The `Store` protocol: an append-only log of messages per session, plus
small named state records (summary, facts, ...) that are derived from it.

A store never counts tokens or interprets content: the memory counts each
message once and hands the store finished `Message` objects; the store assigns
``seq`` atomically, so several writers (threads, processes, servers) can append
to one session and every message gets exactly one place in its log.

Deleting data is explicit: `Store.clear` forgets one session, `Store.forget_user`
every session of one user, and `Store.expire_idle` every session with no write
(append, status change or state write) for a given time; `Store.delete_messages`
and `Store.replace_message` remove or rewrite single messages. Nothing else
removes a stored message. Seqs are never reused: deleting the newest message
leaves ``last_seq`` as it was.

Every log has a *generation*: an opaque token made when the session's log is
created and replaced whenever messages are deleted or replaced; a session that
is cleared, forgotten or expired and then written again gets a new one. It is
reported by `Store.stats`, so a process that mirrors a log (recall's indexes)
notices with the read it makes anyway that what it mirrors is no longer the
log, and drops it instead of serving forgotten text.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import secrets
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Protocol, TypeGuard, runtime_checkable

from .._errors import ConfigError, InvalidMessageError, InvalidSessionIdError, SessionOwnerError
from .._message_json import checked_json
from .._models import Message, TurnStatus, validate_message
from .._tool_sequence import check_tool_calls

__all__ = [
    "MAX_ID_LENGTH",
    "MAX_SEQ",
    "AsyncStore",
    "SessionSnapshot",
    "SessionStats",
    "StateRecord",
    "Store",
    "check_owner",
    "check_seq",
    "idle_cutoff",
    "is_async_store",
    "is_store",
    "missing_seqs_error",
    "new_generation",
    "readable_seqs",
    "require_sync_store",
    "seq_bound",
    "validate_id",
    "validate_messages",
    "validate_seqs",
]

MAX_ID_LENGTH = 256
# The largest seq: every backend holds it exactly (Redis scripts compute in doubles, exact to 2**53).
MAX_SEQ = 2**53 - 1


def validate_id(value: object, what: str = "session_id") -> str:
    """Return `value` if it is a usable session or user id, else raise `InvalidSessionIdError`.

    An id is a non-empty string of at most 256 characters with no control
    characters (NUL, newlines, escapes) and no lone surrogates. Any other
    character is allowed: stores escape ids, so ``../x`` or ``a:*`` are safe.
    """
    if not isinstance(value, str):
        raise InvalidSessionIdError(f"{what} must be a str, got {type(value).__name__}: {value!r:.60}")
    if not value or not value.strip():
        raise InvalidSessionIdError(f"{what} must not be empty or blank, got {value!r}")
    if len(value) > MAX_ID_LENGTH:
        raise InvalidSessionIdError(
            f"{what} is {len(value)} characters long; the limit is {MAX_ID_LENGTH} "
            "(hash longer keys before using them as ids)"
        )
    for position, char in enumerate(value):
        category = unicodedata.category(char)
        if category in ("Cc", "Cs"):
            raise InvalidSessionIdError(
                f"{what} contains a control character {char!r} at position {position}; "
                "ids may not contain NUL, newlines or other control characters"
            )
    return value


def check_owner(session_id: str, owner_user_id: str | None, user_id: str | None) -> None:
    """Refuse `user_id` on a session that `owner_user_id` owns (`SessionOwnerError`).

    A session belongs to the first user that appends to it. No user (``None``)
    on either side is no claim: a session nobody owns is open to every caller,
    and a caller that names no user (maintenance code, the CLI, a memory built
    without ``user_id``) reaches any session, as it could through the store.
    """
    if owner_user_id is not None and user_id is not None and owner_user_id != user_id:
        raise SessionOwnerError(session_id, user_id, owner_user_id)


def validate_messages(messages: object) -> list[Message]:
    """The messages of one `Store.append` call, each checked by `validate_message`.

    Every store calls this first in ``append``, before it writes anything, so a
    malformed message (built without `Message.create`) raises
    `InvalidMessageError` and leaves the log as it was, instead of being stored
    and breaking every later read of its session. So does a tool call chat APIs
    could never pair with its result (no id, or an id two calls of one message
    share; see `check_tool_calls`). A message the memory checked as it came in,
    and vouches for while it writes it (`checked_messages`), is not checked again.
    """
    if isinstance(messages, (Message, str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidMessageError(
            f"append takes a list of Message objects, got {type(messages).__name__}: {messages!r:.80}"
        )
    checked: list[Message] = []
    for index, message in enumerate(messages):
        if checked_json(message) is not None:  # checked where it came in (see `checked_messages`)
            checked.append(message)
            continue
        try:
            checked.append(validate_message(message))
        except InvalidMessageError as exc:
            raise InvalidMessageError(f"message {index} of the append: {exc}; nothing was stored") from None
    check_tool_calls(checked)
    return checked


def validate_seqs(seqs: object, what: str = "seqs") -> list[int]:
    """The distinct seqs of a `Store.delete_messages` call, sorted; raises `InvalidMessageError`.

    A seq is an int from 1 to `MAX_SEQ` (not a bool). Stores call this before they touch the log.
    """
    if isinstance(seqs, (str, bytes)) or not isinstance(seqs, (Sequence, set, frozenset)):
        raise InvalidMessageError(f"{what} must be a list of message seqs (ints), got {type(seqs).__name__}")
    for seq in seqs:
        check_seq(seq, what)
    return sorted(set(seqs))


def check_seq(seq: object, what: str = "seq") -> int:
    """`seq` if it is an int from 1 to `MAX_SEQ`, else `InvalidMessageError` naming it."""
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 < seq <= MAX_SEQ:
        raise InvalidMessageError(
            f"{what} must hold positive ints up to {MAX_SEQ} (message seqs), got {seq!r:.60}"
        )
    return seq


def seq_bound(seq: int) -> int:
    """A read's seq bound (``after_seq``, ``through_seq``, ``before_seq``) within what every
    backend holds: one past `MAX_SEQ` bounds nothing more than any larger number would."""
    return max(0, min(int(seq), MAX_SEQ + 1))


def readable_seqs(seqs: Sequence[int]) -> list[int]:
    """The distinct seqs of a `Store.get` that a log can hold, sorted (the others are missing)."""
    return sorted({int(seq) for seq in seqs if 0 < int(seq) <= MAX_SEQ})


def new_generation() -> str:
    """A fresh log generation: 16 random hex digits, never the same twice in practice."""
    return secrets.token_hex(8)


def missing_seqs_error(session_id: str, missing: Sequence[int]) -> InvalidMessageError:
    shown = ", ".join(str(s) for s in list(missing)[:10]) + (" ..." if len(missing) > 10 else "")
    return InvalidMessageError(
        f"session {session_id!r:.80} has no message with seq {shown}; nothing was deleted or "
        "replaced (read the log with messages() for the seqs it holds)"
    )


def idle_cutoff(older_than_seconds: float, now: float) -> float:
    """The last-write time before which a session counts as idle, for `Store.expire_idle`."""
    if isinstance(older_than_seconds, bool) or not isinstance(older_than_seconds, (int, float)):
        raise ConfigError(
            f"older_than_seconds must be a number of seconds, got {type(older_than_seconds).__name__}"
        )
    if math.isnan(older_than_seconds) or older_than_seconds < 0:
        raise ConfigError(f"older_than_seconds must be >= 0, got {older_than_seconds!r}")
    return now - float(older_than_seconds)


@dataclasses.dataclass(frozen=True)
class SessionStats:
    """What a store knows about a session without reading its log."""

    session_id: str
    message_count: int
    last_seq: int
    total_tokens: int
    user_id: str | None = None
    created_at: float | None = None
    updated_at: float | None = None
    # The log's generation (see the module docstring); None for a session with no log,
    # or one written before stores kept generations.
    generation: str | None = None


@dataclasses.dataclass(frozen=True)
class StateRecord:
    """A derived-state value (JSON text) with a version for compare-and-set."""

    value: str
    version: int


@dataclasses.dataclass(frozen=True)
class SessionSnapshot:
    """A session's stats and some of its state records, read together (`read_session`)."""

    stats: SessionStats
    states: Mapping[str, StateRecord]
    """The records asked for that the session has, by key."""
    user_sessions: Sequence[SessionStats] | None = None
    """With `read_user_scope`: the stats of every session of the user, sorted by id."""
    user_states: Mapping[str, StateRecord] | None = None
    """With `read_user_scope`: the user key's record of this session and of each of the
    user's sessions that has one, by session id."""


@runtime_checkable
class Store(Protocol):
    """Where conversations live. Implementations: `InMemoryStore`, `SQLiteStore`, `RedisStore`,
    `PostgresStore`; for asyncio code see `AsyncStore`.

    Every method takes an already validated ``session_id``. Messages come back
    oldest first. Writing is all-or-nothing: a failed `append` stores nothing.
    An implementation's ``append`` starts with `validate_messages`.

    A store may declare capabilities beyond these methods by naming their
    protocols among its bases (`convmem._stores.capabilities`: reading a
    session in one call, one state of many sessions, a user's sessions with
    their stats, hosting recall's keyword index or vectors, a file location).
    `convmem.testing` checks a store against this contract and the
    capabilities it declares.
    """

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        """Append `messages` atomically; return them with ``seq`` assigned (last seq + 1, ...).

        The first append with a `user_id` makes that user the session's owner;
        an append naming another user raises `SessionOwnerError` (see
        `check_owner`) and stores nothing."""
        ...

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        """Messages with ``after_seq < seq <= through_seq`` (all of them by default)."""
        ...

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        """The newest `limit` messages with ``seq < before_seq``, oldest first. O(limit)."""
        ...

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        """The messages with these seqs (missing ones are skipped), oldest first."""
        ...

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        """Change the status of one stored message (e.g. RUNNING -> COMPLETED)."""
        ...

    def stats(self, session_id: str) -> SessionStats:
        """Counts for a session and its log's generation; an unknown session has zero messages."""
        ...

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        """Delete the messages with these seqs atomically; return them, oldest first.

        A seq the log does not hold raises `InvalidMessageError` and deletes nothing.
        Deleting changes the log's generation (an empty `seqs` changes nothing).
        """
        ...

    def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        """Put `message` in place of the stored message `seq` atomically; return it as stored.

        `message` is checked as `append` checks messages; an unknown seq raises
        `InvalidMessageError`. Replacing changes the log's generation.
        """
        ...

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        """The state record stored under `key` for this session, or ``None`` if there is none."""
        ...

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        """Write a state record. With `expected_version` (0 = must not exist yet) the write
        happens only if the stored version still matches; returns the new record, or
        ``None`` when another writer got there first.

        With `requires_seq` the write also happens only if the session exists and its
        last seq is at least `requires_seq`, checked atomically with the write. State
        derived from messages up to seq N passes N: if the session was deleted while
        the state was being computed, nothing is written back (``None``, as for a lost
        compare-and-set), so forgotten text cannot return through a late write."""
        ...

    def delete_state(self, session_id: str, key: str) -> None:
        """Delete the state record `key` of this session; a missing record is no error.
        The session's messages are untouched."""
        ...

    def clear(self, session_id: str) -> None:
        """Delete the session: its log and every state record."""
        ...

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        """Ids of stored sessions, optionally only those of one user."""
        ...

    def forget_user(self, user_id: str) -> list[str]:
        """Delete every session appended with this `user_id` (logs and state records);
        return the deleted session ids, sorted. An unknown user deletes nothing."""
        ...

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete every session whose last write is more than `older_than_seconds` ago;
        return the deleted session ids, sorted. Run it periodically for retention."""
        ...

    def close(self) -> None:
        """Release the store's connections or file handles; the store is not used after it."""
        ...


@runtime_checkable
class AsyncStore(Protocol):
    """`Store` for asyncio code: the same methods, under the same names, as coroutines.
    Implementations: `AsyncRedisStore`, `AsyncPostgresStore`.

    `ConversationMemory` and `SessionRegistry` need a `Store` (their async methods run
    it in a worker thread); an async store serves an application's own asyncio code
    and `aforget_session`, `aforget_user` and `aexpire_idle`. Tell the two apart with
    `is_store` and `is_async_store`: ``isinstance`` with either protocol only looks
    at method names, which both kinds share.
    """

    async def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        """`Store.append` as a coroutine."""
        ...

    async def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        """`Store.messages` as a coroutine."""
        ...

    async def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        """`Store.tail` as a coroutine."""
        ...

    async def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        """`Store.get` as a coroutine."""
        ...

    async def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        """`Store.set_status` as a coroutine."""
        ...

    async def stats(self, session_id: str) -> SessionStats:
        """`Store.stats` as a coroutine."""
        ...

    async def delete_messages(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        """`Store.delete_messages` as a coroutine."""
        ...

    async def replace_message(self, session_id: str, seq: int, message: Message) -> Message:
        """`Store.replace_message` as a coroutine."""
        ...

    async def get_state(self, session_id: str, key: str) -> StateRecord | None:
        """`Store.get_state` as a coroutine."""
        ...

    async def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        """`Store.put_state` as a coroutine."""
        ...

    async def delete_state(self, session_id: str, key: str) -> None:
        """`Store.delete_state` as a coroutine."""
        ...

    async def clear(self, session_id: str) -> None:
        """`Store.clear` as a coroutine."""
        ...

    async def sessions(self, *, user_id: str | None = None) -> list[str]:
        """`Store.sessions` as a coroutine."""
        ...

    async def forget_user(self, user_id: str) -> list[str]:
        """`Store.forget_user` as a coroutine."""
        ...

    async def expire_idle(self, older_than_seconds: float) -> list[str]:
        """`Store.expire_idle` as a coroutine."""
        ...

    async def close(self) -> None:
        """`Store.close` as a coroutine."""
        ...


# The methods both protocols share: a store is sync when none is a coroutine function, async when all are.
_STORE_METHODS = (
    "append",
    "messages",
    "tail",
    "get",
    "set_status",
    "stats",
    "delete_messages",
    "replace_message",
    "get_state",
    "put_state",
    "delete_state",
    "clear",
    "sessions",
    "forget_user",
    "expire_idle",
    "close",
)


def _coroutine_methods(store: object) -> int:
    return sum(inspect.iscoroutinefunction(getattr(store, name, None)) for name in _STORE_METHODS)


def is_store(store: object) -> TypeGuard[Store]:
    """True for a `Store`: every method of the protocol, none of them a coroutine function."""
    return isinstance(store, Store) and _coroutine_methods(store) == 0


def is_async_store(store: object) -> TypeGuard[AsyncStore]:
    """True for an `AsyncStore`: every method of the protocol, each a coroutine function."""
    return isinstance(store, AsyncStore) and _coroutine_methods(store) == len(_STORE_METHODS)


def require_sync_store(store: object, user: str) -> None:
    """Refuse an `AsyncStore` given to `user` (the API that was passed it, which calls its
    store synchronously) with a `ConfigError` that names the sync store to pass instead, and
    anything that is not a store at all (None stands for the default store)."""
    if store is None or is_store(store):
        return
    if not is_async_store(store):
        missing = [name for name in _STORE_METHODS if not callable(getattr(store, name, None))]
        lacks = f"; it lacks {', '.join(missing[:4])}{' ...' if len(missing) > 4 else ''}" if missing else ""
        raise ConfigError(
            f"{user} needs store= to be a convmem Store (SQLiteStore, InMemoryStore, RedisStore, "
            f"PostgresStore or one of your own implementing the Store protocol) or None, got "
            f"{type(store).__name__} {store!r:.60}{lacks}"
        )
    name = type(store).__name__
    sync_twin = name[len("Async") :] if name.startswith("Async") and len(name) > len("Async") else None
    instead = (
        f"{sync_twin}(...) with the same arguments" if sync_twin else "the sync store over the same data"
    )
    raise ConfigError(
        f"{user} needs a sync store, and {name} is an asyncio store: a memory calls its store "
        f"synchronously (its async methods run it in a worker thread). Pass {instead}; async stores "
        "serve your own asyncio code and aforget_session, aforget_user and aexpire_idle"
    )
