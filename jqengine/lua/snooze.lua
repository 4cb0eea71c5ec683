#!lua flags=allow-oom
-- snooze: put a running job back for a while without spending an attempt (the handler asked for it).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at (ms)
-- KEYS[4] running  ZSET claimed jobs, score = lease deadline (ms)
-- KEYS[5] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[6] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[7] kindrun  HASH kind -> jobs of that kind running
-- KEYS[8] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[9] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[10] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[11] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[12] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[13] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[14] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[15] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>, idx:<key>=<value>, parked:<kind>, fair:<value>
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] delay ms
-- returns: {C_OK, run_at} | {C_STALE} | {C_MISSING}.
-- uses: jkey, owned, record_attempt, release_slot, set_state, stat, to_ready, wake, wake_scheduler
local id, attempt, token, delay = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {C_MISSING} end
if own == 'stale' then return {C_STALE} end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
record_attempt(key, 'snoozed', nil)
redis.call('HINCRBY', key, 'attempt', -1)
redis.call('HDEL', key, 'token')
local run_at = NOW + delay
if delay <= 0 then
  to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')), {message = 'snoozed'})
  freed = freed + 1
else
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'run_at', run_at)
  set_state(id, key, 'delayed', {run_at = run_at, message = 'snoozed'})
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler(run_at) end
end
stat('snoozed')
wake(freed)
return {C_OK, run_at}
