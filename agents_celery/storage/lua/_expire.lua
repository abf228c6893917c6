-- Helper (included by other scripts): after the run ended, everything of the run expires after the
-- retention; a tombstone (``gone_key``) outlives it so reads can say "expired" rather than "unknown".
local function expire_run(keys, gone_key, retention, tombstone)
  for i = 1, #keys do redis.call('PEXPIRE', keys[i], retention) end
  redis.call('SET', gone_key, '1', 'PX', retention + tombstone)
end
