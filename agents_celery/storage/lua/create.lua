-- Creates a run: its hash (log 'live', counters at 0, the given fields) and its first events.
-- KEYS: run, events
-- ARGV: npairs, k1, v1, ..., kn, vn, events...
-- -> first offset; error 'EXISTS' when the run exists already
-- @include _append.lua
if redis.call('EXISTS', KEYS[1]) == 1 then return redis.error_reply('EXISTS run exists already') end
local npairs = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'log', 'live', 'next', 0, 'step', 0, 'attempt', 0)
for i = 1, npairs do redis.call('HSET', KEYS[1], ARGV[2 * i], ARGV[2 * i + 1]) end
return append(KEYS[1], KEYS[2], 2 + 2 * npairs)
