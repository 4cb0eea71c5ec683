#!lua flags=allow-oom
-- fail: a running attempt failed. Retry after the given delay (the job stays its exclusivity value's
-- head), or move to 'errored' (the dead-letter list) when attempts are used up, the failure is permanent
-- or the kind is at_most_once. A cancel requested meanwhile wins: the job is canceled, not retried.
-- Idempotent: the same (attempt, token) sent again after a lost answer gets the first answer again.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs, score = priority
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at
-- KEYS[4] running  ZSET claimed jobs, score = lease deadline
-- KEYS[5] done     ZSET terminal jobs, score = when GC removes them
-- KEYS[6] dead     ZSET errored jobs (the dead-letter list)
-- KEYS[7] config   HASH queue configuration
-- KEYS[8] kinds    HASH per-kind options (<kind>|limit, |attempts, |delivery)
-- KEYS[9] kindrun  HASH kind -> jobs of that kind running
-- KEYS[10] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[11] fairrun  HASH fair queues: value -> its jobs running
-- KEYS[12] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[13] counts   HASH blocked (waiting + parked jobs)
-- KEYS[14] stats    HASH lifetime counters
-- KEYS[15] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[16] wake     LIST wake tokens for waiting workers
-- KEYS[17] sched    LIST wake token for the scheduler
-- KEYS[18] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- KEYS[19] gdone    HASH graph nodes' jobs finished, not yet reported to their graph
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, fair:<value>
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] error text  [6] retry delay ms  [7] permanent 0|1
-- returns: {C_RETRY, run_at} | {C_ERRORED} attempts used up, permanent or at_most_once |
--          {C_CANCELED} a cancel was requested meanwhile | {C_STALE} | {C_MISSING}.
local id, attempt, token, err = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local delay, permanent = tonumber(ARGV[6]), ARGV[7] == '1'
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {C_MISSING} end
if own == 'stale' then
  local before = acked(key, attempt, token)
  if before == nil or before == 'completed' then return {C_STALE} end
  local sep = string.find(before, ':', 1, true)
  if sep then return {C_RETRY, tonumber(string.sub(before, sep + 1))} end
  if before == 'errored' then return {C_ERRORED} end
  return {C_CANCELED}
end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
redis.call('HSET', key, 'last_error', err)
local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
local delivery = redis.call('HGET', KINDS, f[3] .. '|delivery')
local result
if f[4] == '1' then
  record_attempt(key, 'failed', err, token, 'canceled')
  finish(id, key, 'canceled', 'canceled while running')
  freed = freed + release_excl(id, key)
  result = {C_CANCELED}
elseif permanent or delivery == 'at_most_once' or tonumber(f[1]) >= tonumber(f[2]) then
  local why = permanent and 'permanent failure' or (delivery == 'at_most_once' and 'failed (at_most_once)'
    or 'attempts exhausted')
  record_attempt(key, 'failed', err, token, 'errored')
  finish(id, key, 'errored', why, failure(err))
  freed = freed + release_excl(id, key)
  result = {C_ERRORED}
else
  local run_at = NOW + delay
  record_attempt(key, 'failed', err, token, 'retry:' .. run_at)
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'run_at', run_at)
  redis.call('HDEL', key, 'token')
  local e = failure(err)
  e.run_at = run_at
  set_state(id, key, 'delayed', e)
  stat('retried')
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler() end
  result = {C_RETRY, run_at}
end
wake(freed)
return result
