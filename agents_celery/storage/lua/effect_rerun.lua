-- Starts a human-approved re-run of a tool call that may have run: once per approval. The entry a re-run
-- starts carries the approval's number, so a retry of the step after that execution died finds it again
-- (and the run pauses as "may have run" once more) instead of running the call a second time unasked.
-- KEYS: effects, lease
-- ARGV: tool_call_id, token, approval (1 for the first approval of the call, 2 for the next, ...)
-- -> the existing entry JSON (done, or started by this approval already), or '' after recording
--    {status: 'started', token, rerun: approval}; error FENCED
local effects_key, lease_key = KEYS[1], KEYS[2]
local tool_call_id, token, approval = ARGV[1], ARGV[2], tonumber(ARGV[3])
if redis.call('GET', lease_key) ~= token then return redis.error_reply('FENCED') end
local entry = redis.call('HGET', effects_key, tool_call_id)
if entry then
  local e = cjson.decode(entry)
  if e.status == 'done' or (tonumber(e.rerun) or 0) >= approval then return entry end
end
redis.call('HSET', effects_key, tool_call_id, cjson.encode({status = 'started', token = token, rerun = approval}))
return ''
