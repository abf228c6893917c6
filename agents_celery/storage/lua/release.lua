-- Gives a lease up if it is still ours.
-- KEYS: lease
-- ARGV: token
-- -> 1 released, 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
