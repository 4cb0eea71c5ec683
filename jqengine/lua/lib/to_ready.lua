-- Make a job claimable: the ready set plus its filter indexes.
-- uses: fair_enter, fair_value, fairness, k, set_state, split_lines
local function to_ready(id, key, prio, extra)
  redis.call('ZADD', READY, prio, id)
  local f = redis.call('HMGET', key, 'idx', 'fair')
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZADD', k('idx:' .. name), prio, id)
  end
  local fc = fairness()
  if fc.key ~= '' then
    local v = f[2] or fair_value(key, fc)
    redis.call('ZADD', k('fair:' .. v), prio, id)
    fair_enter(v, fc)
  end
  set_state(id, key, 'pending', extra)
end
