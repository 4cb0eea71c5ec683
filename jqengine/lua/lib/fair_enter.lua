-- Put value v in the ring (if it has ready jobs, is not there yet, not at its limit nor asleep).
-- Returns true when it entered.
-- uses: fair_asleep, fair_full, k
local function fair_enter(v, fc)
  if redis.call('ZSCORE', FAIRRING, v) or fair_full(v, fc) or fair_asleep(v, fc) then return false end
  if redis.call('ZCARD', k('fair:' .. v)) == 0 then return false end
  local low = redis.call('ZRANGE', FAIRRING, 0, 0, 'WITHSCORES')
  redis.call('ZADD', FAIRRING, tonumber(low[2] or '0'), v)
  return true
end
