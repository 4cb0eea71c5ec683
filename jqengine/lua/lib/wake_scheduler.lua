-- Wake the scheduler (its one token): a due time `at` (ms) earlier than the ones it knows appeared (a
-- delayed job, a lease, a value's rate). Not for one past STEP_HORIZON: its next step reads that in time.
-- uses: none
local function wake_scheduler(at)
  if at >= NOW + STEP_HORIZON then return end
  redis.call('LPUSH', SCHED, '1')
  redis.call('LTRIM', SCHED, 0, 0)
end
