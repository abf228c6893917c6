"""Lua scripts: every state change of a run happens inside Redis, atomically, in one of these.

Key layout is in :mod:`agents_celery.keys`. Scripts signal refusals with an error reply whose first word
is a code (``FENCED``, ``NOTFOUND``, ``ENDED``, ``EXISTS``, ``CONFLICT``, ``BUSY``); :func:`refusal` turns it
into the matching exception. Each script touches the keys of one run only (one hash tag, one slot).
"""

from __future__ import annotations

import redis

from .errors import AgentsCeleryError, FencedError, RunBusyError, RunFinishedError, RunNotFoundError, StateError

# Appends ARGV[first_arg..] as events with contiguous offsets taken from the run hash's ``next`` counter.
# The stream entry id is "<offset>-1", so the id is the offset and readers need no lookup.
_APPEND = """
local function append(run_key, events_key, first_arg)
  local n = #ARGV - first_arg + 1
  if n <= 0 then return tonumber(redis.call('HGET', run_key, 'next')) end
  local first = redis.call('HINCRBY', run_key, 'next', n) - n
  for i = 0, n - 1 do
    redis.call('XADD', events_key, (first + i) .. '-1', 'event', ARGV[first_arg + i])
  end
  return first
end
"""

# Refuses unless the run exists, has not ended and the caller's token is the current lease.
_GUARD = """
local function guard(run_key, lease_key, token)
  local log = redis.call('HGET', run_key, 'log')
  if not log then return 'NOTFOUND' end
  if log == 'ended' then return 'ENDED' end
  if redis.call('GET', lease_key) ~= token then return 'FENCED' end
  return nil
end
"""

# After the run ended: everything of the run expires after the retention; a tombstone outlives it.
_EXPIRE = """
local function expire_run(keys, retention, tombstone)
  for i = 1, #keys do redis.call('PEXPIRE', keys[i], retention) end
  redis.call('SET', KEYS[5], '1', 'PX', retention + tombstone)
end
"""

# KEYS: run, events. ARGV: npairs, k1, v1, ..., events...  -> first offset
CREATE = (
    _APPEND
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.error_reply('EXISTS run exists already') end
local npairs = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'log', 'live', 'next', 0, 'step', 0, 'attempt', 0)
for i = 1, npairs do redis.call('HSET', KEYS[1], ARGV[2 * i], ARGV[2 * i + 1]) end
return append(KEYS[1], KEYS[2], 2 + 2 * npairs)
"""
)

# KEYS: run, events, lease. ARGV: token, events...  -> first offset
APPEND = (
    _APPEND
    + _GUARD
    + """
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
return append(KEYS[1], KEYS[2], 2)
"""
)

# Sets the log status (live | paused | ended) and appends events with it, atomically.
# KEYS: run, events, lease, effects, gone, stop, messages. ARGV: token, status, retention_ms, tombstone_ms, events...
SET_STATUS = (
    _APPEND
    + _GUARD
    + _EXPIRE
    + """
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
local first = append(KEYS[1], KEYS[2], 5)
redis.call('HSET', KEYS[1], 'log', ARGV[2])
if ARGV[2] == 'ended' then
  expire_run({KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, tonumber(ARGV[3]), tonumber(ARGV[4]))
end
return first
"""
)

# Compare-and-set of the run state on its step number, with events and the log status, atomically.
# KEYS: run, events, lease, effects, gone, stop, messages[, step queue, unacked index, unacked hash].
# ARGV: token, expected_step, new_step, state_json, log_status, retention_ms, tombstone_ms, release,
#       next_kind, now_ms, state_id, next step's task message or '', ledger calls json,
#       keep (messages list elements to keep, -1: all), m (messages to append), delivery tag to ack or '',
#       messages..., events...
# With a task message (the broker is this Redis), it is LPUSHed to the step queue only if the commit
# succeeds: the checkpoint and the next step's task are written together, and there is no window in which
# a crash leaves a committed step without its next task. With a delivery tag, the step's own message leaves
# kombu's unacked index and hash (what the Redis transport's ack does) in the same call: a committed step's
# message is acked with its checkpoint, and a refused commit acks nothing.
# With release = '1' the lease is given up in the same call (the attempt has nothing left to write).
# ``next_kind`` (model | tools) lets the next claim write its STEP_STARTED; ``committed_ms`` tells the
# sweeper how long ago the next step was due to be enqueued; ``state_id`` names this version of the state,
# so a claim by the process that wrote it can skip sending it back; ``ledger calls`` (a JSON list of tool
# call ids) are the calls the next tool step starts, which its claim records in the effect ledger.
COMMIT = (
    _APPEND
    + _GUARD
    + _EXPIRE
    + """
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
local step = redis.call('HGET', KEYS[1], 'step')
if step ~= ARGV[2] then return redis.error_reply('CONFLICT step is ' .. tostring(step)) end
local keep, m = tonumber(ARGV[14]), tonumber(ARGV[15])
if keep == 0 then redis.call('DEL', KEYS[7]) elseif keep > 0 then redis.call('LTRIM', KEYS[7], 0, keep - 1) end
for i = 1, m do redis.call('RPUSH', KEYS[7], ARGV[16 + i]) end
local first = append(KEYS[1], KEYS[2], 17 + m)
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'step', ARGV[3], 'log', ARGV[5], 'next_kind', ARGV[9],
  'committed_ms', ARGV[10], 'state_id', ARGV[11], 'ledger_calls', ARGV[13])
if ARGV[8] == '1' then redis.call('DEL', KEYS[3]) end
if ARGV[3] ~= ARGV[2] then redis.call('HSET', KEYS[1], 'attempt', 0) end  -- a new step: attempts start over
if ARGV[5] == 'ended' then
  expire_run({KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7]}, tonumber(ARGV[6]), tonumber(ARGV[7]))
end
if ARGV[12] ~= '' then redis.call('LPUSH', KEYS[8], ARGV[12]) end
if ARGV[16] ~= '' then
  redis.call('ZREM', KEYS[9], ARGV[16])
  redis.call('HDEL', KEYS[10], ARGV[16])
end
return first
"""
)

# Takes the lease for one attempt at step ARGV[2] and returns what the attempt needs, in one round trip.
# A first attempt also writes its STEP_STARTED (ARGV[4] for a model turn, ARGV[5] for a tool step); a
# retried one leaves that to the engine, which first closes what the crashed attempt left open.
# The state comes back empty when its ``state_id`` is ARGV[6]: the caller holds that version already.
# For a tool step, the claim also starts its calls in the effect ledger (what EFFECT_BEGIN does for one call):
# each call in the run's ``ledger_calls`` without an entry gets ``started`` with this attempt's token; the
# entries found are returned, '' where this claim started the call.
# KEYS: run, lease, stop, events, effects, messages.
# ARGV: token, step, ttl_ms, model step-started json, tools step-started json, known state id or ''
# -> {'OK', attempt, first offset of this step's first attempt, next offset, state json or '', stop reason or '',
#     {call ids}, {their ledger entries or ''}, {the messages list when the state is sent}}
#    {'STALE', committed step} | {'BUSY'} | {'ENDED'} | {'NOTFOUND'}
CLAIM = """
local r = redis.call('HMGET', KEYS[1], 'log', 'step', 'state', 'next', 'next_kind', 'state_id', 'ledger_calls')
if not r[1] then return {'NOTFOUND'} end
if r[1] == 'ended' then return {'ENDED'} end
if r[2] ~= ARGV[2] then return {'STALE', r[2]} end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[3]) then return {'BUSY'} end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
if attempt == 1 then
  redis.call('HSET', KEYS[1], 'step_offset', r[4])
  if r[5] == 'tools' then redis.call('XADD', KEYS[4], r[4] .. '-1', 'event', ARGV[5])
  else redis.call('XADD', KEYS[4], r[4] .. '-1', 'event', ARGV[4]) end
  redis.call('HINCRBY', KEYS[1], 'next', 1)
end
local stop = redis.call('GET', KEYS[3]) or ''
local state = r[3] or ''
if ARGV[6] ~= '' and r[6] == ARGV[6] then state = '' end
local ids, entries = {}, {}
if r[5] == 'tools' and r[7] and r[7] ~= '' and r[7] ~= '[]' then
  ids = cjson.decode(r[7])
  local started = cjson.encode({status = 'started', token = ARGV[1]})
  for i, id in ipairs(ids) do
    local entry = redis.call('HGET', KEYS[5], id)
    if entry then entries[i] = entry else redis.call('HSET', KEYS[5], id, started); entries[i] = '' end
  end
end
local messages = {}
if state ~= '' then messages = redis.call('LRANGE', KEYS[6], 0, -1) end
return {'OK', tostring(attempt), redis.call('HGET', KEYS[1], 'step_offset') or '', r[4], state, stop, ids, entries,
  messages}
"""

# KEYS: lease. ARGV: token, ttl_ms -> 1 renewed, 0 lost
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""

# KEYS: lease. ARGV: token -> 1 released, 0 not ours
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""

_REFUSALS: dict[str, type[AgentsCeleryError]] = {
    "FENCED": FencedError,
    "NOTFOUND": RunNotFoundError,
    "ENDED": RunFinishedError,
    "CONFLICT": StateError,
    "EXISTS": StateError,
    "BUSY": RunBusyError,
}


def refusal(exc: redis.ResponseError, run_id: str) -> AgentsCeleryError | None:
    """The exception matching a script's refusal, or None when ``exc`` is some other Redis error."""
    text = str(exc)
    code = text.split(" ", 1)[0]
    cls = _REFUSALS.get(code)
    if cls is None:
        return None
    messages = {
        "FENCED": f"run {run_id!r}: the lease token is no longer current; another attempt owns the run",
        "NOTFOUND": f"run {run_id!r} does not exist",
        "ENDED": f"run {run_id!r} has already ended",
    }
    return cls(messages.get(code, f"run {run_id!r}: {text}"))
