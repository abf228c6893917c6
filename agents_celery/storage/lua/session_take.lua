-- Makes a run the session's active run if the active one is still the expected one (or there is none).
-- KEYS: session active
-- ARGV: run_id, expected previous run_id or ''
-- -> 1 taken, 0 another run holds the session
local current = redis.call('GET', KEYS[1])
if current and current ~= ARGV[2] then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1
