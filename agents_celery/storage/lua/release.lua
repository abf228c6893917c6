-- Gives a lease up if it is still ours.
-- KEYS: lease
-- ARGV: token
-- -> 1 released, 0 not ours
local lease_key = KEYS[1]
local token = ARGV[1]
if redis.call('GET', lease_key) == token then return redis.call('DEL', lease_key) end
return 0
