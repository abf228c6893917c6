-- Helper (included by other scripts): after the run ended, everything of the run expires after the
-- retention; a tombstone (KEYS[5], the ``gone`` key) outlives it so reads can say "expired" rather than
-- "unknown".
local function expire_run(keys, retention, tombstone)
  for i = 1, #keys do redis.call('PEXPIRE', keys[i], retention) end
  redis.call('SET', KEYS[5], '1', 'PX', retention + tombstone)
end
