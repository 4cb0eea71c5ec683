-- A claim of one of fair value v's jobs spends its share of v's rate.
-- Per-value rates (fair_rates: value -> jobs/s, a burst of one second's worth, at least 1): GCRA.
-- fairtat:<v> holds the value's theoretical arrival time (ms; it expires when the burst is whole again).
-- A claim that spends the burst puts the value to sleep: out of the ring, in FAIRTIME at the time its
-- next job may start, and the scheduler is woken when that time is the earliest (it steps the queue
-- then: promote_due's fair_wake). Claims wake due values too. A sleeping value's jobs are skipped in place.
-- uses: k, wake_scheduler
local function fair_take(v, fc)
  local rate = tonumber(fc.rates[v])
  if rate == nil then return end
  local t = 1000 / rate
  local tau = (math.max(1, math.ceil(rate)) - 1) * t
  local key = k('fairtat:' .. v)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), NOW) + t
  redis.call('SET', key, string.format('%.17g', tat), 'PXAT', math.ceil(tat) + 1000)  -- 1 s: clocks' slack
  local at = tat - tau
  if at <= NOW then return end
  redis.call('ZREM', FAIRRING, v)
  local first = redis.call('ZRANGE', FAIRTIME, 0, 0, 'WITHSCORES')
  redis.call('ZADD', FAIRTIME, at, v)
  if #first == 0 or at < tonumber(first[2]) then wake_scheduler(at) end
end
