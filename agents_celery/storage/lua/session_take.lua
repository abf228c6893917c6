-- Makes a run the session's active run if the active one is still the expected one (or there is none).
-- KEYS: session active
-- ARGV: run_id, expected previous run_id or ''
-- -> 1 taken, 0 another run holds the session
local active_key = KEYS[1]
local run_id, previous = ARGV[1], ARGV[2]
local current = redis.call('GET', active_key)
if current and current ~= previous then return 0 end
redis.call('SET', active_key, run_id)
return 1
