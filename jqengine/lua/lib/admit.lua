-- A due job enters the pending world: behind its exclusivity value's head, or ready. Returns 1 if ready.
-- uses: k, set_state, to_ready
local function admit(id, key, extra)
  local prio = tonumber(redis.call('HGET', key, 'prio'))
  local excl = redis.call('HGET', key, 'excl')
  if excl and excl ~= '' then
    local head = redis.call('HGET', XHEAD, excl)
    if head and head ~= id then
      redis.call('ZADD', k('xq:' .. excl), prio, id)
      set_state(id, key, 'waiting', extra)
      redis.call('HINCRBY', COUNTS, 'blocked', 1)
      return 0
    end
    redis.call('HSET', XHEAD, excl, id)
  end
  to_ready(id, key, prio, extra)
  return 1
end
