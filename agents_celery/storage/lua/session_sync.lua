-- Appends a finished run's messages to its session's history, once per run (idempotent).
-- KEYS: session history, session synced
-- ARGV: run_id, session ttl_ms, messages...
-- -> 1 appended, 0 already done
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
for i = 3, #ARGV do redis.call('RPUSH', KEYS[1], ARGV[i]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2]); redis.call('PEXPIRE', KEYS[2], ARGV[2])
return 1
