"""The Lua scripts `_RedisLayout` asks Redis to run, and their SHA1 names for EVALSHA.

Every write that must be atomic is one script on one node: a session's keys
share a Cluster hash tag, so a script never spans slots.
"""

from __future__ import annotations

import hashlib

# The append script's reply when the session must first be added to its user's set.
_REGISTER = "register"
# The append script's reply (followed by the owner's escaped id) when another user owns the session.
_OWNED = "owned:"

# Redis does not roll a script back when a command in it fails: commands that
# ran before the error stay applied. So every write script first checks all
# that could make a later command fail (foreign keys of another type under our
# prefix, damaged counters) and only then writes; after the checks no command
# can fail, and a script is applied whole or not at all.
# Lua's tostring writes a number from 1e15 up in exponent form ("1e+15"), which is no seq
# nor counter; every number a script writes as text goes through int().
_INTEGERS = """
local function int(n) return string.format('%d', n) end
"""

_PRELUDE = (
    _INTEGERS
    + """
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
)

# KEYS: meta, log, state   ARGV: has_user, user, registered, ttl_ms, tokens, generation, record...
# Returns the first seq, or 'register' (nothing written) when this append would give the
# session its user and the client has not yet added the session to the user's set, or
# 'owned:<owner>' (nothing written) when another user owns the session.
_APPEND = (
    _PRELUDE
    + """
local meta, log, state = KEYS[1], KEYS[2], KEYS[3]
local has_user, user, registered, ttl_ms = ARGV[1] == '1', ARGV[2], ARGV[3] == '1', tonumber(ARGV[4])
local count = #ARGV - 6
local problem = check_session(meta, log, state)
if problem then return problem end
local counters = redis.call('HMGET', meta, 'last_seq', 'count', 'tokens', 'user_id')
for i = 1, 3 do
  if counters[i] and not tonumber(counters[i]) then
    return redis.error_reply('the counters in ' .. meta .. ' are damaged; clear the session')
  end
end
if has_user and counters[4] and counters[4] ~= user then return '"""
    + _OWNED
    + """' .. counters[4] end
local claims = has_user and not counters[4]
if claims and not registered then return '"""
    + _REGISTER
    + """' end

local first = tonumber(counters[1] or '0') + 1
local batch = {}
for i = 1, count do
  batch[#batch + 1] = int(first + i - 1)
  batch[#batch + 1] = ARGV[6 + i]
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
-- The log's generation is made with the log; deleting or replacing messages renews it.
redis.call('HSETNX', meta, 'generation', ARGV[6])
touch(meta, log, state, ttl_ms)
return int(first)
"""
)

# KEYS: meta, log   ARGV: 'range', after_seq, through_seq|''  or  'tail', limit, before_seq|''
# Returns {seq, record, seq, record, ...} in seq order.
# The work is bounded by the log's size, not by last_seq: a window wider than the log
# (a damaged counter, a huge through_seq, a tail over many deleted seqs) reads the log
# itself instead of every seq in it.
_READ_LOG = (
    _INTEGERS
    + """
local last = tonumber(redis.call('HGET', KEYS[1], 'last_seq') or '0') or 0
local size = redis.call('HLEN', KEYS[2])
local out = {}

local function whole_log(lo, hi, keep_last)
  local found = {}
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local seq = tonumber(all[i])
    if seq and seq >= lo and seq <= hi then found[#found + 1] = {seq, all[i + 1]} end
  end
  table.sort(found, function(a, b) return a[1] < b[1] end)
  local first = 1
  if keep_last and #found > keep_last then first = #found - keep_last + 1 end
  for i = first, #found do
    out[#out + 1] = int(found[i][1])
    out[#out + 1] = found[i][2]
  end
  return out
end

if ARGV[1] == 'tail' then
  local hi = last
  if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3]) - 1) end
  local limit = math.min(tonumber(ARGV[2]), size)
  -- Newest first; seqs of deleted messages are gaps, so keep going down until `limit` are found.
  local found = {}
  local seq, scanned = hi, 0
  while #found < limit and seq >= 1 do
    local step = math.min(limit - #found, 1000)
    if scanned + step > size then return whole_log(1, hi, limit) end
    local fields = {}
    local stop = math.max(1, seq - step + 1)
    for s = seq, stop, -1 do fields[#fields + 1] = int(s) end
    local values = redis.call('HMGET', KEYS[2], unpack(fields))
    for i = 1, #fields do
      if values[i] and #found < limit then found[#found + 1] = {fields[i], values[i]} end
    end
    scanned = scanned + #fields
    seq = stop - 1
  end
  for i = #found, 1, -1 do
    out[#out + 1] = found[i][1]
    out[#out + 1] = found[i][2]
  end
  return out
end

local lo, hi = tonumber(ARGV[2]) + 1, last
if ARGV[3] ~= '' then hi = math.min(hi, tonumber(ARGV[3])) end
if lo < 1 then lo = 1 end
if hi < lo then return out end
if hi - lo + 1 > size then return whole_log(lo, hi, nil) end
local fields = {}
for seq = lo, hi do
  fields[#fields + 1] = int(seq)
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
)

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

# KEYS: meta, log, state   ARGV: ttl_ms, generation, seq...
# Deletes the messages with these seqs if every one is there: returns {1, seq, record, ...}
# (the deleted ones), or {0, missing seq, ...} with nothing deleted.
_DELETE_MESSAGES = (
    _PRELUDE
    + """
local meta, log, state = KEYS[1], KEYS[2], KEYS[3]
local problem = check_session(meta, log, state)
if problem then return problem end
local seqs = {}
for i = 3, #ARGV do seqs[#seqs + 1] = ARGV[i] end
-- unpack() takes a few thousand values at most: read and delete in chunks.
local function chunks(command, key)
  local replies = {}
  for start = 1, #seqs, 1000 do
    local reply = redis.call(command, key, unpack(seqs, start, math.min(start + 999, #seqs)))
    if type(reply) == 'table' then
      for i = 1, #seqs do
        if start + i - 1 > math.min(start + 999, #seqs) then break end
        replies[start + i - 1] = reply[i]
      end
    end
  end
  return replies
end
local records = chunks('HMGET', log)
local missing = {0}
for i = 1, #seqs do
  if not records[i] then missing[#missing + 1] = seqs[i] end
end
if #missing > 1 then return missing end
local tokens = 0
for i = 1, #records do
  local ok, record = pcall(cjson.decode, records[i])
  if ok and type(record) == 'table' and type(record['token_count']) == 'number' then
    tokens = tokens + record['token_count']
  end
end
local out = {1}
for i = 1, #seqs do
  out[#out + 1] = seqs[i]
  out[#out + 1] = records[i]
end
chunks('HDEL', log)
redis.call('HINCRBY', meta, 'count', -#seqs)
redis.call('HINCRBY', meta, 'tokens', 0 - tokens)  -- never '-0'
redis.call('HSET', meta, 'generation', ARGV[2])
touch(meta, log, state, tonumber(ARGV[1]))
return out
"""
)

# KEYS: meta, log, state   ARGV: seq, record, tokens, ttl_ms, generation
# Returns 1, or 0 (nothing written) when the log has no message with that seq.
_REPLACE_MESSAGE = (
    _PRELUDE
    + """
local meta, log, state = KEYS[1], KEYS[2], KEYS[3]
local problem = check_session(meta, log, state)
if problem then return problem end
local old = redis.call('HGET', log, ARGV[1])
if not old then return 0 end
local ok, record = pcall(cjson.decode, old)
local before = 0
if ok and type(record) == 'table' and type(record['token_count']) == 'number' then
  before = record['token_count']
end
redis.call('HSET', log, ARGV[1], ARGV[2])
redis.call('HINCRBY', meta, 'tokens', tonumber(ARGV[3]) - before)
redis.call('HSET', meta, 'generation', ARGV[5])
touch(meta, log, state, tonumber(ARGV[4]))
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
redis.call('HSET', KEYS[3], 'v:' .. ARGV[1], ARGV[2], 'n:' .. ARGV[1], int(version + 1))
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
    "delete_messages": _DELETE_MESSAGES,
    "replace_message": _REPLACE_MESSAGE,
    "put_state": _PUT_STATE,
    "delete_state": _DELETE_STATE,
    "forget": _FORGET,
    "move_untagged": _MOVE_UNTAGGED,
}
_SCRIPT_SHAS = {name: hashlib.sha1(source.encode()).hexdigest() for name, source in _SCRIPT_SOURCES.items()}
