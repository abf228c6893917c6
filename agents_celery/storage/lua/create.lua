-- Creates a run: its hash (log 'live', counters at 0, the given fields) and its first events.
-- KEYS: run, events
-- ARGV: npairs, k1, v1, ..., kn, vn, events...
-- -> first offset; error 'EXISTS' when the run exists already
-- @include _append.lua
local run_key, events_key = KEYS[1], KEYS[2]
local npairs = tonumber(ARGV[1])  -- ARGV[2 .. 1 + 2 * npairs]: field, value pairs; then the events
if redis.call('EXISTS', run_key) == 1 then return redis.error_reply('EXISTS run exists already') end
redis.call('HSET', run_key, 'log', 'live', 'next', 0, 'step', 0, 'attempt', 0)
for i = 1, npairs do redis.call('HSET', run_key, ARGV[2 * i], ARGV[2 * i + 1]) end
return append(run_key, events_key, 2 + 2 * npairs)
