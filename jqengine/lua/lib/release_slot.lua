-- A running job left the running set: free its kind slot, unpark one job of that kind. Returns jobs made ready.
-- `kind`, `counted`: its fields kind and fairrun when the caller read them (false: none), else (kind nil)
-- read here.
-- A kind without a limit has nothing parked (kind_limit) and no reader of its count in this call: its
-- count goes down once the call ended (tally).
-- uses: fair_enter, fairness, jkey, k, kind_limit, tally, to_ready
local function release_slot(key, kind, counted)
  if kind == nil then kind, counted = unpack(redis.call('HMGET', key, 'kind', 'fairrun')) end
  local limited = kind_limit(kind)
  if not limited then
    tally(KINDRUN, kind, -1)
  elseif redis.call('HINCRBY', KINDRUN, kind, -1) < 0 then
    redis.call('HSET', KINDRUN, kind, 0)
  end
  if counted then  -- a fair queue's limited value: a slot frees, the value may enter the ring again
    redis.call('HDEL', key, 'fairrun')
    if redis.call('HINCRBY', FAIRRUN, counted, -1) <= 0 then redis.call('HDEL', FAIRRUN, counted) end
    local fc = fairness()
    if fc.key ~= '' then fair_enter(counted, fc) end
  end
  if not limited then return 0 end
  local nxt = redis.call('ZPOPMIN', k('parked:' .. kind))
  if #nxt == 0 then return 0 end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
  to_ready(nxt[1], jkey(nxt[1]), tonumber(nxt[2]))
  return 1
end
