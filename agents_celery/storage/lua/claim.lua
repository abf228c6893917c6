-- Takes the lease for one attempt at step ``step`` and returns what the attempt needs, in one round trip.
-- A first attempt also writes its STEP_STARTED (``model_started`` for a model turn, ``tools_started`` for a
-- tool step); a retried one leaves that to the engine, which first closes what the crashed attempt left open.
-- The state comes back empty when its ``state_id`` is ``known_state_id``: the caller holds that version already.
-- For a tool step, the claim also starts its calls in the effect ledger (what effect_begin.lua does for one
-- call): each call in the run's ``ledger_calls`` without an entry gets ``started`` with this attempt's token;
-- the entries found are returned, '' where this claim started the call.
-- KEYS: run, lease, stop, events, effects, messages, inbox
-- ARGV: token, step, ttl_ms, model step-started JSON, tools step-started JSON, known state id or ''
-- -> {'OK', attempt, first offset of this step's first attempt, next offset, state JSON or '', stop reason
--     or '', {call ids}, {their ledger entries or ''}, {the messages list when the state is sent}, inbox length,
--     blips: attempts of this step that died of a connection error (give_back.lua), not counted as attempts,
--     advanced: attempts of this step that journaled a new unit (journal_write.lua), not counted either}
--    | {'STALE', committed step} | {'BUSY'} | {'ENDED'} | {'NOTFOUND'}
-- (agents_celery.storage.store.ClaimReply reads the 'OK' reply.)
local run_key, lease_key, stop_key, events_key = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local effects_key, messages_key, inbox_key = KEYS[5], KEYS[6], KEYS[7]
local token, step, ttl_ms = ARGV[1], ARGV[2], ARGV[3]
local model_started, tools_started, known_state_id = ARGV[4], ARGV[5], ARGV[6]

local r = redis.call('HMGET', run_key, 'log', 'step', 'state', 'next', 'next_kind', 'state_id', 'ledger_calls')
local log, committed_step, state, next_offset = r[1], r[2], r[3], r[4]
local next_kind, state_id, ledger_calls = r[5], r[6], r[7]
if not log then return {'NOTFOUND'} end
if log == 'ended' then return {'ENDED'} end
if committed_step ~= step then return {'STALE', committed_step} end
if not redis.call('SET', lease_key, token, 'NX', 'PX', ttl_ms) then return {'BUSY'} end
local attempt = redis.call('HINCRBY', run_key, 'attempt', 1)
if attempt == 1 then
  redis.call('HSET', run_key, 'step_offset', next_offset)
  if next_kind == 'tools' then redis.call('XADD', events_key, next_offset .. '-1', 'event', tools_started)
  else redis.call('XADD', events_key, next_offset .. '-1', 'event', model_started) end
  redis.call('HINCRBY', run_key, 'next', 1)
end
local stop = redis.call('GET', stop_key) or ''
state = state or ''
if known_state_id ~= '' and state_id == known_state_id then state = '' end
local ids, entries = {}, {}
if next_kind == 'tools' and ledger_calls and ledger_calls ~= '' and ledger_calls ~= '[]' then
  ids = cjson.decode(ledger_calls)
  local started = cjson.encode({status = 'started', token = token})
  for i, id in ipairs(ids) do
    local entry = redis.call('HGET', effects_key, id)
    if entry then entries[i] = entry else redis.call('HSET', effects_key, id, started); entries[i] = '' end
  end
end
local messages = {}
if state ~= '' then messages = redis.call('LRANGE', messages_key, 0, -1) end
return {'OK', tostring(attempt), redis.call('HGET', run_key, 'step_offset') or '', next_offset, state, stop, ids,
  entries, messages, redis.call('LLEN', inbox_key), redis.call('HGET', run_key, 'blips') or '0',
  redis.call('HGET', run_key, 'advanced') or '0'}
