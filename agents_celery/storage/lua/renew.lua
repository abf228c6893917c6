-- Renews a lease if it is still ours.
-- KEYS: lease
-- ARGV: token, ttl_ms
-- -> 1 renewed, 0 lost
local lease_key = KEYS[1]
local token, ttl_ms = ARGV[1], ARGV[2]
if redis.call('GET', lease_key) == token then return redis.call('PEXPIRE', lease_key, ttl_ms) end
return 0
