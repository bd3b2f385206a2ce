"""`RedisStore` and `AsyncRedisStore`: session logs in Redis (one node or a Cluster), shared by
many processes and servers.

Key layout (``P`` is the prefix, ``E`` an escaped session id, ``U`` an escaped user id)::

    P:session:{E}:meta     hash  last_seq, count, tokens, user_id, created_at, updated_at
    P:session:{E}:log      hash  seq -> message record (JSON)
    P:session:{E}:state    hash  "v:<key>" -> value, "n:<key>" -> version
    P:user:{U}:sessions    set   escaped ids of the sessions the user owns

Ids are percent-encoded byte by byte (only ``A-Z a-z 0-9 - _ . ~`` stay as they
are), so an escaped id never holds ``:``, ``*``, ``?``, ``{``, ``}`` or NUL, and two
different ids never share a key. The braces are Redis Cluster hash tags: all
keys of one session live in one slot, as do a user's, so every script touches
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

Both classes share every piece of logic below; they differ only in how a
request reaches Redis (a blocking call or an awaited one).

Data written by convmem before hash tags (keys ``P:session:E:meta`` without
braces, and a ``P:sessions`` set) is invisible to this layout: run
`RedisStore.migrate_untagged_keys` once on that server (it renames the keys in
place), then, to move into a Cluster, ``redis-cli --cluster import``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, unquote_to_bytes

from ._codec import message_from_record, message_to_record
from ._errors import ConfigError, InvalidMessageError, StoreError
from ._models import Message, TurnStatus
from ._store import SessionStats, StateRecord, idle_cutoff, validate_messages

if TYPE_CHECKING:
    import redis
    import redis.asyncio
    import redis.asyncio.cluster
    import redis.cluster

__all__ = ["AsyncRedisStore", "RedisStore"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"

_T = TypeVar("_T")

# Records a set_status or CAS loop re-reads before giving up on a record that keeps changing.
_CAS_ATTEMPTS = 16
# Sessions examined per step of a sweep (one pipeline of reads, then one script per doomed session).
_SWEEP_BATCH = 500
# Keys asked for per SCAN step.
_SCAN_COUNT = 1000
# The append script's reply when the session must first be added to its user's set.
_REGISTER = "register"

# Redis does not roll a script back when a command in it fails: commands that
# ran before the error stay applied. So every write script first checks all
# that could make a later command fail (foreign keys of another type under our
# prefix, damaged counters) and only then writes; after the checks no command
# can fail, and a script is applied whole or not at all.
_PRELUDE = """
local function wrong_type(key, kind)
  local actual = redis.call('TYPE', key)['ok']
  if actual ~= 'none' and actual ~= kind then
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. actual .. ', not a ' .. kind)
  end
  return nil
end

local function check_session(meta, log, state)
  return wrong_type(meta, 'hash') or wrong_type(log, 'hash') or wrong_type(state, 'hash')
end

-- A write refreshes the session's activity time (Redis's clock, so every client
-- agrees) and, with a TTL, the expiry of all three session keys together.
local function touch(meta, log, state, ttl_ms)
  local clock = redis.call('TIME')
  local now = clock[1] .. '.' .. string.format('%06d', tonumber(clock[2]))
  redis.call('HSETNX', meta, 'created_at', now)
  redis.call('HSET', meta, 'updated_at', now)
  if ttl_ms > 0 then
    redis.call('PEXPIRE', meta, ttl_ms)
    redis.call('PEXPIRE', log, ttl_ms)
    redis.call('PEXPIRE', state, ttl_ms)
  end
end
"""

# KEYS: meta, log, state   ARGV: has_user, user, registered, ttl_ms, tokens, record...
# Returns the first seq, or 'register' (nothing written) when this append would give the
# session its user and the client has not yet added the session to the user's set.
_APPEND = (
    _PRELUDE
    + """
local meta, log, state = KEYS[1], KEYS[2], KEYS[3]
local has_user, user, registered, ttl_ms = ARGV[1] == '1', ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local count = #ARGV - 5
local problem = check_session(meta, log, state)
if problem then return problem end
local counters = redis.call('HMGET', meta, 'last_seq', 'count', 'tokens', 'user_id')
for i = 1, 3 do
  if counters[i] and not tonumber(counters[i]) then
    return redis.error_reply('the counters in ' .. meta .. ' are damaged; clear the session')
  end
end
local claims = has_user and not counters[4]
if claims and not registered then return '"""
    + _REGISTER
    + """' end

local first = tonumber(counters[1] or '0') + 1
local batch = {}
for i = 1, count do
  batch[#batch + 1] = tostring(first + i - 1)
  batch[#batch + 1] = ARGV[5 + i]
  if #batch >= 1000 then
    redis.call('HSET', log, unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('HSET', log, unpack(batch)) end
redis.call('HINCRBY', meta, 'last_seq', count)
redis.call('HINCRBY', meta, 'count', count)
redis.call('HINCRBY', meta, 'tokens', ARGV[5])
if claims then redis.call('HSET', meta, 'user_id', user) end
touch(meta, log, state, ttl_ms)
return tostring(first)
"""
)

# KEYS: meta, log   ARGV: 'range', after_seq, through_seq|''  or  'tail', limit, before_seq|''
# Returns {seq, record, seq, record, ...} in seq order.
# The work is bounded by the log's size, not by last_seq: a window wider than the log
# (a damaged counter, a huge through_seq) reads the log itself instead of every seq in it.
_READ_LOG = """
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0') or 0
local lo, hi = 1, last
if ARGV[1] == 'range' then
  lo = tonumber(ARGV[2]) + 1
  if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3])) end
else
  if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3]) - 1) end
  lo = hi - tonumber(ARGV[2]) + 1
end
if lo < 1 then lo = 1 end
local out = {}
if hi < lo then return out end
local size = redis.call('HLEN', KEYS[2])
if hi - lo + 1 > size then
  local found = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local seq = tonumber(all[i])
    if seq and seq >= lo and seq <= hi then found[#found + 1] = {seq, all[i + 1]} end
  end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  if ARGV[1] == 'tail' and #found > tonumber(ARGV[2]) then
    local keep = {}
    for i = #found - tonumber(ARGV[2]) + 1, #found do keep[#keep + 1] = found[i] end
    found = keep
  end
  for _, pair in ipairs(found) do
    out[#out + 1] = tostring(pair[1])
    out[#out + 1] = pair[2]
  end
  return out
end
local fields = {}
for seq = lo, hi do
  fields[#fields + 1] = tostring(seq)
  if #fields == 1000 or seq == hi then
    local values = redis.call('HMGET', KEYS[2], unpack(fields))
    for i = 1, #fields do
      if values[i] then
        out[#out + 1] = fields[i]
        out[#out + 1] = values[i]
      end
    end
    fields = {}
  end
end
return out
"""

# KEYS: meta, log, state   ARGV: seq, expected_record, new_record, ttl_ms
_REPLACE_RECORD = (
    _PRELUDE
    + """
local problem = check_session(KEYS[1], KEYS[2], KEYS[3])
if problem then return problem end
if redis.call('HGET', KEYS[2], ARGV[1]) ~= ARGV[2] then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[4]))
return 1
"""
)

# KEYS: meta, log, state   ARGV: key, value, expected_version|'', ttl_ms, requires_seq|''
# Returns the new version, or -1 when the compare-and-set or the requires_seq check failed.
_PUT_STATE = (
    _PRELUDE
    + """
local problem = check_session(KEYS[1], KEYS[2], KEYS[3])
if problem then return problem end
if ARGV[5] ~= '' then
  -- A deleted (or TTL-expired) session has no meta hash: its derived state must not come back.
  if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
  local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
  if not last then
    return redis.error_reply('the counters in ' .. KEYS[1] .. ' are damaged; clear the session')
  end
  if last < tonumber(ARGV[5]) then return -1 end
end
local version = tonumber(redis.call('HGET', KEYS[3], 'n:' .. ARGV[1]) or '0')
if not version then
  return redis.error_reply('the version of state ' .. ARGV[1] .. ' in ' .. KEYS[3] .. ' is damaged')
end
if ARGV[3] ~= '' and tonumber(ARGV[3]) ~= version then return -1 end
redis.call('HSET', KEYS[3], 'v:' .. ARGV[1], ARGV[2], 'n:' .. ARGV[1], tostring(version + 1))
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[4]))
return version + 1
"""
)

# KEYS: meta, log, state   ARGV: key, ttl_ms
_DELETE_STATE = (
    _PRELUDE
    + """
local problem = check_session(KEYS[1], KEYS[2], KEYS[3])
if problem then return problem end
if redis.call('HDEL', KEYS[3], 'v:' .. ARGV[1], 'n:' .. ARGV[1]) > 0 then
  touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[2]))
end
return 0
"""
)

# KEYS: meta, log, state   ARGV: 'any' | 'user' <user> | 'idle' <cutoff>
# Deletes the session only if the condition still holds when the script runs, so a
# sweep never deletes a session that became active (or changed hands) meanwhile.
# Returns {deleted 0|1, owner or ''}: the caller removes the session from its owner's set.
_FORGET = (
    _PRELUDE
    + """
local meta = KEYS[1]
local problem = wrong_type(meta, 'hash')
if problem then return problem end
local owner = redis.call('HGET', meta, 'user_id') or ''
if ARGV[1] == 'user' then
  if owner ~= ARGV[2] then return {0, owner} end
elseif ARGV[1] == 'idle' then
  local updated = tonumber(redis.call('HGET', meta, 'updated_at') or '')
  if updated and updated >= tonumber(ARGV[2]) then return {0, owner} end
end
if redis.call('DEL', meta, KEYS[2], KEYS[3]) > 0 then return {1, owner} end
return {0, owner}
"""
)

# KEYS: old meta, old log, old state, new meta, new log, new state   (one node, never a Cluster)
# Renames one session's keys from the layout without hash tags; returns 1 if moved.
_MOVE_UNTAGGED = """
if redis.call('EXISTS', KEYS[4], KEYS[5], KEYS[6]) > 0 then return 0 end
for i = 1, 3 do
  if redis.call('EXISTS', KEYS[i]) == 1 then redis.call('RENAME', KEYS[i], KEYS[i + 3]) end
end
redis.call('HDEL', KEYS[4], 'user_key')
return 1
"""

_SCRIPT_SOURCES = {
    "append": _APPEND,
    "read_log": _READ_LOG,
    "replace_record": _REPLACE_RECORD,
    "put_state": _PUT_STATE,
    "delete_state": _DELETE_STATE,
    "forget": _FORGET,
    "move_untagged": _MOVE_UNTAGGED,
}
_SCRIPT_SHAS = {name: hashlib.sha1(source.encode()).hexdigest() for name, source in _SCRIPT_SOURCES.items()}


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
_Operation = Generator[_Request, Any, _T]


# -- escaping and records -----------------------------------------------------------


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


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "\\*?[]" else c for c in text)


def _encode_record(message: Message, session_id: str) -> bytes:
    record = message_to_record(message)
    # The seq is the hash field; keeping it out of the record lets the script assign it.
    del record["seq"]
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


def _ttl_ms(ttl_seconds: float | None) -> int:
    if ttl_seconds is None:
        return 0
    if (
        isinstance(ttl_seconds, bool)
        or not isinstance(ttl_seconds, (int, float))
        or not math.isfinite(ttl_seconds)
        or ttl_seconds <= 0
    ):
        raise ConfigError(f"ttl_seconds must be a positive number of seconds or None, got {ttl_seconds!r}")
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
                    *records,
                ),
            )
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
        window = ("range", str(int(after_seq)), "" if through_seq is None else str(int(through_seq)))
        return (yield from self.read_log(session_id, window))

    def tail(self, session_id: str, limit: int, before_seq: int | None) -> _Operation[list[Message]]:
        if limit <= 0:
            return []
        window = ("tail", str(int(limit)), "" if before_seq is None else str(int(before_seq)))
        return (yield from self.read_log(session_id, window))

    def get(self, session_id: str, seqs: Sequence[int]) -> _Operation[list[Message]]:
        wanted = sorted({int(s) for s in seqs})
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

    def stats(self, session_id: str) -> _Operation[SessionStats]:
        meta, _, _ = self.session_keys(session_id)
        raw = yield _Command(("HGETALL", meta))
        fields = {_text(k): _text(v) for k, v in dict(raw or {}).items()}
        if not fields:
            return SessionStats(session_id, 0, 0, 0)
        try:
            return SessionStats(
                session_id,
                message_count=int(fields.get("count", 0)),
                last_seq=int(fields.get("last_seq", 0)),
                total_tokens=int(fields.get("tokens", 0)),
                user_id=_unescape(fields["user_id"], f"the user_id of {meta}")
                if "user_id" in fields
                else None,
                created_at=float(fields["created_at"]) if "created_at" in fields else None,
                updated_at=float(fields["updated_at"]) if "updated_at" in fields else None,
            )
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreError(
                f"the counters of session {session_id!r:.80} in {meta!r:.120} are malformed ({exc})"
            ) from None

    def get_state(self, session_id: str, key: str) -> _Operation[StateRecord | None]:
        _, _, state = self.session_keys(session_id)
        value, version = yield _Command(("HMGET", state, f"v:{key}", f"n:{key}"))
        if value is None or version is None:
            return None
        try:
            return StateRecord(_text(value), int(version))
        except (ValueError, UnicodeDecodeError) as exc:
            raise StoreError(f"state {key!r} of session {session_id!r:.80} is malformed ({exc})") from None

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


# -- the I/O edges ---------------------------------------------------------------------


def _describe_client(client: Any) -> str:
    manager = getattr(client, "nodes_manager", None)
    if manager is not None:
        names = sorted(getattr(manager, "startup_nodes", {}) or {})
        return "Redis Cluster at " + (",".join(names[:3]) or "?")
    try:
        kwargs = client.connection_pool.connection_kwargs
    except AttributeError:
        return "Redis"
    if "path" in kwargs:
        return f"Redis at unix:{kwargs['path']} db {kwargs.get('db', 0)}"
    return f"Redis at {kwargs.get('host', '?')}:{kwargs.get('port', '?')} db {kwargs.get('db', 0)}"


def _failure(where: str, action: str, exc: BaseException) -> StoreError:
    import redis.exceptions

    if isinstance(exc, redis.exceptions.ResponseError):
        hint = "check that no other data uses this store's key prefix"
    else:
        hint = "check that Redis is running and reachable; the next call reconnects"
    return StoreError(
        f"{where}: {action} failed ({type(exc).__name__}: {exc}). Each write is applied whole or "
        f"not at all; {hint}"
    )


def _pool(pool_class: Any, url: str, socket_timeout: float | None, max_connections: int, retry: Any) -> Any:
    _check_pool_size(max_connections)
    try:
        return pool_class.from_url(
            url,
            max_connections=max_connections,
            timeout=socket_timeout,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            # No automatic retry: a retried script whose first reply was lost would append twice.
            retry=retry,
        )
    except ValueError as exc:
        raise ConfigError(f"cannot use Redis URL {url!r}: {exc}") from None


def _check_pool_size(max_connections: object) -> None:
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigError(f"max_connections must be a positive int, got {max_connections!r}")


def _cluster(cluster_class: Any, url: str, socket_timeout: float | None, retry: Any) -> Any:
    """A Cluster client that follows MOVED/ASK redirections but never re-runs a failed command."""
    try:
        return cluster_class.from_url(
            url,
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_timeout,
            retry=retry,
        )
    except ValueError as exc:
        raise ConfigError(f"cannot use Redis Cluster URL {url!r}: {exc}") from None


def _check_source(url: str | None, client: object) -> None:
    if url is not None and client is not None:
        raise ConfigError("pass either url=... or client=..., not both")
    if url is not None and not isinstance(url, str):
        raise ConfigError(f"url must be a Redis URL string, got {type(url).__name__}")


def _redis_module() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigError("RedisStore needs the redis package: pip install 'convmem[redis]'") from None
    return redis


class RedisStore:
    """A store in Redis (one node or a Cluster), shared by every process and server that uses
    the same URL and prefix.

    Args:
        url: a redis-py connection URL (``redis://``, ``rediss://`` or ``unix://``);
            query options such as ``?socket_timeout=5`` are honoured. With
            ``cluster=True``, the address of any node of the Cluster.
        cluster: connect to a Redis Cluster at `url` (``redis.cluster.RedisCluster``).
        prefix: the namespace of every key this store writes (``prefix:...``).
        ttl_seconds: if set, a session is deleted by Redis after this long without
            a write; every write refreshes the expiry of all the session's keys.
        client: an existing ``redis.Redis`` or ``redis.cluster.RedisCluster`` to use
            instead of `url`. It is not closed by `close`. Its retry policy is kept:
            redis-py retries failed commands by default, which can repeat an append
            whose reply was lost, so pass ``retry=Retry(NoBackoff(), 0)`` to get
            at-most-once appends.
        socket_timeout: seconds to wait for Redis (or for a free pooled connection)
            before a call fails with `StoreError`.
        max_connections: the size of the connection pool of a single node; more
            concurrent calls wait for a free connection instead of failing.

    A lost connection raises `StoreError`; nothing is retried behind your back,
    and the next call reconnects. Sessions that expire by TTL vanish from
    `sessions`; `expire_idle` also prunes them from their users' sets.

    Example::

        store = RedisStore("redis://127.0.0.1:6379/0", prefix="chat", ttl_seconds=7 * 86400)
        store.append("session-1", [Message.create("user", "hi")], user_id="alice")
        store.tail("session-1", 20)

        cluster = RedisStore("redis://10.0.0.5:7000", cluster=True, prefix="chat")
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster: bool = False,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.Redis | redis.cluster.RedisCluster | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        _check_source(url, client)
        _check_pool_size(max_connections)
        redis_module = _redis_module()
        self._errors = (redis_module.RedisError, redis_module.exceptions.RedisClusterException, OSError)
        self._no_script = redis_module.exceptions.NoScriptError
        self._owns_client = client is None
        if client is None:
            from redis.backoff import NoBackoff
            from redis.cluster import RedisCluster
            from redis.retry import Retry

            url = url or DEFAULT_URL
            if cluster:
                try:
                    client = _cluster(RedisCluster, url, socket_timeout, Retry(NoBackoff(), 0))
                except self._errors as exc:
                    raise _failure(f"Redis Cluster at {url}", "connecting", exc) from exc
            else:
                pool = _pool(
                    redis_module.BlockingConnectionPool,
                    url,
                    socket_timeout,
                    max_connections,
                    Retry(NoBackoff(), 0),
                )
                client = redis_module.Redis.from_pool(pool)
        self._client: Any = client
        self._where = _describe_client(client)
        self._scripts_loaded = False

    def __repr__(self) -> str:
        return f"RedisStore({self._where!r}, prefix={self._layout.prefix!r})"

    def __enter__(self) -> RedisStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def prefix(self) -> str:
        return self._layout.prefix

    def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Script):
            return self._evalsha(request)
        if isinstance(request, _Command):
            return self._client.execute_command(*request.args)
        if isinstance(request, _Scan):
            # A Cluster client scans every primary; a single node is the only one.
            return list(self._client.scan_iter(match=request.pattern, count=_SCAN_COUNT, _type=request.kind))
        pipe = self._client.pipeline(transaction=False)
        for command in request.commands:
            pipe.execute_command(*command)
        return pipe.execute()

    def _load_scripts(self) -> None:
        # On a Cluster, SCRIPT LOAD reaches every primary.
        for source in _SCRIPT_SOURCES.values():
            self._client.script_load(source)
        self._scripts_loaded = True

    def _evalsha(self, request: _Script) -> Any:
        # Scripts are loaded before their first use (and again after a server restart
        # forgot them): a NOSCRIPT reply means the script did not run, so a retry is safe.
        if not self._scripts_loaded:
            self._load_scripts()
        command = ("EVALSHA", _SCRIPT_SHAS[request.name], len(request.keys), *request.keys, *request.args)
        try:
            return self._client.execute_command(*command)
        except self._no_script:
            self._load_scripts()
            return self._client.execute_command(*command)

    def _run(self, operation: _Operation[_T], action: str) -> _T:
        try:
            request = next(operation)
            while True:
                try:
                    reply = self._perform(request)
                except self._errors as exc:
                    operation.close()
                    raise _failure(self._where, action, exc) from exc
                request = operation.send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result

    def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return self._run(
            self._layout.append(session_id, messages, user_id), f"append to session {session_id!r:.80}"
        )

    def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return self._run(
            self._layout.messages(session_id, after_seq, through_seq), f"read of session {session_id!r:.80}"
        )

    def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return self._run(
            self._layout.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return self._run(self._layout.get(session_id, seqs), f"read of session {session_id!r:.80}")

    def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return self._run(
            self._layout.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    def stats(self, session_id: str) -> SessionStats:
        return self._run(self._layout.stats(session_id), f"stats of session {session_id!r:.80}")

    def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return self._run(
            self._layout.get_state(session_id, key), f"read of state {key!r} of session {session_id!r:.80}"
        )

    def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        return self._run(
            self._layout.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
        )

    def delete_state(self, session_id: str, key: str) -> None:
        self._run(
            self._layout.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    def clear(self, session_id: str) -> None:
        self._run(self._layout.clear(session_id), f"clear of session {session_id!r:.80}")

    def sessions(self, *, user_id: str | None = None) -> list[str]:
        return self._run(self._layout.sessions(user_id), "listing sessions")

    def forget_user(self, user_id: str) -> list[str]:
        return self._run(self._layout.forget_user(user_id), f"forget_user({user_id!r:.80})")

    def expire_idle(self, older_than_seconds: float) -> list[str]:
        """Delete sessions idle longer than `older_than_seconds` by Redis's clock.

        With ``ttl_seconds`` Redis already deletes idle sessions by itself; this
        sweep then only removes the index entries they leave behind (those ids
        are not returned). Without a TTL it is the retention path.
        """
        return self._run(self._layout.expire_idle(older_than_seconds), "expire_idle")

    def migrate_untagged_keys(self) -> int:
        """Move sessions written by convmem before hash tags into today's key layout.

        Renames ``P:session:E:*`` to ``P:session:{E}:*`` and ``P:user:U:sessions`` to
        ``P:user:{U}:sessions`` on this (single) server, drops the old ``P:sessions``
        index, and returns how many sessions were moved. Safe to run again; stop
        writers of the old version first. To then move into a Cluster, use
        ``redis-cli --cluster import <cluster node> --cluster-from <this server>``.
        """
        if hasattr(self._client, "nodes_manager"):
            raise ConfigError(
                "keys without hash tags were only ever written to a single Redis server: run "
                "migrate_untagged_keys there, then move them with redis-cli --cluster import"
            )
        return self._run(self._layout.migrate_untagged_keys(), "migrating keys without hash tags")

    def close(self) -> None:
        """Close the connection pool, unless the client was passed in."""
        if self._owns_client:
            self._client.close()


class AsyncRedisStore:
    """`RedisStore` for asyncio (``redis.asyncio``): the same arguments, and the same
    methods as coroutines, under the same names::

        store = AsyncRedisStore("redis://127.0.0.1:6379/0", prefix="chat")
        await store.append("session-1", [Message.create("user", "hi")])
        window = await store.tail("session-1", 20)
        await store.close()

    `client` may be a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``;
    ``cluster=True`` makes the latter from `url`. A store is bound to the event loop
    it is first used in, like any redis.asyncio client. Both classes share one
    implementation and one key layout, so sync and async processes can serve the
    same sessions.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        cluster: bool = False,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        _check_source(url, client)
        _check_pool_size(max_connections)
        redis_module = _redis_module()
        self._owns_client = client is None
        if client is None:
            from redis.asyncio import BlockingConnectionPool, Redis
            from redis.asyncio.cluster import RedisCluster
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            url = url or DEFAULT_URL
            if cluster:
                client = _cluster(RedisCluster, url, socket_timeout, Retry(NoBackoff(), 0))
            else:
                pool = _pool(
                    BlockingConnectionPool, url, socket_timeout, max_connections, Retry(NoBackoff(), 0)
                )
                client = Redis.from_pool(pool)
        self._client: Any = client
        self._errors = (redis_module.RedisError, redis_module.exceptions.RedisClusterException, OSError)
        self._no_script = redis_module.exceptions.NoScriptError
        self._where = _describe_client(client)
        self._scripts_loaded = False
        self._loading: asyncio.Lock | None = None

    def __repr__(self) -> str:
        return f"AsyncRedisStore({self._where!r}, prefix={self._layout.prefix!r})"

    async def __aenter__(self) -> AsyncRedisStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @property
    def prefix(self) -> str:
        return self._layout.prefix

    async def _perform(self, request: _Request) -> Any:
        if isinstance(request, _Script):
            return await self._evalsha(request)
        if isinstance(request, _Command):
            return await self._client.execute_command(*request.args)
        if isinstance(request, _Scan):
            return [
                key
                async for key in self._client.scan_iter(
                    match=request.pattern, count=_SCAN_COUNT, _type=request.kind
                )
            ]
        async with self._client.pipeline(transaction=False) as pipe:
            for command in request.commands:
                pipe.execute_command(*command)
            return await pipe.execute()

    async def _load_scripts(self, known_missing: bool) -> None:
        # One load at a time: redis.asyncio's Cluster client breaks connections when many
        # calls hit NOSCRIPT and load the same script at once.
        if self._loading is None:
            self._loading = asyncio.Lock()
        async with self._loading:
            if self._scripts_loaded and not known_missing:
                return
            for source in _SCRIPT_SOURCES.values():
                await self._client.script_load(source)
            self._scripts_loaded = True

    async def _evalsha(self, request: _Script) -> Any:
        if not self._scripts_loaded:
            await self._load_scripts(known_missing=False)
        command = ("EVALSHA", _SCRIPT_SHAS[request.name], len(request.keys), *request.keys, *request.args)
        try:
            return await self._client.execute_command(*command)
        except self._no_script:
            await self._load_scripts(known_missing=True)
            return await self._client.execute_command(*command)

    async def _run(self, operation: _Operation[_T], action: str) -> _T:
        try:
            request = next(operation)
            while True:
                try:
                    reply = await self._perform(request)
                except self._errors as exc:
                    operation.close()
                    raise _failure(self._where, action, exc) from exc
                request = operation.send(reply)
        except StopIteration as done:
            result: _T = done.value
            return result

    async def append(
        self, session_id: str, messages: Sequence[Message], *, user_id: str | None = None
    ) -> list[Message]:
        return await self._run(
            self._layout.append(session_id, messages, user_id), f"append to session {session_id!r:.80}"
        )

    async def messages(
        self, session_id: str, *, after_seq: int = 0, through_seq: int | None = None
    ) -> list[Message]:
        return await self._run(
            self._layout.messages(session_id, after_seq, through_seq), f"read of session {session_id!r:.80}"
        )

    async def tail(self, session_id: str, limit: int, *, before_seq: int | None = None) -> list[Message]:
        return await self._run(
            self._layout.tail(session_id, limit, before_seq), f"read of session {session_id!r:.80}"
        )

    async def get(self, session_id: str, seqs: Sequence[int]) -> list[Message]:
        return await self._run(self._layout.get(session_id, seqs), f"read of session {session_id!r:.80}")

    async def set_status(self, session_id: str, seq: int, status: TurnStatus) -> Message:
        return await self._run(
            self._layout.set_status(session_id, seq, status),
            f"status change of seq={seq} in session {session_id!r:.80}",
        )

    async def stats(self, session_id: str) -> SessionStats:
        return await self._run(self._layout.stats(session_id), f"stats of session {session_id!r:.80}")

    async def get_state(self, session_id: str, key: str) -> StateRecord | None:
        return await self._run(
            self._layout.get_state(session_id, key), f"read of state {key!r} of session {session_id!r:.80}"
        )

    async def put_state(
        self,
        session_id: str,
        key: str,
        value: str,
        *,
        expected_version: int | None = None,
        requires_seq: int | None = None,
    ) -> StateRecord | None:
        return await self._run(
            self._layout.put_state(session_id, key, value, expected_version, requires_seq),
            f"write of state {key!r} of session {session_id!r:.80}",
        )

    async def delete_state(self, session_id: str, key: str) -> None:
        await self._run(
            self._layout.delete_state(session_id, key),
            f"delete of state {key!r} of session {session_id!r:.80}",
        )

    async def clear(self, session_id: str) -> None:
        await self._run(self._layout.clear(session_id), f"clear of session {session_id!r:.80}")

    async def sessions(self, *, user_id: str | None = None) -> list[str]:
        return await self._run(self._layout.sessions(user_id), "listing sessions")

    async def forget_user(self, user_id: str) -> list[str]:
        return await self._run(self._layout.forget_user(user_id), f"forget_user({user_id!r:.80})")

    async def expire_idle(self, older_than_seconds: float) -> list[str]:
        """See `RedisStore.expire_idle`."""
        return await self._run(self._layout.expire_idle(older_than_seconds), "expire_idle")

    async def close(self) -> None:
        """Close the connection pool, unless the client was passed in."""
        if self._owns_client:
            await self._client.aclose()
