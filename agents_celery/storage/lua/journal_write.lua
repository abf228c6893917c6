-- Records one unit of a pydantic-ai run's replay journal and appends its events, in one step, fenced by the lease.
-- KEYS: run, events, lease, effects
-- ARGV: token, field, entry JSON, effect id ('' for none), effect entry JSON, events...
-- -> first offset written; errors NOTFOUND | ENDED | FENCED
-- The journal lives in the effects hash (fields ``j:<segment>:<seq>``), so it expires and is deleted with the
-- run's ledger; a tool call's ledger entry (``effect id``) is marked done in the same step as its journal entry.
-- A unit new to the journal is progress: the attempt that wrote it is counted once in the run's ``advanced``
-- (``advanced_at``: the last attempt counted), which the step's attempt budget leaves out, as it does blips. A
-- segment is one step however many units it has, so an attempt killed after saving work is not a failed one.
-- @include _append.lua
-- @include _guard.lua
local run_key, events_key, lease_key, effects_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local token, field, entry = ARGV[1], ARGV[2], ARGV[3]
local effect_id, effect_entry = ARGV[4], ARGV[5]
local first_event = 6  -- ARGV[6...]: the events
local refused = guard(run_key, lease_key, token)
if refused then return redis.error_reply(refused) end
if redis.call('HSET', effects_key, field, entry) == 1 then
  local attempt = redis.call('HGET', run_key, 'attempt')
  if redis.call('HGET', run_key, 'advanced_at') ~= attempt then
    redis.call('HSET', run_key, 'advanced_at', attempt)
    redis.call('HINCRBY', run_key, 'advanced', 1)
  end
end
if effect_id ~= '' then redis.call('HSET', effects_key, effect_id, effect_entry) end
return append(run_key, events_key, first_event)
