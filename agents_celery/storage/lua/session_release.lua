-- Frees the session if the run is still its active run.
-- KEYS: session active
-- ARGV: run_id
-- -> 1 freed, 0 not ours
local active_key = KEYS[1]
local run_id = ARGV[1]
if redis.call('GET', active_key) == run_id then return redis.call('DEL', active_key) end
return 0
