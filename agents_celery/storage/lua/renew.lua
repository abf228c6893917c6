-- Renews a lease if it is still ours.
-- KEYS: lease
-- ARGV: token, ttl_ms
-- -> 1 renewed, 0 lost
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
