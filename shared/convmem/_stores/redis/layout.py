"""`_RedisLayout`: where a session lives in Redis and what each store operation asks of it.

Key layout (``P`` is the prefix, ``E`` an escaped session id, ``U`` an escaped user id)::

    P:session:{E}:meta     hash  last_seq, count, tokens, user_id, created_at, updated_at, generation
    P:session:{E}:log      hash  seq -> message record (JSON)
    P:session:{E}:state    hash  "v:<key>" -> value, "n:<key>" -> version
    P:user:{U}:sessions    set   escaped ids of the sessions the user owns

Ids are escaped (`convmem._stores.redis.records`), so two different ids never
share a key and an id never holds a glob or hash-tag character. The braces are
Redis Cluster hash tags: all keys of one session live in one slot, as do a user's, so every script touches
one slot and runs on one node, whole or not at all. Concurrent appends from any
number of clients get consecutive seqs, and a lost connection never leaves
half a write behind. Because a session's seqs are contiguous (1..last_seq),
reading a window is one script call fetching exactly the wanted fields:
O(window), whatever the history; a read never does more work than the data
present, even if a counter is damaged.

There is no index of all sessions: one set written by every append would be
the one hot key of the whole cluster. `sessions()` and `expire_idle()` SCAN
every primary for ``P:session:{*}:meta`` instead, which costs O(keys in the
database): they are maintenance calls, not hot-path ones.

A user's set lives in the user's slot, not the session's, so it cannot be
written by the append script. It is kept correct by ordering: the first append
that gives a session its user is refused by the script until the client has
added the session to the user's set, and the client adds it again right after
(a `forget_user` running in between may have removed it). So the set never
misses a session the user owns, except if a client dies between those two
steps while `forget_user` of that user runs; entries for sessions that are
gone (deleted, or expired by TTL) are harmless, skipped when read, and pruned
by `forget_user` and `expire_idle`. The cost: a session's first append with a
user takes four round trips instead of one.

An operation here is a generator of requests (`_Script`, `_Command`,
`_Pipeline`, `_Scan`); `RedisStore` and `AsyncRedisStore` only run them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, TypeVar

from ..._errors import ConfigError, InvalidMessageError, StoreError
from ..._models import Message, TurnStatus
from ..._options import check_number
from ..._sansio import Flow
from ..base import (
    SessionSnapshot,
    SessionStats,
    StateRecord,
    check_owner,
    check_seq,
    idle_cutoff,
    missing_seqs_error,
    new_generation,
    readable_seqs,
    seq_bound,
    validate_messages,
    validate_seqs,
)
from ..capabilities import LogRead
from .records import (
    _decode_record,
    _encode_record,
    _escape,
    _glob_escape,
    _log_read,
    _state_of,
    _stats_of,
    _text,
    _unescape,
)
from .scripts import _OWNED, _REGISTER

_T = TypeVar("_T")

# Records a set_status or CAS loop re-reads before giving up on a record that keeps changing.
_CAS_ATTEMPTS = 16
# Sessions examined per step of a sweep (one pipeline of reads, then one script per doomed session).
_SWEEP_BATCH = 500

# -- requests: what an operation asks of Redis ------------------------------------


@dataclasses.dataclass(frozen=True)
class _Script:
    name: str
    keys: tuple[str, ...]
    args: tuple[str | bytes, ...]


@dataclasses.dataclass(frozen=True)
class _Command:
    args: tuple[str | bytes, ...]


@dataclasses.dataclass(frozen=True)
class _Pipeline:
    commands: tuple[tuple[str | bytes, ...], ...]


@dataclasses.dataclass(frozen=True)
class _Scan:
    """Every key matching `pattern` (of Redis type `kind`) on every primary."""

    pattern: str
    kind: str


_Request = _Script | _Command | _Pipeline | _Scan
# An operation is a generator: it yields requests, is sent their replies, and
# returns its result. The sync and async stores only differ in how they drive it.
_Operation = Flow[_Request, _T]

# Sessions whose logs `read_logs` reads in one pipeline: a returning user's first search
# in a process takes one round trip for up to this many sessions.
LOGS_PER_PIPELINE = 64


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str) or not prefix:
        raise ConfigError(f"prefix must be a non-empty str, got {prefix!r}")
    bad = [c for c in prefix if c in "*?[]{}\\" or not c.isprintable() or c.isspace()]
    if bad:
        raise ConfigError(
            f"prefix {prefix!r} contains {bad[0]!r}; use letters, digits and '-_.:' so that "
            "operators can SCAN the store's keys safely"
        )
    return prefix


# A century: beyond it a TTL means "keep"; pass None for that.
_MAX_TTL_SECONDS = 100 * 365 * 86_400


def _ttl_ms(ttl_seconds: float | None) -> int:
    if ttl_seconds is None:
        return 0
    check_number(
        "ttl_seconds",
        ttl_seconds,
        low=0,
        high=_MAX_TTL_SECONDS,
        low_open=True,
        allowed=f"None or a positive number of seconds up to {_MAX_TTL_SECONDS}",
    )
    return max(1, round(ttl_seconds * 1000))


# -- the logic shared by both stores ---------------------------------------------------


class _RedisLayout:
    """Keys, scripts' arguments and reply decoding: everything but the I/O."""

    def __init__(self, prefix: str, ttl_seconds: float | None) -> None:
        self.prefix = _check_prefix(prefix)
        self.ttl_ms = _ttl_ms(ttl_seconds)
        self._meta_head = f"{self.prefix}:session:{{"
        self.meta_pattern = f"{_glob_escape(self.prefix)}:session:{{*}}:meta"
        self.user_pattern = f"{_glob_escape(self.prefix)}:user:{{*}}:sessions"

    def escaped_session_keys(self, escaped: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:session:{{{escaped}}}"
        return f"{base}:meta", f"{base}:log", f"{base}:state"

    def session_keys(self, session_id: str) -> tuple[str, str, str]:
        return self.escaped_session_keys(_escape(session_id))

    def escaped_user_key(self, escaped: str) -> str:
        return f"{self.prefix}:user:{{{escaped}}}:sessions"

    def user_key(self, user_id: str) -> str:
        return self.escaped_user_key(_escape(user_id))

    def _escaped_id_in(self, key: str | bytes, tail: str) -> str:
        text = _text(key)
        return text[len(self._meta_head) : len(text) - len(tail)] if text.endswith(tail) else text

    def append(
        self, session_id: str, messages: Sequence[Message], user_id: str | None
    ) -> _Operation[list[Message]]:
        messages = validate_messages(messages)
        records = [_encode_record(m, session_id) for m in messages]
        escaped = _escape(session_id)
        keys = self.escaped_session_keys(escaped)
        user = _escape(user_id) if user_id is not None else ""
        generation = new_generation()  # kept only if this append creates the log
        registered = False
        while True:
            reply = yield _Script(
                "append",
                keys,
                (
                    "1" if user_id is not None else "0",
                    user,
                    "1" if registered else "0",
                    str(self.ttl_ms),
                    str(sum(m.token_count or 0 for m in messages)),
                    generation,
                    *records,
                ),
            )
            if _text(reply).startswith(_OWNED):
                assert user_id is not None  # the script refuses only a named user
                owner = _unescape(_text(reply)[len(_OWNED) :], f"the user_id of {keys[0]}")
                check_owner(session_id, owner, user_id)
            if _text(reply) != _REGISTER:
                break
            # The user's set must list the session before the session names its user.
            yield _Command(("SADD", self.escaped_user_key(user), escaped))
            registered = True
        if registered:
            # A forget_user of this user may have dropped the entry between the two steps.
            yield _Command(("SADD", self.escaped_user_key(user), escaped))
        first_seq = int(reply)
        return [dataclasses.replace(m, seq=first_seq + i) for i, m in enumerate(messages)]

    def read_log(self, session_id: str, window: tuple[str, str, str]) -> _Operation[list[Message]]:
        meta, log, _ = self.session_keys(session_id)
        reply = yield _Script("read_log", (meta, log), window)
        return [_decode_record(reply[i + 1], int(reply[i]), session_id) for i in range(0, len(reply), 2)]

    def messages(self, session_id: str, after_seq: int, through_seq: int | None) -> _Operation[list[Message]]:
        if through_seq is not None and through_seq <= after_seq:
            return []
        window = (
            "range",
            str(seq_bound(after_seq)),
            "" if through_seq is None else str(seq_bound(through_seq)),
        )
        return (yield from self.read_log(session_id, window))

    def tail(self, session_id: str, limit: int, before_seq: int | None) -> _Operation[list[Message]]:
        if limit <= 0:
            return []
        window = ("tail", str(int(limit)), "" if before_seq is None else str(seq_bound(before_seq)))
        return (yield from self.read_log(session_id, window))

    def read_logs(self, session_ids: Sequence[str]) -> _Operation[dict[str, LogRead]]:
        """Each session's counters, whole log and counters again, in a pipeline of at most
        `LOGS_PER_PIPELINE` sessions (what one reply holds stays bounded): a session's
        keys share a slot, so a Cluster pipeline sends each node its part."""
        ids = list(dict.fromkeys(session_ids))
        found = {}
        for start in range(0, len(ids), LOGS_PER_PIPELINE):
            chunk = ids[start : start + LOGS_PER_PIPELINE]
            keys = [self.session_keys(s) for s in chunk]
            replies = yield _Pipeline(
                tuple(
                    command
                    for meta, log, _ in keys
                    for command in (("HGETALL", meta), ("HGETALL", log), ("HGETALL", meta))
                )
            )
            for number, (session_id, (meta, _, _)) in enumerate(zip(chunk, keys, strict=True)):
                before, log, after = replies[3 * number : 3 * number + 3]
                found[session_id] = _log_read(session_id, meta, before, log, after)
        return found

    def get(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        wanted = readable_seqs(seqs)
        if not wanted:
            return []
        _, log, _ = self.session_keys(session_id)
        values = yield _Command(("HMGET", log, *(str(s) for s in wanted)))
        return [
            _decode_record(raw, seq, session_id)
            for seq, raw in zip(wanted, values, strict=True)
            if raw is not None
        ]

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> _Operation[Message]:
        check_seq(seq)
        meta, log, state = self.session_keys(session_id)
        for _ in range(_CAS_ATTEMPTS):
            raw = yield _Command(("HGET", log, str(seq)))
            if raw is None:
                raise InvalidMessageError(f"session {session_id!r:.80} has no message with seq={seq}")
            updated = dataclasses.replace(_decode_record(raw, seq, session_id), status=status)
            replaced = yield _Script(
                "replace_record",
                (meta, log, state),
                (str(seq), raw, _encode_record(updated, session_id), str(self.ttl_ms)),
            )
            if int(replaced) == 1:
                return updated
        raise StoreError(
            f"message seq={seq} of session {session_id!r:.80} changed {_CAS_ATTEMPTS} times while "
            "its status was being set; retry later"
        )

    def delete_messages(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        wanted = validate_seqs(seqs)
        if not wanted:
            return []
        reply = yield _Script(
            "delete_messages",
            self.session_keys(session_id),
            (str(self.ttl_ms), new_generation(), *(str(s) for s in wanted)),
        )
        if int(reply[0]) != 1:
            raise missing_seqs_error(session_id, [int(s) for s in reply[1:]])
        return [_decode_record(reply[i + 1], int(reply[i]), session_id) for i in range(1, len(reply), 2)]

    def replace_message(self, session_id: str, seq: int, message: Message) -> _Operation[Message]:
        check_seq(seq)
        (message,) = validate_messages([message])
        stored = dataclasses.replace(message, seq=seq)
        replaced = yield _Script(
            "replace_message",
            self.session_keys(session_id),
            (
                str(seq),
                _encode_record(stored, session_id),
                str(stored.token_count or 0),
                str(self.ttl_ms),
                new_generation(),
            ),
        )
        if int(replaced) != 1:
            raise missing_seqs_error(session_id, [seq])
        return stored

    def stats(self, session_id: str) -> _Operation[SessionStats]:
        meta, _, _ = self.session_keys(session_id)
        raw = yield _Command(("HGETALL", meta))
        return _stats_of(session_id, meta, raw)

    def read_session(self, session_id: str, keys: Sequence[str]) -> _Operation[SessionSnapshot]:
        """Stats and state records in one round trip: the session's keys share a slot."""
        meta, _, state = self.session_keys(session_id)
        if not keys:
            return SessionSnapshot((yield from self.stats(session_id)), {})
        raw, values = yield _Pipeline((("HGETALL", meta), ("HMGET", state, *_record_fields(keys))))
        return SessionSnapshot(_stats_of(session_id, meta, raw), _records_of(session_id, keys, values))

    def get_states(self, session_ids: Sequence[str], key: str) -> _Operation[dict[str, StateRecord]]:
        """The `key` record of each session that has one, in one round trip (a pipeline)."""
        ids = list(dict.fromkeys(session_ids))
        if not ids:
            return {}
        fields = _record_fields([key])
        replies = yield _Pipeline(tuple(("HMGET", self.session_keys(s)[2], *fields) for s in ids))
        found = {}
        for session_id, (value, version) in zip(ids, replies, strict=True):
            record = _state_of(session_id, key, value, version)
            if record is not None:
                found[session_id] = record
        return found

    def user_session_stats(self, user_id: str) -> _Operation[list[SessionStats]]:
        """`stats` of every session `user_id` owns, sorted by id, in two round trips: the
        user's set, then every member's counters in one pipeline."""
        user_key = self.user_key(user_id)
        members = sorted(_text(m) for m in (yield _Command(("SMEMBERS", user_key))) or ())
        if not members:
            return []
        metas = [self.escaped_session_keys(m)[0] for m in members]
        replies = yield _Pipeline(tuple(("HGETALL", meta) for meta in metas))
        found = []
        for escaped, meta, raw in zip(members, metas, replies, strict=True):
            stats = _stats_of(_unescape(escaped, f"set {user_key}"), meta, raw)
            # The set may still name sessions that are gone or were given to another user.
            if stats.user_id == user_id:
                found.append(stats)
        return sorted(found, key=lambda stats: stats.session_id)

    def read_user_scope(
        self,
        session_id: str,
        keys: Sequence[str],
        user_id: str,
        user_key: str,
        guess: Sequence[str] = (),
    ) -> _Operation[tuple[SessionSnapshot, list[str]]]:
        """`read_session`, `user_session_stats` and the user's `get_states` of `user_key`,
        and the members of the user's set (escaped ids), in one round trip when `guess`
        (escaped ids) holds every member: the session's counters and records, the user's
        set and the guessed members' counters and `user_key` records in one pipeline;
        the members the guess missed in a second."""
        meta, _, state = self.session_keys(session_id)
        wanted = list(dict.fromkeys([*keys, user_key]))
        user_set = self.user_key(user_id)
        guessed = sorted(set(guess))
        replies = yield _Pipeline(
            (
                ("HGETALL", meta),
                ("HMGET", state, *_record_fields(wanted)),
                ("SMEMBERS", user_set),
                *self._member_reads(guessed, user_key),
            )
        )
        raw, values, members = replies[:3]
        read = dict(zip(guessed, zip(replies[3::2], replies[4::2], strict=True), strict=True))
        escaped = sorted(_text(member) for member in members or ())
        missed = [member for member in escaped if member not in read]
        if missed:
            more = yield _Pipeline(self._member_reads(missed, user_key))
            read.update(zip(missed, zip(more[::2], more[1::2], strict=True), strict=True))
        own = _records_of(session_id, wanted, values)
        states = {key: record for key, record in own.items() if key in keys}
        user_states = {session_id: own[user_key]} if user_key in own else {}
        sessions = []
        for member in escaped:
            member_id = _unescape(member, f"set {user_set}")
            member_meta = self.escaped_session_keys(member)[0]
            counters, (value, version) = read[member]
            stats = _stats_of(member_id, member_meta, counters)
            # The set may still name sessions that are gone or were given to another user.
            if stats.user_id != user_id:
                continue
            sessions.append(stats)
            record = _state_of(member_id, user_key, value, version)
            if record is not None:
                user_states[member_id] = record
        sessions.sort(key=lambda stats: stats.session_id)
        snapshot = SessionSnapshot(_stats_of(session_id, meta, raw), states, sessions, user_states)
        return snapshot, escaped

    def _member_reads(self, escaped: Sequence[str], user_key: str) -> tuple[tuple[str, ...], ...]:
        """Each member's counters and `user_key` record (two commands a member)."""
        commands: list[tuple[str, ...]] = []
        for member in escaped:
            member_meta, _, member_state = self.escaped_session_keys(member)
            commands += [("HGETALL", member_meta), ("HMGET", member_state, *_record_fields([user_key]))]
        return tuple(commands)

    def get_state(self, session_id: str, key: str) -> _Operation[StateRecord | None]:
        _, _, state = self.session_keys(session_id)
        value, version = yield _Command(("HMGET", state, *_record_fields([key])))
        return _state_of(session_id, key, value, version)

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        expected_version: int | None,
        requires_seq: int | None,
    ) -> _Operation[StateRecord | None]:
        version = yield _Script(
            "put_state",
            self.session_keys(session_id),
            (
                key,
                value,
                "" if expected_version is None else str(int(expected_version)),
                str(self.ttl_ms),
                "" if requires_seq is None else str(int(requires_seq)),
            ),
        )
        return None if int(version) < 0 else StateRecord(value, int(version))

    def delete_state(self, session_id: str, key: str) -> _Operation[None]:
        yield _Script("delete_state", self.session_keys(session_id), (key, str(self.ttl_ms)))

    def forget(self, escaped: str, condition: tuple[str, ...]) -> _Operation[tuple[bool, str]]:
        """Delete one session if `condition` holds; return (deleted, escaped owner or '')."""
        deleted, owner = yield _Script("forget", self.escaped_session_keys(escaped), condition)
        return int(deleted) == 1, _text(owner)

    def forget_and_unlist(self, escaped: str, condition: tuple[str, ...]) -> _Operation[bool]:
        deleted, owner = yield from self.forget(escaped, condition)
        if deleted and owner:
            yield _Command(("SREM", self.escaped_user_key(owner), escaped))
        return deleted

    def clear(self, session_id: str) -> _Operation[None]:
        yield from self.forget_and_unlist(_escape(session_id), ("any",))

    def _all_sessions(self) -> _Operation[list[str]]:
        """Escaped ids of every session, from the meta keys on every primary."""
        keys = yield _Scan(self.meta_pattern, "hash")
        return [self._escaped_id_in(key, "}:meta") for key in keys]

    def sessions(self, user_id: str | None) -> _Operation[list[str]]:
        if user_id is None:
            escaped = yield from self._all_sessions()
            return sorted(_unescape(e, f"the key of session {e!r:.80}") for e in escaped)
        user, user_key = _escape(user_id), self.user_key(user_id)
        members = [_text(m) for m in (yield _Command(("SMEMBERS", user_key))) or ()]
        if not members:
            return []
        # The set may still name sessions that are gone or were never claimed: ask each one.
        owners = yield _Pipeline(tuple(("HGET", self.escaped_session_keys(m)[0], "user_id") for m in members))
        return sorted(
            _unescape(m, f"set {user_key}")
            for m, owner in zip(members, owners, strict=True)
            if owner is not None and _text(owner) == user
        )

    def forget_user(self, user_id: str) -> _Operation[list[str]]:
        user, user_key = _escape(user_id), self.user_key(user_id)
        members = sorted(_text(m) for m in (yield _Command(("SMEMBERS", user_key))) or ())
        deleted: list[str] = []
        unlisted: list[str] = []
        for escaped in members:
            session_id = _unescape(escaped, f"set {user_key}")
            gone, owner = yield from self.forget(escaped, ("user", user))
            if gone:
                deleted.append(session_id)
            # An entry for a session the user does not own is dropped too; a claim in flight
            # adds its entry back once it has claimed the session.
            if gone or owner != user:
                unlisted.append(escaped)
        if unlisted:
            yield _Command(("SREM", user_key, *unlisted))
        return sorted(deleted)

    def expire_idle(self, older_than_seconds: float) -> _Operation[list[str]]:
        idle_cutoff(older_than_seconds, 0.0)  # a bad age is refused before any I/O
        seconds, microseconds = yield _Command(("TIME",))
        cutoff = idle_cutoff(older_than_seconds, int(seconds) + int(microseconds) / 1e6)
        if math.isinf(cutoff):
            return []
        deleted: list[str] = []
        escaped_ids = yield from self._all_sessions()
        for start in range(0, len(escaped_ids), _SWEEP_BATCH):
            batch = escaped_ids[start : start + _SWEEP_BATCH]
            activity = yield _Pipeline(
                tuple(("HGET", self.escaped_session_keys(e)[0], "updated_at") for e in batch)
            )
            for escaped, updated_at in zip(batch, activity, strict=True):
                session_id = _unescape(escaped, f"the key of session {escaped!r:.80}")
                try:
                    idle = updated_at is not None and float(updated_at) < cutoff
                except ValueError:
                    raise StoreError(
                        f"the activity time of session {session_id!r:.80} is damaged "
                        f"({updated_at!r:.40}); clear the session"
                    ) from None
                if idle and (yield from self.forget_and_unlist(escaped, ("idle", repr(cutoff)))):
                    deleted.append(session_id)
        yield from self._prune_user_sets()
        return sorted(deleted)

    def _prune_user_sets(self) -> _Operation[None]:
        """Drop user-set entries of sessions that are gone (expired by TTL, or left by a crash)."""
        for user_key in (yield _Scan(self.user_pattern, "set")):
            members = [_text(m) for m in (yield _Command(("SMEMBERS", user_key))) or ()]
            if not members:
                continue
            alive = yield _Pipeline(tuple(("EXISTS", self.escaped_session_keys(m)[0]) for m in members))
            gone = [m for m, exists in zip(members, alive, strict=True) if not int(exists)]
            if gone:
                yield _Command(("SREM", user_key, *gone))

    def migrate_untagged_keys(self) -> _Operation[int]:
        """Rename keys of the layout without hash tags; return how many sessions were moved."""
        old_metas = yield _Scan(f"{_glob_escape(self.prefix)}:session:*:meta", "hash")
        moved = 0
        head = len(f"{self.prefix}:session:")
        for key in old_metas:
            escaped = _text(key)[head : -len(":meta")]
            if "{" in escaped or ":" in escaped:
                continue  # already tagged, or not ours
            base = f"{self.prefix}:session:{escaped}"
            old = (f"{base}:meta", f"{base}:log", f"{base}:state")
            moved += int((yield _Script("move_untagged", old + self.escaped_session_keys(escaped), ())))
        head = len(f"{self.prefix}:user:")
        for key in (yield _Scan(f"{_glob_escape(self.prefix)}:user:*:sessions", "set")):
            escaped = _text(key)[head : -len(":sessions")]
            if "{" in escaped or ":" in escaped:
                continue
            members = (yield _Command(("SMEMBERS", _text(key)))) or ()
            if members:
                yield _Command(("SADD", self.escaped_user_key(escaped), *members))
            yield _Command(("DEL", _text(key)))
        yield _Command(("DEL", f"{self.prefix}:sessions"))
        return moved


def _record_fields(keys: Sequence[str]) -> list[str]:
    """The fields of a session's state hash that hold the records of `keys` (value, version)."""
    return [field for key in keys for field in (f"v:{key}", f"n:{key}")]


def _records_of(session_id: str, keys: Sequence[str], values: Sequence[Any]) -> dict[str, StateRecord]:
    """The records of `keys` found in the `HMGET` reply `values` of `_record_fields(keys)`."""
    records = {}
    for index, key in enumerate(keys):
        record = _state_of(session_id, key, values[2 * index], values[2 * index + 1])
        if record is not None:
            records[key] = record
    return records
