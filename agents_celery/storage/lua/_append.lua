-- Helper (included by other scripts): appends ARGV[first_arg..] as events with contiguous offsets taken from
-- the run hash's ``next`` counter. The stream entry id is "<offset>-1", so the id is the offset and readers
-- need no lookup. Returns the first offset written (the current ``next`` when there is nothing to append).
local function append(run_key, events_key, first_arg)
  local n = #ARGV - first_arg + 1
  if n <= 0 then return tonumber(redis.call('HGET', run_key, 'next')) end
  local first = redis.call('HINCRBY', run_key, 'next', n) - n
  for i = 0, n - 1 do
    redis.call('XADD', events_key, (first + i) .. '-1', 'event', ARGV[first_arg + i])
  end
  return first
end
