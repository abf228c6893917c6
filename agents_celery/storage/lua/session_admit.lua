-- Admits a new run to its session in one round trip: records the session's owner if it has none (the user of
-- its first run; a later call only extends the record's life), takes the session for the run if it is free or
-- the run holds it already (an idempotent retry), and hands back the session's history then.
-- KEYS: session owner, session active, session history
-- ARGV: owner ('u:<user id>', or '-' for none), owner ttl_ms, run_id
-- -> {1, history message JSON...} taken; {0, holder run_id} another run holds the session
local owner_key, active_key, history_key = KEYS[1], KEYS[2], KEYS[3]
local owner, ttl_ms, run_id = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if not redis.call('GET', owner_key) then
  redis.call('SET', owner_key, owner, 'PX', ttl_ms)
elseif redis.call('PTTL', owner_key) < ttl_ms then
  redis.call('PEXPIRE', owner_key, ttl_ms)
end
local current = redis.call('GET', active_key)
if current and current ~= run_id then return {0, current} end
if not current then redis.call('SET', active_key, run_id) end
local reply = redis.call('LRANGE', history_key, 0, -1)
table.insert(reply, 1, 1)
return reply
