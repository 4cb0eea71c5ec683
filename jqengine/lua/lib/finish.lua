-- Move a job to a terminal state and schedule its removal after the retention period. The event's
-- message is the reason unless `extra` says otherwise (a failure's error). A caller that read the record
-- passes `r` (kind, attempt, worker, state, version, as transit takes it, with graph and parent at 10 and
-- 11) and `fields`, what else its transition writes: one HSET writes them with the state. `ended`: the
-- caller adds the job to DONE itself (ended.done: score, id, ...), with other jobs in one ZADD.
-- uses: cfgnum, istr, set_state, stat, transit
local retention_of = {}  -- retention (ms) by terminal state, read once per call
local function finish(id, key, state, reason, extra, r, fields, ended)
  fields = fields or {}
  -- the lease token ends with the lease ('' reads as none: queries.leases, owned); the history keeps the
  -- token a worker's write came with (acked)
  local n = #fields
  fields[n + 1], fields[n + 2], fields[n + 3], fields[n + 4] = 'finished_at', istr(NOW), 'token', ''
  if reason then
    fields[#fields + 1] = 'reason'
    fields[#fields + 1] = reason
  end
  if state == 'errored' then redis.call('ZADD', DEAD, NOW, id) end
  local retention = retention_of[state]
  if retention == nil then
    if state == 'errored' then
      retention = cfgnum('dead_retention_ms', 7 * DAY)
    else
      retention = cfgnum('retention_ms', DAY)
    end
    retention_of[state] = retention
  end
  if ended then
    ended.done[#ended.done + 1] = istr(NOW + retention)
    ended.done[#ended.done + 1] = id
  else
    redis.call('ZADD', DONE, istr(NOW + retention), id)
  end
  stat(state)
  -- A task graph's node: leave the outcome for its graph (another slot). The worker reports it right
  -- after; the scheduler repairs a report a crash interrupted (jqengine.graphs).
  -- A tail call's child (worker.defer_to) reports to the job that deferred to it the same way: field
  -- 'parent' is "<parent queue>\t<parent id>"; jqengine.tails hands the outcome on (tail_done).
  local graph, parent
  if r then
    graph, parent = r[10], r[11]
  else
    graph, parent = unpack(redis.call('HMGET', key, 'graph', 'parent'))
  end
  if (graph and graph ~= '') or (parent and parent ~= '') then
    redis.call('HSET', key, unpack(fields))  -- the result and error read below
    local f = redis.call('HMGET', key, 'attempt', 'result', 'last_error')
    local err = reason or ''
    if state == 'errored' and f[3] then err = f[3] end
    local entry = {state = state, attempt = tonumber(f[1]) or 0, result = f[2] or '', error = err, at = NOW}
    if graph and graph ~= '' then entry.graph = graph else entry.parent = parent end
    redis.call('HSET', GDONE, id, cjson.encode(entry))
  end
  if reason and (extra == nil or extra.message == nil) then
    extra = extra or {}
    extra.message = string.sub(reason, 1, 200)
  end
  if r then transit(id, key, r, state, extra, fields) else set_state(id, key, state, extra, fields) end
end
