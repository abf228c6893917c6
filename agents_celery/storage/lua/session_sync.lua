-- Appends a finished run's messages to its session's history, once per run (idempotent); the session's owner
-- record lives at least as long as its history.
-- KEYS: session history, session synced, session owner
-- ARGV: run_id, session ttl_ms, messages...
-- -> 1 appended, 0 already done
local history_key, synced_key, owner_key = KEYS[1], KEYS[2], KEYS[3]
local run_id, ttl_ms = ARGV[1], tonumber(ARGV[2])
local first_message = 3  -- ARGV[3...]: the messages
if redis.call('SADD', synced_key, run_id) == 0 then return 0 end
for i = first_message, #ARGV do redis.call('RPUSH', history_key, ARGV[i]) end
redis.call('PEXPIRE', history_key, ttl_ms); redis.call('PEXPIRE', synced_key, ttl_ms)
if redis.call('PTTL', owner_key) >= 0 and redis.call('PTTL', owner_key) < ttl_ms then
  redis.call('PEXPIRE', owner_key, ttl_ms)
end
return 1
