-- Adds a user message to a run's inbox unless the run has ended (its next model turn takes it in).
-- KEYS: run, inbox
-- ARGV: message JSON
-- -> the inbox's length; errors NOTFOUND | ENDED
local run_key, inbox_key = KEYS[1], KEYS[2]
local message = ARGV[1]
local log = redis.call('HGET', run_key, 'log')
if not log then return redis.error_reply('NOTFOUND') end
if log == 'ended' then return redis.error_reply('ENDED') end
return redis.call('RPUSH', inbox_key, message)
