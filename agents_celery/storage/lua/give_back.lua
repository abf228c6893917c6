-- Gives back the lease of an attempt that died of a connection error (to Redis or to the broker), not of the
-- run. Such an attempt is recorded as a blip of the step (``blips``), which the step's attempt budget
-- (``max_step_attempts``) does not count, while fewer than ``max_blips`` blips were recorded at this step; past
-- that it counts as an attempt, so a Redis that keeps failing ends the run (AbandonedRunError) instead of
-- retrying it forever. A commit starting a new step clears ``blips`` with ``attempt``.
-- The attempt's ``started`` ledger entries of tool calls it never invoked (ARGV[4...]; the claim starts every
-- call of a tool step) are forgotten, so the next attempt runs them instead of asking whether they ran.
-- Repeating it is harmless: once the lease is gone it changes nothing.
-- KEYS: run, lease, effects
-- ARGV: token, step, max blips, tool call ids this attempt never invoked...
-- -> 2 given back as a blip, 1 given back as an attempt (budget of blips spent, or the step moved on),
--    0 not ours (the lease expired or another attempt holds it; the attempt counts)
local run_key, lease_key, effects_key = KEYS[1], KEYS[2], KEYS[3]
local token, step, max_blips = ARGV[1], ARGV[2], tonumber(ARGV[3])
local first_not_run = 4  -- ARGV[4...]: the tool call ids never invoked
if redis.call('GET', lease_key) ~= token then return 0 end
redis.call('DEL', lease_key)
for i = first_not_run, #ARGV do
  local entry = redis.call('HGET', effects_key, ARGV[i])
  if entry then
    local e = cjson.decode(entry)
    if e.status == 'started' and e.token == token then redis.call('HDEL', effects_key, ARGV[i]) end
  end
end
if redis.call('HGET', run_key, 'step') ~= step then return 1 end
if tonumber(redis.call('HGET', run_key, 'blips') or '0') >= max_blips then return 1 end
redis.call('HINCRBY', run_key, 'blips', 1)
return 2
