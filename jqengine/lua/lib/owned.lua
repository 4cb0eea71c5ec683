-- Check a worker's write: the job runs under this attempt and token. Returns the job's state or an error code.
-- `st`: its fields state, attempt and token when the caller read them (HMGET order), else read here.
-- uses: none
local function owned(key, attempt, token, st)
  if st == nil then st = redis.call('HMGET', key, 'state', 'attempt', 'token') end
  if st[1] == false then return 'missing' end
  if st[1] ~= 'running' or st[2] ~= attempt or st[3] ~= token then return 'stale' end
  return 'ok'
end
