-- The latest checkpoint of one response segment at or before a sequence number (agents_celery.storage.renders),
-- with the event the log holds now at the checkpoint's offset (the caller checks it is the one the checkpoint was
-- made at), in one round trip.
-- KEYS: renders, events
-- ARGV: field prefix '<renderer>:<base>:', the highest sequence number wanted
-- -> {checkpoint JSON, the stored event JSON at its offset or ''}, or false when there is no checkpoint
local renders_key, events_key = KEYS[1], KEYS[2]
local prefix, at_most = ARGV[1], tonumber(ARGV[2])
local best = nil
for _, name in ipairs(redis.call('HKEYS', renders_key)) do
  if string.sub(name, 1, #prefix) == prefix then
    local seq = tonumber(string.sub(name, #prefix + 1))
    if seq and seq <= at_most and (best == nil or seq > best) then best = seq end
  end
end
if best == nil then return false end
local checkpoint = redis.call('HGET', renders_key, prefix .. best)
local offset = string.match(cjson.decode(checkpoint).position, '^(%d+)')
local found = redis.call('XRANGE', events_key, offset .. '-1', offset .. '-1')
local event = ''
if found[1] then event = found[1][2][2] end
return {checkpoint, event}
