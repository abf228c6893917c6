-- Appends events to a live run's log, fenced by the lease.
-- KEYS: run, events, lease
-- ARGV: token, events...
-- -> first offset; errors NOTFOUND | ENDED | FENCED
-- @include _append.lua
-- @include _guard.lua
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
return append(KEYS[1], KEYS[2], 2)
