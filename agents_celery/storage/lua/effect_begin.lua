-- Records in the effect ledger that a tool call starts, unless it has an entry already.
-- KEYS: effects, lease
-- ARGV: tool_call_id, token
-- -> the existing entry JSON, or '' after recording {status: 'started', token}; error FENCED
local effects_key, lease_key = KEYS[1], KEYS[2]
local tool_call_id, token = ARGV[1], ARGV[2]
if redis.call('GET', lease_key) ~= token then return redis.error_reply('FENCED') end
local entry = redis.call('HGET', effects_key, tool_call_id)
if entry then return entry end
redis.call('HSET', effects_key, tool_call_id, cjson.encode({status = 'started', token = token}))
return ''
