-- Gives back the lease of an attempt that died of a connection error (to Redis or to the broker), not of the
-- run. Such an attempt is recorded as a blip of the step (``blips``), which the step's attempt budget
-- (``max_step_attempts``) does not count, while fewer than ARGV[3] blips were recorded at this step; past
-- that it counts as an attempt, so a Redis that keeps failing ends the run (AbandonedRunError) instead of
-- retrying it forever. A commit starting a new step clears ``blips`` with ``attempt``.
-- The attempt's ``started`` ledger entries of tool calls it never invoked (ARGV[4...]; the claim starts every
-- call of a tool step) are forgotten, so the next attempt runs them instead of asking whether they ran.
-- Repeating it is harmless: once the lease is gone it changes nothing.
-- KEYS: run, lease, effects
-- ARGV: token, step, max blips, tool call ids this attempt never invoked...
-- -> 2 given back as a blip, 1 given back as an attempt (budget of blips spent, or the step moved on),
--    0 not ours (the lease expired or another attempt holds it; the attempt counts)
if redis.call('GET', KEYS[2]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
for i = 4, #ARGV do
  local entry = redis.call('HGET', KEYS[3], ARGV[i])
  if entry then
    local e = cjson.decode(entry)
    if e.status == 'started' and e.token == ARGV[1] then redis.call('HDEL', KEYS[3], ARGV[i]) end
  end
end
if redis.call('HGET', KEYS[1], 'step') ~= ARGV[2] then return 1 end
if tonumber(redis.call('HGET', KEYS[1], 'blips') or '0') >= tonumber(ARGV[3]) then return 1 end
redis.call('HINCRBY', KEYS[1], 'blips', 1)
return 2
