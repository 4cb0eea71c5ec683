#!lua flags=allow-oom
-- dead_retry: give errored (dead-lettered) jobs a fresh set of attempts; they become pending again.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[4] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[5] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[6] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[7] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[8] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[9] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[10] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[11] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[12] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[13] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, fair:<value>
-- ARGV: [1] now  [2] limit  then ids (none = the oldest dead jobs up to limit)
-- returns: number of jobs retried.
-- uses: admit, jkey, stat, wake
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', DEAD, 0, tonumber(ARGV[2]) - 1) end
local ready, n = 0, 0
for _, id in ipairs(ids) do
  local key = jkey(id)
  if redis.call('ZREM', DEAD, id) == 1 and redis.call('HGET', key, 'state') == 'errored' then
    redis.call('ZREM', DONE, id)
    redis.call('HSET', key, 'attempt', 0)
    redis.call('HDEL', key, 'finished_at', 'reason', 'cancel')
    ready = ready + admit(id, key, {message = 'retried from the dead-letter list'})
    n = n + 1
  end
end
if n > 0 then stat('dead_retried', n) end
wake(ready)
return n
