-- Check a worker's write: the job runs under this attempt and token. Returns the job's state or an error code.
-- uses: none
local function owned(key, attempt, token)
  local st = redis.call('HMGET', key, 'state', 'attempt', 'token')
  if st[1] == false then return 'missing' end
  if st[1] ~= 'running' or st[2] ~= attempt or st[3] ~= token then return 'stale' end
  return 'ok'
end
