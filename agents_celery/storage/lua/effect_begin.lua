-- Records in the effect ledger that a tool call starts, unless it has an entry already.
-- KEYS: effects, lease
-- ARGV: tool_call_id, token
-- -> the existing entry JSON, or '' after recording {status: 'started', token}; error FENCED
if redis.call('GET', KEYS[2]) ~= ARGV[2] then return redis.error_reply('FENCED') end
local entry = redis.call('HGET', KEYS[1], ARGV[1])
if entry then return entry end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode({status = 'started', token = ARGV[2]}))
return ''
