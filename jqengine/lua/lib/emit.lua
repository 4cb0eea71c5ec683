-- Record a job's transition as its lifecycle event (store_event), the record's version bumped: `extra`,
-- the event's fields beyond the common ones. A caller that read the record (set_state, transit) passes
-- `f`, its kind, attempt and worker (HMGET order), and `v`, the version it wrote; without them the version
-- is bumped, updated_at set and the fields read here.
-- uses: store_event
local function emit(id, key, from, to, extra, f, v)
  if v == nil then v = redis.call('HINCRBY', key, 'version', 1) end
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
