#!lua flags=allow-oom
-- release: a worker gives running jobs back (graceful shutdown). The attempt is refunded and the job is
-- pending again, first in line by its priority; an at_most_once job that had already started is errored
-- instead, because it must never be handed out twice.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] running  ZSET claimed jobs, score = lease deadline (ms)
-- KEYS[4] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[5] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[6] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[7] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[8] kindrun  HASH kind -> jobs of that kind running
-- KEYS[9] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[10] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[11] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[12] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[13] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[14] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[15] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[16] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[17] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, fair:<value>
-- ARGV: [1] now  then quadruples id, attempt, token, started (0|1).
-- returns: one code per job: C_OK released | C_ERRORED (at_most_once) | C_STALE | C_MISSING.
-- uses: finish, jkey, owned, record_attempt, release_excl, release_slot, to_ready, wake
local out, freed = {}, 0
for i = 2, #ARGV, 4 do
  local id, attempt, token, started = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3] == '1'
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then
    out[#out + 1] = C_MISSING
  elseif own == 'stale' then
    out[#out + 1] = C_STALE
  else
    redis.call('ZREM', RUNNING, id)
    freed = freed + release_slot(key)
    local kind = redis.call('HGET', key, 'kind')
    if started and redis.call('HGET', KINDS, kind .. '|delivery') == 'at_most_once' then
      record_attempt(key, 'released', 'released after it started (at_most_once)')
      finish(id, key, 'errored', 'released after it started (at_most_once)')
      freed = freed + release_excl(id, key)
      out[#out + 1] = C_ERRORED
    else
      record_attempt(key, 'released', nil)
      redis.call('HINCRBY', key, 'attempt', -1)
      redis.call('HDEL', key, 'token')
      to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')), {message = 'released by its worker'})
      freed = freed + 1
      out[#out + 1] = C_OK
    end
  end
end
wake(freed)
return out
