-- Adds a user message to a run's inbox unless the run has ended (its next model turn takes it in).
-- KEYS: run, inbox
-- ARGV: message JSON
-- -> the inbox's length; errors NOTFOUND | ENDED
local log = redis.call('HGET', KEYS[1], 'log')
if not log then return redis.error_reply('NOTFOUND') end
if log == 'ended' then return redis.error_reply('ENDED') end
return redis.call('RPUSH', KEYS[2], ARGV[1])
