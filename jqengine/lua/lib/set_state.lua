-- Change a job's state and record the transition: the one way a script sets 'state'.
-- uses: emit
local function set_state(id, key, to, extra)
  local f = redis.call('HMGET', key, 'kind', 'attempt', 'worker', 'state')
  redis.call('HSET', key, 'state', to, 'updated_at', NOW)
  emit(id, key, f[4] or '', to, extra, f)
end
