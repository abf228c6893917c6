-- Records a finished tool call's result; only the attempt that started it (same token) may.
-- KEYS: effects
-- ARGV: tool_call_id, token, entry JSON ({status: 'done', token, result, error})
-- -> 1 recorded, 0 not (another attempt started it, or nobody did)
local effects_key = KEYS[1]
local tool_call_id, token, done_entry = ARGV[1], ARGV[2], ARGV[3]
local entry = redis.call('HGET', effects_key, tool_call_id)
if entry and cjson.decode(entry).token == token then
  redis.call('HSET', effects_key, tool_call_id, done_entry)
  return 1
end
return 0
