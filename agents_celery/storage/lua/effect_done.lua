-- Records a finished tool call's result; only the attempt that started it (same token) may.
-- KEYS: effects
-- ARGV: tool_call_id, token, entry JSON ({status: 'done', token, result, error})
-- -> 1 recorded, 0 not (another attempt started it, or nobody did)
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry and cjson.decode(entry).token == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
