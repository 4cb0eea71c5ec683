-- Make a job claimable: the ready set plus its filter indexes. A caller that knows the record passes `f`
-- (its fields idx and fair, HMGET order), `r` and `fields` (as transit takes them: the new record's
-- fields, written with its state); without them the record is read.
-- uses: fair_enter, fair_value, fairness, k, set_state, split_lines, transit
local function to_ready(id, key, prio, extra, f, r, fields)
  redis.call('ZADD', READY, prio, id)
  if f == nil then f = redis.call('HMGET', key, 'idx', 'fair') end
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZADD', k('idx:' .. name), prio, id)
  end
  local fc = fairness()
  if fc.key ~= '' then
    local v = f[2] or fair_value(key, fc)
    redis.call('ZADD', k('fair:' .. v), prio, id)
    fair_enter(v, fc)
  end
  if r then transit(id, key, r, 'pending', extra, fields) else set_state(id, key, 'pending', extra) end
end
