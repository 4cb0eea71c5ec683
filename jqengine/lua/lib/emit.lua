-- Record a job's transition as its lifecycle event (store_event), the record's version bumped: `extra`,
-- the event's fields beyond the common ones. A caller that read the record (set_state, transit) passes
-- `f`, its kind, attempt and worker (HMGET order), and `v`, the version it wrote; without them the version
-- is bumped, updated_at set and the fields read here.
-- The event's JSON is written as text, not built as a table for cjson: a job's id and kind are JSON-safe as
-- they are (jqcore.envelope_rules.ID_PATTERN, checked when a job enters), the states are names, the numbers
-- integers (istr), the worker and `extra`'s values encoded by cjson. The text after the id is the same for
-- the jobs of a call of one kind going one way: built once for a run of them. An `extra` that names a
-- common field (it wins) takes cjson's way for the whole event.
-- uses: istr, snum, store_event
local EVENT_COMMON = {id = true, kind = true, from = true, to = true, v = true, at = true, attempt = true,
                      worker = true}
-- the last event's common fields but its id, and their text: a call's jobs of one kind going one way share it
local l_kind, l_from, l_to, l_v, l_attempt, l_worker, l_rest = nil, nil, nil, nil, nil, nil, nil
local function emit(id, key, from, to, extra, f, v)
  if v == nil then v = redis.call('HINCRBY', key, 'version', 1) end
  if f == nil then
    redis.call('HSET', key, 'updated_at', istr(NOW))
    f = redis.call('HMGET', key, 'kind', 'attempt', 'worker')
  end
  local kind, attempt, worker = f[1] or '', f[2], false
  if type(attempt) ~= 'number' then attempt = snum(attempt) or 0 end
  if (from == 'running' or to == 'running') and f[3] and f[3] ~= '' then worker = f[3] end
  if extra and next(extra) ~= nil then
    local tail = ''
    for name, value in pairs(extra) do
      if EVENT_COMMON[name] then
        local e = {id = id, kind = kind, from = from, to = to, v = v, at = NOW, attempt = attempt,
                   worker = worker or nil}
        for n2, v2 in pairs(extra) do e[n2] = v2 end
        store_event(e)
        return
      end
      tail = tail .. ',"' .. name .. '":' .. cjson.encode(value)
    end
    store_event('{"id":"', id, '","kind":"' .. kind .. '","from":"' .. from .. '","to":"' .. to .. '","v":' ..
      istr(v) .. ',"at":' .. istr(NOW) .. ',"attempt":' .. istr(attempt) ..
      (worker and (',"worker":' .. cjson.encode(worker)) or '') .. tail .. '}')
    return
  end
  if kind ~= l_kind or from ~= l_from or to ~= l_to or v ~= l_v or attempt ~= l_attempt or worker ~= l_worker then
    l_kind, l_from, l_to, l_v, l_attempt, l_worker = kind, from, to, v, attempt, worker
    l_rest = '","kind":"' .. kind .. '","from":"' .. from .. '","to":"' .. to .. '","v":' .. istr(v) .. ',"at":' ..
      istr(NOW) .. ',"attempt":' .. istr(attempt) .. (worker and (',"worker":' .. cjson.encode(worker)) or '') .. '}'
  end
  store_event('{"id":"', id, l_rest)
end
