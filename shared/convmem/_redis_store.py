"""`RedisStore` and `AsyncRedisStore`: session logs in Redis, shared by many processes and servers.

Key layout (``P`` is the prefix, ``E`` an escaped session id, ``U`` an escaped user id)::

    P:sessions                set   escaped ids of every session
    P:user:U:sessions         set   escaped ids of one user's sessions
    P:session:E:meta          hash  last_seq, count, tokens, user_id, user_key, created_at, updated_at
    P:session:E:log           hash  seq -> message record (JSON)
    P:session:E:state         hash  "v:<key>" -> value, "n:<key>" -> version

Ids are percent-encoded byte by byte (only ``A-Z a-z 0-9 - _ . ~`` stay as they
are), so an escaped id never holds ``:``, ``*``, ``?``, ``{``, ``}`` or NUL, and two
different ids never share a key. Every write is one Lua script, which Redis runs
whole or not at all: concurrent appends from any number of clients get
consecutive seqs, and a lost connection never leaves half a write behind.
Because a session's seqs are contiguous (1..last_seq), reading a window is one
script call fetching exactly the wanted fields: O(window), whatever the history.

Both classes share every piece of logic below; they differ only in how a
request reaches Redis (a blocking call or an awaited one).

Not supported: Redis Cluster (a write touches the session keys and the index
sets in one script, so all keys must live on one node).
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Generator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, unquote_to_bytes

from ._codec import message_from_record, message_to_record
from ._errors import ConfigError, InvalidMessageError, StoreError
from ._models import Message, TurnStatus
from ._store import SessionStats, StateRecord, idle_cutoff

if TYPE_CHECKING:
    import redis
    import redis.asyncio

__all__ = ["AsyncRedisStore", "RedisStore"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"

_T = TypeVar("_T")

# Records a set_status or CAS loop re-reads before giving up on a record that keeps changing.
_CAS_ATTEMPTS = 16
# Sessions examined per SSCAN step of expire_idle.
_SCAN_BATCH = 500

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

# KEYS: meta, log, state, index, user_key   ARGV: session, has_user, user, ttl_ms, tokens, record...
_APPEND = (
    _PRELUDE
    + """
local meta, log, state, index, user_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local session, has_user, user, ttl_ms = ARGV[1], ARGV[2] == '1', ARGV[3], tonumber(ARGV[4])
local count = #ARGV - 5
local problem = check_session(meta, log, state) or wrong_type(index, 'set')
if not problem and has_user then problem = wrong_type(user_key, 'set') end
if problem then return problem end
local counters = redis.call('HMGET', meta, 'last_seq', 'count', 'tokens')
for i = 1, 3 do
  if counters[i] and not tonumber(counters[i]) then
    return redis.error_reply('the counters in ' .. meta .. ' are damaged; clear the session')
  end
end

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
redis.call('SADD', index, session)
if has_user then
  redis.call('HSETNX', meta, 'user_id', user)
  if redis.call('HGET', meta, 'user_id') == user then
    redis.call('HSET', meta, 'user_key', user_key)
    redis.call('SADD', user_key, session)
    if ttl_ms > 0 then redis.call('PEXPIRE', user_key, ttl_ms) end
  end
end
touch(meta, log, state, ttl_ms)
return tostring(first)
"""
)

# KEYS: meta, log   ARGV: 'range', after_seq, through_seq|''  or  'tail', limit, before_seq|''
# Returns {first_seq, record_or_nil, ...}.
_READ_LOG = """
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
local lo, hi = 1, last
if ARGV[1] == 'range' then
  lo = tonumber(ARGV[2]) + 1
  if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3])) end
else
  if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3]) - 1) end
  lo = hi - tonumber(ARGV[2]) + 1
end
if lo < 1 then lo = 1 end
local out = {tostring(lo)}
local fields = {}
for seq = lo, hi do
  fields[#fields + 1] = tostring(seq)
  if #fields == 1000 or seq == hi then
    local values = redis.call('HMGET', KEYS[2], unpack(fields))
    for i = 1, #fields do out[#out + 1] = values[i] end
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

# KEYS: meta, log, state, index   ARGV: session, key, value, expected_version|'', ttl_ms, requires_seq|''
# Returns the new version, or -1 when the compare-and-set or the requires_seq check failed.
_PUT_STATE = (
    _PRELUDE
    + """
local problem = check_session(KEYS[1], KEYS[2], KEYS[3]) or wrong_type(KEYS[4], 'set')
if problem then return problem end
if ARGV[6] ~= '' then
  -- A deleted (or TTL-expired) session has no meta hash: its derived state must not come back.
  if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
  local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0')
  if not last then
    return redis.error_reply('the counters in ' .. KEYS[1] .. ' are damaged; clear the session')
  end
  if last < tonumber(ARGV[6]) then return -1 end
end
local version = tonumber(redis.call('HGET', KEYS[3], 'n:' .. ARGV[2]) or '0')
if not version then
  return redis.error_reply('the version of state ' .. ARGV[2] .. ' in ' .. KEYS[3] .. ' is damaged')
end
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= version then return -1 end
redis.call('HSET', KEYS[3], 'v:' .. ARGV[2], ARGV[3], 'n:' .. ARGV[2], tostring(version + 1))
redis.call('SADD', KEYS[4], ARGV[1])
touch(KEYS[1], KEYS[2], KEYS[3], tonumber(ARGV[5]))
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

# KEYS: meta, log, state, index, user_key   ARGV: session, 'any' | 'user' <user> | 'idle' <cutoff>
# Deletes the session only if the condition still holds when the script runs,
# so a sweep never deletes a session that became active (or changed hands) meanwhile.
_FORGET = (
    _PRELUDE
    + """
local meta = KEYS[1]
local problem = wrong_type(meta, 'hash') or wrong_type(KEYS[4], 'set') or wrong_type(KEYS[5], 'set')
if problem then return problem end
if ARGV[2] == 'user' then
  if redis.call('HGET', meta, 'user_id') ~= ARGV[3] then
    redis.call('SREM', KEYS[5], ARGV[1])
    return 0
  end
elseif ARGV[2] == 'idle' then
  local updated = tonumber(redis.call('HGET', meta, 'updated_at') or '')
  if updated and updated >= tonumber(ARGV[3]) then return 0 end
end
local user_key = redis.call('HGET', meta, 'user_key')
if user_key and wrong_type(user_key, 'set') then user_key = nil end
if user_key then redis.call('SREM', user_key, ARGV[1]) end
redis.call('SREM', KEYS[4], ARGV[1])
if redis.call('DEL', meta, KEYS[2], KEYS[3]) > 0 then return 1 end
return 0
"""
)

_SCRIPTS = {
    "append": _APPEND,
    "read_log": _READ_LOG,
    "replace_record": _REPLACE_RECORD,
    "put_state": _PUT_STATE,
    "delete_state": _DELETE_STATE,
    "forget": _FORGET,
}


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


_Request = _Script | _Command | _Pipeline
# An operation is a generator: it yields requests, is sent their replies, and
# returns its result. The sync and async stores only differ in how they drive it.
_Operation = Generator[_Request, Any, _T]


# -- escaping and records -----------------------------------------------------------


def _escape(value: str) -> str:
    # surrogatepass: an id with a lone surrogate still maps to its own key.
    return quote(value.encode("utf-8", "surrogatepass"), safe="")


def _unescape(value: str | bytes) -> str:
    text = value.decode("ascii") if isinstance(value, bytes) else value
    return unquote_to_bytes(text).decode("utf-8", "surrogatepass")


def _text(value: str | bytes) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value


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
    bad = [c for c in prefix if c in "*?[]{}" or not c.isprintable() or c.isspace()]
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
        self.index_key = f"{self.prefix}:sessions"

    def session_keys(self, session_id: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:session:{_escape(session_id)}"
        return f"{base}:meta", f"{base}:log", f"{base}:state"

    def user_key(self, user_id: str) -> str:
        return f"{self.prefix}:user:{_escape(user_id)}:sessions"

    def append(
        self, session_id: str, messages: Sequence[Message], user_id: str | None
    ) -> _Operation[list[Message]]:
        records = [_encode_record(m, session_id) for m in messages]
        meta, log, state = self.session_keys(session_id)
        user_key = self.user_key(user_id) if user_id is not None else meta
        first = yield _Script(
            "append",
            (meta, log, state, self.index_key, user_key),
            (
                _escape(session_id),
                "1" if user_id is not None else "0",
                _escape(user_id) if user_id is not None else "",
                str(self.ttl_ms),
                str(sum(m.token_count or 0 for m in messages)),
                *records,
            ),
        )
        first_seq = int(first)
        return [dataclasses.replace(m, seq=first_seq + i) for i, m in enumerate(messages)]

    def read_log(self, session_id: str, window: tuple[str, str, str]) -> _Operation[list[Message]]:
        meta, log, _ = self.session_keys(session_id)
        reply = yield _Script("read_log", (meta, log), window)
        first_seq = int(reply[0])
        return [
            _decode_record(raw, first_seq + i, session_id)
            for i, raw in enumerate(reply[1:])
            if raw is not None
        ]

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
                user_id=_unescape(fields["user_id"]) if "user_id" in fields else None,
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
        meta, log, state = self.session_keys(session_id)
        version = yield _Script(
            "put_state",
            (meta, log, state, self.index_key),
            (
                _escape(session_id),
                key,
                value,
                "" if expected_version is None else str(int(expected_version)),
                str(self.ttl_ms),
                "" if requires_seq is None else str(int(requires_seq)),
            ),
        )
        return None if int(version) < 0 else StateRecord(value, int(version))

    def delete_state(self, session_id: str, key: str) -> _Operation[None]:
        meta, log, state = self.session_keys(session_id)
        yield _Script("delete_state", (meta, log, state), (key, str(self.ttl_ms)))

    def forget(
        self, session_id: str, condition: tuple[str, ...], user_key: str | None = None
    ) -> _Operation[bool]:
        meta, log, state = self.session_keys(session_id)
        deleted = yield _Script(
            "forget",
            # Without a user the script does not use KEYS[5]; any set key will do.
            (meta, log, state, self.index_key, user_key or self.index_key),
            (_escape(session_id), *condition),
        )
        return int(deleted) == 1

    def clear(self, session_id: str) -> _Operation[None]:
        yield from self.forget(session_id, ("any",))

    def sessions(self, user_id: str | None) -> _Operation[list[str]]:
        key = self.index_key if user_id is None else self.user_key(user_id)
        members = yield _Command(("SMEMBERS", key))
        ids = sorted(_unescape(m) for m in members or ())
        if not ids:
            return []
        # Index entries outlive sessions that expired by TTL; list only live ones.
        alive = yield _Pipeline(tuple(("EXISTS", self.session_keys(sid)[0]) for sid in ids))
        return [sid for sid, exists in zip(ids, alive, strict=True) if int(exists)]

    def forget_user(self, user_id: str) -> _Operation[list[str]]:
        user_key = self.user_key(user_id)
        members = yield _Command(("SMEMBERS", user_key))
        deleted = []
        for session_id in sorted(_unescape(m) for m in members or ()):
            if (yield from self.forget(session_id, ("user", _escape(user_id)), user_key)):
                deleted.append(session_id)
        return deleted

    def expire_idle(self, older_than_seconds: float) -> _Operation[list[str]]:
        seconds, microseconds = yield _Command(("TIME",))
        cutoff = idle_cutoff(older_than_seconds, int(seconds) + int(microseconds) / 1e6)
        if math.isinf(cutoff):
            return []
        deleted: list[str] = []
        cursor = 0
        while True:
            next_cursor, members = yield _Command(
                ("SSCAN", self.index_key, str(cursor), "COUNT", str(_SCAN_BATCH))
            )
            cursor = int(next_cursor)
            ids = [_unescape(m) for m in members]
            if ids:
                activity = yield _Pipeline(
                    tuple(("HGET", self.session_keys(sid)[0], "updated_at") for sid in ids)
                )
                for session_id, updated_at in zip(ids, activity, strict=True):
                    if updated_at is None:
                        # Expired by TTL: only the index entry is left.
                        yield from self.forget(session_id, ("any",))
                    elif float(updated_at) < cutoff and (
                        yield from self.forget(session_id, ("idle", repr(cutoff)))
                    ):
                        deleted.append(session_id)
            if cursor == 0:
                return sorted(deleted)


# -- the I/O edges ---------------------------------------------------------------------


def _describe_client(client: Any) -> str:
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
    if isinstance(max_connections, bool) or not isinstance(max_connections, int) or max_connections < 1:
        raise ConfigError(f"max_connections must be a positive int, got {max_connections!r}")
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


def _redis_module() -> Any:
    try:
        import redis
    except ImportError:
        raise ConfigError("RedisStore needs the redis package: pip install 'convmem[redis]'") from None
    return redis


class RedisStore:
    """A store in Redis, shared by every process and server that uses the same URL and prefix.

    Args:
        url: a redis-py connection URL (``redis://``, ``rediss://`` or ``unix://``);
            query options such as ``?socket_timeout=5`` are honoured.
        prefix: the namespace of every key this store writes (``prefix:...``).
        ttl_seconds: if set, a session is deleted by Redis after this long without
            a write; every write refreshes the expiry of all the session's keys.
        client: an existing ``redis.Redis`` to use instead of `url`. It is not closed
            by `close`. Its retry policy is kept: redis-py retries failed commands
            by default, which can repeat an append whose reply was lost, so pass
            ``retry=Retry(NoBackoff(), 0)`` to get at-most-once appends.
        socket_timeout: seconds to wait for Redis (or for a free pooled connection)
            before a call fails with `StoreError`.
        max_connections: the size of the connection pool; more concurrent calls
            wait for a free connection instead of failing.

    A lost connection raises `StoreError`; nothing is retried behind your back,
    and the next call reconnects. Sessions that expire by TTL vanish from
    `sessions`; `expire_idle` also sweeps their leftover index entries.

    Example::

        store = RedisStore("redis://127.0.0.1:6379/0", prefix="chat", ttl_seconds=7 * 86400)
        store.append("session-1", [Message.create("user", "hi")], user_id="alice")
        store.tail("session-1", 20)
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.Redis | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        redis_module = _redis_module()
        self._owns_client = client is None
        if client is None:
            from redis.backoff import NoBackoff
            from redis.retry import Retry

            pool = _pool(
                redis_module.BlockingConnectionPool,
                url,
                socket_timeout,
                max_connections,
                Retry(NoBackoff(), 0),
            )
            client = redis_module.Redis.from_pool(pool)
        self._client: redis.Redis = client
        self._errors = (redis_module.RedisError, OSError)
        self._where = _describe_client(client)
        self._scripts = {name: client.register_script(source) for name, source in _SCRIPTS.items()}

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
            return self._scripts[request.name](keys=request.keys, args=request.args)
        if isinstance(request, _Command):
            return self._client.execute_command(*request.args)
        pipe = self._client.pipeline(transaction=False)
        for command in request.commands:
            pipe.execute_command(*command)
        return pipe.execute()

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

    A store is bound to the event loop it is first used in, like any redis.asyncio client.
    Both classes share one implementation and one key layout, so sync and async
    processes can serve the same sessions.
    """

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        prefix: str = "convmem",
        ttl_seconds: float | None = None,
        client: redis.asyncio.Redis | None = None,
        socket_timeout: float | None = 10.0,
        max_connections: int = 64,
    ) -> None:
        self._layout = _RedisLayout(prefix, ttl_seconds)
        redis_module = _redis_module()
        self._owns_client = client is None
        if client is None:
            from redis.asyncio import BlockingConnectionPool, Redis
            from redis.asyncio.retry import Retry
            from redis.backoff import NoBackoff

            pool = _pool(BlockingConnectionPool, url, socket_timeout, max_connections, Retry(NoBackoff(), 0))
            client = Redis.from_pool(pool)
        self._client: redis.asyncio.Redis = client
        self._errors = (redis_module.RedisError, OSError)
        self._where = _describe_client(client)
        self._scripts = {name: client.register_script(source) for name, source in _SCRIPTS.items()}

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
            return await self._scripts[request.name](keys=request.keys, args=request.args)
        if isinstance(request, _Command):
            return await self._client.execute_command(*request.args)
        async with self._client.pipeline(transaction=False) as pipe:
            for command in request.commands:
                pipe.execute_command(*command)
            return await pipe.execute()

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
