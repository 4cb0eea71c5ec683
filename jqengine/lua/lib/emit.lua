-- Record a job's transition as its lifecycle event (store_event), the record's version bumped: `extra`,
-- the event's fields beyond the common ones. A caller that read the record (set_state, transit) passes
-- `f`, its kind, attempt and worker (HMGET order), and `v`, the version it wrote; without them the version
-- is bumped, updated_at set and the fields read here.
-- The event's JSON is written as text, not built as a table for cjson: a job's id and kind are JSON-safe as
-- they are (jqcore.envelope_rules.ID_PATTERN, checked when a job enters), the states are names, the numbers
-- integers (istr), the worker and `extra`'s values encoded by cjson (the worker once a call). An `extra`
-- that names a common field (it wins) takes cjson's way for the whole event.
-- uses: istr, snum, store_event
local EVENT_COMMON = {id = true, kind = true, from = true, to = true, v = true, at = true, attempt = true,
                      worker = true}
local worker_json = {}  -- worker identity -> its JSON string, once a call
local function emit(id, key, from, to, extra, f, v)
  if v == nil then v = redis.call('HINCRBY', key, 'version', 1) end
  if f == nil then
    redis.call('HSET', key, 'updated_at', istr(NOW))
    f = redis.call('HMGET', key, 'kind', 'attempt', 'worker')
  end
  local attempt, worker = f[2], nil
  if type(attempt) ~= 'number' then attempt = snum(attempt) or 0 end
  if (from == 'running' or to == 'running') and f[3] and f[3] ~= '' then worker = f[3] end
  local tail = ''
  if extra then
    for name, value in pairs(extra) do
      if EVENT_COMMON[name] then
        local e = {id = id, kind = f[1] or '', from = from, to = to, v = v, at = NOW, attempt = attempt,
                   worker = worker}
        for n2, v2 in pairs(extra) do e[n2] = v2 end
        store_event(cjson.encode(e))
        return
      end
      tail = tail .. ',"' .. name .. '":' .. cjson.encode(value)
    end
  end
  if worker then
    local w = worker_json[worker]
    if w == nil then
      w = ',"worker":' .. cjson.encode(worker)
      worker_json[worker] = w
    end
    tail = w .. tail
  end
  store_event('{"id":"' .. id .. '","kind":"' .. (f[1] or '') .. '","from":"' .. from .. '","to":"' .. to ..
    '","v":' .. istr(v) .. ',"at":' .. istr(NOW) .. ',"attempt":' .. istr(attempt) .. tail .. '}')
end
