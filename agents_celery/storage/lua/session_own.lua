-- Records who a session belongs to, once: the user of its first run. Later calls only extend its life.
-- KEYS: session owner
-- ARGV: owner ('u:<user id>', or '-' for none), ttl_ms
-- -> the session's owner as recorded (the given one when this call recorded it)
local owner_key = KEYS[1]
local owner, ttl_ms = ARGV[1], tonumber(ARGV[2])
local current = redis.call('GET', owner_key)
if not current then
  redis.call('SET', owner_key, owner, 'PX', ttl_ms)
  return owner
end
if redis.call('PTTL', owner_key) < ttl_ms then redis.call('PEXPIRE', owner_key, ttl_ms) end
return current
