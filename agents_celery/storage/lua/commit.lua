-- Compare-and-set of the run state on its step number, with events and the log status, atomically.
-- (agents_celery.storage.store.CommitArgs builds ARGV 1-18 by these names.)
-- KEYS: run, events, lease, effects, gone, stop, messages, inbox[, step queue, unacked index, unacked hash]
-- ARGV: token, expected_step, new_step, state_json, log_status, retention_ms, tombstone_ms, release ('1'|'0'),
--       next_kind, now_ms, state_id, task_message (the next step's, or ''), ledger_calls (JSON list),
--       keep (elements of the messages list to keep, -1: all), m (messages to append), ack_tag (delivery tag to
--       ack, or ''), task_id (of the task committing, or ''), inbox_taken (inbox messages the state took in, or
--       '': checked when the run completes), awaiting ('=' then the child runs the next step waits for, joined
--       by ',', '=' alone for none; '': left as it is); then the m messages to append, then the events...
-- -> first offset of the events; errors NOTFOUND | ENDED | FENCED | CONFLICT | INBOX
--
-- A completing commit (``inbox_taken`` given) is refused with INBOX when the run's inbox holds more messages
-- than the state took in: a user message sent while the last turn ran is never left behind by the run's end.
--
-- With a task message (the broker is this Redis), it is LPUSHed to the step queue only if the commit
-- succeeds: the checkpoint and the next step's task are written together, and there is no window in which a
-- crash leaves a committed step without its next task. With a delivery tag, the step's own message leaves
-- kombu's unacked index and hash (what the Redis transport's ack does) in the same call: a committed step's
-- message is acked with its checkpoint, and a refused commit acks nothing. Both are fast paths
-- (agents_celery.broker.fastpaths); with them off, KEYS 9-11 are absent and ``task_message`` and ``ack_tag``
-- are ''.
-- With release = '1' the lease is given up in the same call (the attempt has nothing left to write).
-- ``next_kind`` (model | tools) lets the next claim write its STEP_STARTED; ``committed_ms`` tells the
-- sweeper how long ago the next step was due to be enqueued; ``state_id`` names this version of the state,
-- so a claim by the process that wrote it can skip sending it back; ``ledger_calls`` (a JSON list of tool
-- call ids) are the calls the next tool step starts, which its claim records in the effect ledger. The task id
-- (``last_task``) is the parent of the next step's message, so Flower links the steps of a run.
-- @include _append.lua
-- @include _guard.lua
-- @include _expire.lua
local run_key, events_key, lease_key, effects_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local gone_key, stop_key, messages_key, inbox_key = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
local queue_key, unacked_index_key, unacked_hash_key = KEYS[9], KEYS[10], KEYS[11]  -- nil without the fast paths
local token, expected_step, new_step, state_json, log_status = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local retention_ms, tombstone_ms, release = tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local next_kind, now_ms, state_id, task_message = ARGV[9], ARGV[10], ARGV[11], ARGV[12]
local ledger_calls, keep, m = ARGV[13], tonumber(ARGV[14]), tonumber(ARGV[15])
local ack_tag, task_id, inbox_taken, awaiting = ARGV[16], ARGV[17], ARGV[18], ARGV[19]
local first_message = 20  -- ARGV[20 .. 19 + m]: the messages to append; then the events

local refused = guard(run_key, lease_key, token)
if refused then return redis.error_reply(refused) end
local step = redis.call('HGET', run_key, 'step')
if step ~= expected_step then return redis.error_reply('CONFLICT step is ' .. tostring(step)) end
if inbox_taken ~= '' and redis.call('LLEN', inbox_key) > tonumber(inbox_taken) then
  return redis.error_reply('INBOX a user message arrived')
end
if keep == 0 then redis.call('DEL', messages_key)
elseif keep > 0 then redis.call('LTRIM', messages_key, 0, keep - 1) end
for i = 0, m - 1 do redis.call('RPUSH', messages_key, ARGV[first_message + i]) end
local first = append(run_key, events_key, first_message + m)
redis.call('HSET', run_key, 'state', state_json, 'step', new_step, 'log', log_status, 'next_kind', next_kind,
  'committed_ms', now_ms, 'state_id', state_id, 'ledger_calls', ledger_calls)
if task_id ~= '' then redis.call('HSET', run_key, 'last_task', task_id) end
-- the children a waiting step is woken by (the sweeper sends it only once one of them paused or ended)
if awaiting == '=' then redis.call('HDEL', run_key, 'awaiting')
elseif awaiting ~= '' then redis.call('HSET', run_key, 'awaiting', string.sub(awaiting, 2)) end
if release == '1' then redis.call('DEL', lease_key) end
-- a new step: its attempts (blips, give_back.lua; advanced, journal_write.lua) start over
if new_step ~= expected_step then
  redis.call('HSET', run_key, 'attempt', 0)
  redis.call('HDEL', run_key, 'blips', 'advanced', 'advanced_at')
end
if log_status == 'ended' then
  local expiring = {run_key, events_key, effects_key, stop_key, messages_key, inbox_key}
  expire_run(expiring, gone_key, retention_ms, tombstone_ms)
end
if task_message ~= '' then redis.call('LPUSH', queue_key, task_message) end
if ack_tag ~= '' then
  redis.call('ZREM', unacked_index_key, ack_tag)
  redis.call('HDEL', unacked_hash_key, ack_tag)
end
return first
