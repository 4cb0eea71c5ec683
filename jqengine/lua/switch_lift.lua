#!lua flags=allow-oom
-- switch_lift: a kill switch is lifted in this queue (or changed): the queue's switch list becomes
-- ARGV[2], and up to ARGV[4] jobs the switch ARGV[3] parked go back to the ready set with their priority
-- (no attempt was spent on them); the caller calls again while jobs remain. Wakes waiting workers.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[4] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[5] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[6] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[7] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[8] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[9] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[10] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>, idx:<key>=<value>, switched:<name>, fair:<value>
-- ARGV: [1] now  [2] the queue's switches (JSON array; '' = none)  [3] switch name ('' = none to lift)
--       [4] at most this many jobs moved back
-- returns: {jobs made pending, jobs still parked by that switch}.
-- uses: jkey, k, to_ready, wake
if ARGV[2] == '' then redis.call('HDEL', CONFIG, 'switches') else redis.call('HSET', CONFIG, 'switches', ARGV[2]) end
local n, left = 0, 0
if ARGV[3] ~= '' then
  local parked = k('switched:' .. ARGV[3])
  local moved = redis.call('ZPOPMIN', parked, tonumber(ARGV[4]))
  for i = 1, #moved, 2 do
    local id, key = moved[i], jkey(moved[i])
    if redis.call('HGET', key, 'switch') == ARGV[3] and redis.call('HGET', key, 'state') == 'parked' then
      redis.call('HDEL', key, 'switch')
      redis.call('HINCRBY', COUNTS, 'blocked', -1)
      to_ready(id, key, tonumber(moved[i + 1]), {message = 'kill switch ' .. ARGV[3] .. ' lifted'})
      n = n + 1
    end
  end
  left = redis.call('ZCARD', parked)
end
wake(n)
return {n, left}
