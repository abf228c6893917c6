-- Appends events to a live run's log, fenced by the lease.
-- KEYS: run, events, lease
-- ARGV: token, events...
-- -> first offset; errors NOTFOUND | ENDED | FENCED
-- @include _append.lua
-- @include _guard.lua
local run_key, events_key, lease_key = KEYS[1], KEYS[2], KEYS[3]
local token = ARGV[1]
local first_event = 2  -- ARGV[2...]: the events
local refused = guard(run_key, lease_key, token)
if refused then return redis.error_reply(refused) end
return append(run_key, events_key, first_event)
