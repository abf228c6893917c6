-- Sets the log status (live | paused | ended) and appends events with it, atomically, fenced by the lease.
-- 'ended' starts the retention of every key of the run.
-- KEYS: run, events, lease, effects, gone, stop, messages, inbox
-- ARGV: token, status, retention_ms, tombstone_ms, events...
-- -> first offset; errors NOTFOUND | ENDED | FENCED
-- @include _append.lua
-- @include _guard.lua
-- @include _expire.lua
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
local first = append(KEYS[1], KEYS[2], 5)
redis.call('HSET', KEYS[1], 'log', ARGV[2])
if ARGV[2] == 'ended' then
  expire_run({KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7], KEYS[8]}, tonumber(ARGV[3]), tonumber(ARGV[4]))
end
return first
