-- Keeps a renderer's checkpoint of one response segment (agents_celery.storage.renders): its state after the
-- event at some offset, under ``<renderer>:<base>:<seq>`` (seq: the last sequence number it rendered), and
-- drops that segment's oldest checkpoints past ``keep``. The key expires with the run: at the run record's TTL
-- once it has one (the run ended), else after ``ttl_ms`` (the retention, which a live run's end only extends).
-- Nothing is written for a run that is gone.
-- KEYS: run, renders
-- ARGV: field prefix '<renderer>:<base>:', seq, checkpoint JSON, keep, ttl_ms
-- -> 1 kept, 0 the run is gone
local run_key, renders_key = KEYS[1], KEYS[2]
local prefix, seq, value, keep, ttl_ms = ARGV[1], tonumber(ARGV[2]), ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local ttl = redis.call('PTTL', run_key)
if ttl == -2 then return 0 end
if ttl == -1 then ttl = ttl_ms end
redis.call('HSET', renders_key, prefix .. seq, value)
local mine = {}
for _, name in ipairs(redis.call('HKEYS', renders_key)) do
  if string.sub(name, 1, #prefix) == prefix then table.insert(mine, tonumber(string.sub(name, #prefix + 1))) end
end
table.sort(mine)
for i = 1, #mine - keep do redis.call('HDEL', renders_key, prefix .. mine[i]) end
redis.call('PEXPIRE', renders_key, ttl)
return 1
