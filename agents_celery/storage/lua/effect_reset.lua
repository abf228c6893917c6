-- Forgets a "started" ledger entry so a human-approved re-run may start it again.
-- KEYS: effects, lease
-- ARGV: tool_call_id, token
-- -> 1 forgotten, 0 there was none; error FENCED
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return redis.error_reply('FENCED') end
return redis.call('HDEL', KEYS[1], ARGV[1])
