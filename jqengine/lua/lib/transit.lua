-- Change a job's state when the caller has read its record: `r` holds its kind, attempt, worker, state and
-- version (HMGET order; attempt and worker as they are after this transition). One HSET writes the state,
-- updated_at, the next version and `fields` (name, value, ...: what else the transition writes, nil =
-- nothing), then the event (emit) — instead of a read, a write and an HINCRBY of their own. Numbers go to
-- Redis as text (istr).
-- uses: emit, istr, snum
local function transit(id, key, r, to, extra, fields)
  local v = (snum(r[5]) or 0) + 1
  if fields and #fields > 0 then
    redis.call('HSET', key, 'state', to, 'updated_at', istr(NOW), 'version', istr(v), unpack(fields))
  else
    redis.call('HSET', key, 'state', to, 'updated_at', istr(NOW), 'version', istr(v))
  end
  emit(id, key, r[4] or '', to, extra, r, v)
end
