-- Wake the scheduler (its one token): an earlier due time appeared (a delayed job, a value's rate).
-- uses: none
local function wake_scheduler()
  redis.call('LPUSH', SCHED, '1')
  redis.call('LTRIM', SCHED, 0, 0)
end
