-- Helper (included by other scripts): nil when the run exists, has not ended and ``token`` is its current
-- lease; otherwise the refusal code (NOTFOUND, ENDED, FENCED).
local function guard(run_key, lease_key, token)
  local log = redis.call('HGET', run_key, 'log')
  if not log then return 'NOTFOUND' end
  if log == 'ended' then return 'ENDED' end
  if redis.call('GET', lease_key) ~= token then return 'FENCED' end
  return nil
end
