#!lua flags=allow-oom
-- configure_kind: a job type's options in this queue — concurrency limit across all workers, max
-- attempts, delivery (at_least_once | at_most_once), the default priority of its jobs enqueued without
-- one (enqueue_batch), ignore_result (complete keeps no result). Raising the limit unparks waiting jobs.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[4] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[5] kindrun  HASH kind -> jobs of that kind running
-- KEYS[6] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[7] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[8] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[9] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[10] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[11] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[12] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>, idx:<key>=<value>, parked:<kind>, fair:<value>
-- ARGV: [1] now  [2] kind  [3] limit ('' = none)  [4] max attempts ('' = queue default)  [5] delivery
--       [6] default priority ('' = none: the enqueue time)  [7] ignore_result ('1', or '' = keep results)
-- returns: number of parked jobs made pending.
-- uses: jkey, k, to_ready, wake
local kind = ARGV[2]
local fields = {limit = ARGV[3], attempts = ARGV[4], delivery = ARGV[5], prio = ARGV[6] or '',
  noresult = ARGV[7] or ''}
for name, value in pairs(fields) do
  if value == '' then redis.call('HDEL', KINDS, kind .. '|' .. name)
  else redis.call('HSET', KINDS, kind .. '|' .. name, value) end
end
local limit = tonumber(ARGV[3])
local n = 0
while true do
  local running = tonumber(redis.call('HGET', KINDRUN, kind) or '0')
  if limit and running + n >= limit then break end
  local nxt = redis.call('ZPOPMIN', k('parked:' .. kind))
  if #nxt == 0 then break end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
  to_ready(nxt[1], jkey(nxt[1]), tonumber(nxt[2]))
  n = n + 1
end
wake(n)
return n
