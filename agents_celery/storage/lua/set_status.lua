-- Sets the log status (live | paused | ended) and appends events with it, atomically, fenced by the lease.
-- 'ended' starts the retention of every key of the run.
-- KEYS: run, events, lease, effects, gone, stop, messages, inbox
-- ARGV: token, status, retention_ms, tombstone_ms, events...
-- -> first offset; errors NOTFOUND | ENDED | FENCED
-- @include _append.lua
-- @include _guard.lua
-- @include _expire.lua
local run_key, events_key, lease_key, effects_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local gone_key, stop_key, messages_key, inbox_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local token, status = ARGV[1], ARGV[2]
local retention_ms, tombstone_ms = tonumber(ARGV[3]), tonumber(ARGV[4])
local first_event = 5  -- ARGV[5...]: the events
local refused = guard(run_key, lease_key, token)
if refused then return redis.error_reply(refused) end
local first = append(run_key, events_key, first_event)
redis.call('HSET', run_key, 'log', status)
if status == 'ended' then
  local expiring = {run_key, events_key, effects_key, stop_key, messages_key, inbox_key}
  expire_run(expiring, gone_key, retention_ms, tombstone_ms)
end
return first
