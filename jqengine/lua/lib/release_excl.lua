-- The exclusivity head finished for good: let the next job of that value run. Returns jobs made ready.
-- `excl`: its field excl when the caller read it (false: none), else read here.
-- uses: jkey, k, to_ready
local function release_excl(id, key, excl)
  if excl == nil then excl = redis.call('HGET', key, 'excl') end
  if not excl or excl == '' or redis.call('HGET', XHEAD, excl) ~= id then return 0 end
  local nxt = redis.call('ZPOPMIN', k('xq:' .. excl))
  if #nxt == 0 then
    redis.call('HDEL', XHEAD, excl)
    return 0
  end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
  redis.call('HSET', XHEAD, excl, nxt[1])
  to_ready(nxt[1], jkey(nxt[1]), tonumber(nxt[2]))
  return 1
end
