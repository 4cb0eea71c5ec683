-- Check a worker's write: the job runs under this attempt and token. Returns the job's state or an error code.
-- `state`, `att`, `tok`: its fields state, attempt and token when the caller read them (false: none), else
-- (state nil) read here.
-- uses: none
local function owned(key, attempt, token, state, att, tok)
  if state == nil then state, att, tok = unpack(redis.call('HMGET', key, 'state', 'attempt', 'token')) end
  if state == false then return 'missing' end
  if state ~= 'running' or att ~= attempt or tok ~= token then return 'stale' end
  return 'ok'
end
