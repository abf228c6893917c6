-- Compare-and-set of the run state on its step number, with events and the log status, atomically.
-- KEYS: run, events, lease, effects, gone, stop, messages, inbox[, step queue, unacked index, unacked hash]
-- ARGV:  1 token             2 expected_step     3 new_step          4 state_json      5 log_status
--        6 retention_ms      7 tombstone_ms      8 release ('1'|'0') 9 next_kind       10 now_ms
--       11 state_id         12 next step's task message or ''      13 ledger calls JSON
--       14 keep (messages list elements to keep, -1: all)          15 m (messages to append)
--       16 delivery tag to ack or ''                              17 id of the task committing, or ''
--       18 inbox messages the state took in, or '' (checked when the run completes)
--       19 .. 18+m messages to append, then events...
-- -> first offset of the events; errors NOTFOUND | ENDED | FENCED | CONFLICT | INBOX
--
-- A completing commit (ARGV 18 given) is refused with INBOX when the run's inbox holds more messages than the
-- state took in: a user message sent while the last turn ran is never left behind by the run's end.
--
-- With a task message (the broker is this Redis), it is LPUSHed to the step queue only if the commit
-- succeeds: the checkpoint and the next step's task are written together, and there is no window in which a
-- crash leaves a committed step without its next task. With a delivery tag, the step's own message leaves
-- kombu's unacked index and hash (what the Redis transport's ack does) in the same call: a committed step's
-- message is acked with its checkpoint, and a refused commit acks nothing. Both are fast paths
-- (agents_celery.broker.fastpaths); with them off, KEYS 9-11 are absent and ARGV 12 and 16 are ''.
-- With release = '1' the lease is given up in the same call (the attempt has nothing left to write).
-- ``next_kind`` (model | tools) lets the next claim write its STEP_STARTED; ``committed_ms`` tells the
-- sweeper how long ago the next step was due to be enqueued; ``state_id`` names this version of the state,
-- so a claim by the process that wrote it can skip sending it back; ``ledger calls`` (a JSON list of tool
-- call ids) are the calls the next tool step starts, which its claim records in the effect ledger. The task id
-- (``last_task``) is the parent of the next step's message, so Flower links the steps of a run.
-- @include _append.lua
-- @include _guard.lua
-- @include _expire.lua
local refused = guard(KEYS[1], KEYS[3], ARGV[1])
if refused then return redis.error_reply(refused) end
local step = redis.call('HGET', KEYS[1], 'step')
if step ~= ARGV[2] then return redis.error_reply('CONFLICT step is ' .. tostring(step)) end
if ARGV[18] ~= '' and redis.call('LLEN', KEYS[8]) > tonumber(ARGV[18]) then
  return redis.error_reply('INBOX a user message arrived')
end
local keep, m = tonumber(ARGV[14]), tonumber(ARGV[15])
if keep == 0 then redis.call('DEL', KEYS[7]) elseif keep > 0 then redis.call('LTRIM', KEYS[7], 0, keep - 1) end
for i = 1, m do redis.call('RPUSH', KEYS[7], ARGV[18 + i]) end
local first = append(KEYS[1], KEYS[2], 19 + m)
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'step', ARGV[3], 'log', ARGV[5], 'next_kind', ARGV[9],
  'committed_ms', ARGV[10], 'state_id', ARGV[11], 'ledger_calls', ARGV[13])
if ARGV[17] ~= '' then redis.call('HSET', KEYS[1], 'last_task', ARGV[17]) end
if ARGV[8] == '1' then redis.call('DEL', KEYS[3]) end
if ARGV[3] ~= ARGV[2] then  -- a new step: attempts (and blips, give_back.lua) start over
  redis.call('HSET', KEYS[1], 'attempt', 0)
  redis.call('HDEL', KEYS[1], 'blips')
end
if ARGV[5] == 'ended' then
  expire_run({KEYS[1], KEYS[2], KEYS[4], KEYS[6], KEYS[7], KEYS[8]}, tonumber(ARGV[6]), tonumber(ARGV[7]))
end
if ARGV[12] ~= '' then redis.call('LPUSH', KEYS[9], ARGV[12]) end
if ARGV[16] ~= '' then
  redis.call('ZREM', KEYS[10], ARGV[16])
  redis.call('HDEL', KEYS[11], ARGV[16])
end
return first
