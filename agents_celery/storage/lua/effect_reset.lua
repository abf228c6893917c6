-- Forgets a "started" ledger entry so a human-approved re-run may start it again.
-- KEYS: effects, lease
-- ARGV: tool_call_id, token
-- -> 1 forgotten, 0 there was none; error FENCED
local effects_key, lease_key = KEYS[1], KEYS[2]
local tool_call_id, token = ARGV[1], ARGV[2]
if redis.call('GET', lease_key) ~= token then return redis.error_reply('FENCED') end
return redis.call('HDEL', effects_key, tool_call_id)
