-- Takes the lease for one attempt at step ARGV[2] and returns what the attempt needs, in one round trip.
-- A first attempt also writes its STEP_STARTED (ARGV[4] for a model turn, ARGV[5] for a tool step); a
-- retried one leaves that to the engine, which first closes what the crashed attempt left open.
-- The state comes back empty when its ``state_id`` is ARGV[6]: the caller holds that version already.
-- For a tool step, the claim also starts its calls in the effect ledger (what effect_begin.lua does for one
-- call): each call in the run's ``ledger_calls`` without an entry gets ``started`` with this attempt's token;
-- the entries found are returned, '' where this claim started the call.
-- KEYS: run, lease, stop, events, effects, messages, inbox
-- ARGV: token, step, ttl_ms, model step-started JSON, tools step-started JSON, known state id or ''
-- -> {'OK', attempt, first offset of this step's first attempt, next offset, state JSON or '', stop reason
--     or '', {call ids}, {their ledger entries or ''}, {the messages list when the state is sent}, inbox length,
--     blips: attempts of this step that died of a connection error (give_back.lua), not counted as attempts}
--    | {'STALE', committed step} | {'BUSY'} | {'ENDED'} | {'NOTFOUND'}
local r = redis.call('HMGET', KEYS[1], 'log', 'step', 'state', 'next', 'next_kind', 'state_id', 'ledger_calls')
if not r[1] then return {'NOTFOUND'} end
if r[1] == 'ended' then return {'ENDED'} end
if r[2] ~= ARGV[2] then return {'STALE', r[2]} end
if not redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[3]) then return {'BUSY'} end
local attempt = redis.call('HINCRBY', KEYS[1], 'attempt', 1)
if attempt == 1 then
  redis.call('HSET', KEYS[1], 'step_offset', r[4])
  if r[5] == 'tools' then redis.call('XADD', KEYS[4], r[4] .. '-1', 'event', ARGV[5])
  else redis.call('XADD', KEYS[4], r[4] .. '-1', 'event', ARGV[4]) end
  redis.call('HINCRBY', KEYS[1], 'next', 1)
end
local stop = redis.call('GET', KEYS[3]) or ''
local state = r[3] or ''
if ARGV[6] ~= '' and r[6] == ARGV[6] then state = '' end
local ids, entries = {}, {}
if r[5] == 'tools' and r[7] and r[7] ~= '' and r[7] ~= '[]' then
  ids = cjson.decode(r[7])
  local started = cjson.encode({status = 'started', token = ARGV[1]})
  for i, id in ipairs(ids) do
    local entry = redis.call('HGET', KEYS[5], id)
    if entry then entries[i] = entry else redis.call('HSET', KEYS[5], id, started); entries[i] = '' end
  end
end
local messages = {}
if state ~= '' then messages = redis.call('LRANGE', KEYS[6], 0, -1) end
return {'OK', tostring(attempt), redis.call('HGET', KEYS[1], 'step_offset') or '', r[4], state, stop, ids, entries,
  messages, redis.call('LLEN', KEYS[7]), redis.call('HGET', KEYS[1], 'blips') or '0'}
