-- Frees the session if the run is still its active run.
-- KEYS: session active
-- ARGV: run_id
-- -> 1 freed, 0 not ours
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
