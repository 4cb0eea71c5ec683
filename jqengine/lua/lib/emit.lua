-- Record a job's transition as its lifecycle event (store_event), the record's version bumped: `extra`,
-- the event's fields beyond the common ones; `f`, the record's kind, attempt and worker when the caller
-- read them (set_state), updated_at set too.
-- uses: store_event
local function emit(id, key, from, to, extra, f)
  local v = redis.call('HINCRBY', key, 'version', 1)
  if f == nil then
    redis.call('HSET', key, 'updated_at', NOW)
    f = redis.call('HMGET', key, 'kind', 'attempt', 'worker')
  end
  local e = {id = id, kind = f[1] or '', from = from, to = to, v = v, at = NOW, attempt = tonumber(f[2]) or 0}
  if (from == 'running' or to == 'running') and f[3] and f[3] ~= '' then e.worker = f[3] end
  if extra then
    for name, value in pairs(extra) do e[name] = value end
  end
  store_event(e)
end
