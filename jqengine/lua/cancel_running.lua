#!lua flags=allow-oom
-- cancel_running: the job's own handler canceled it (raised Cancel): the running attempt ends canceled,
-- never retried, in one transition — its kind slot and exclusivity value are freed (waking the next
-- job). Idempotent: the same (attempt, token) sent again after a lost answer is answered the same.
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
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] reason (the handler's message)
-- returns: {C_CANCELED} canceled (now or by this same write before) | {C_STALE} stale token/attempt |
--          {C_MISSING} no such job.
-- uses: acked, finish, jkey, owned, record_attempt, release_excl, release_slot, wake
local id, attempt, token, reason = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {C_MISSING} end
if own == 'stale' then
  if acked(key, attempt, token) == 'canceled' then return {C_CANCELED} end
  return {C_STALE}
end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
redis.call('HSET', key, 'last_error', reason)
record_attempt(key, 'canceled', reason, token, 'canceled')
finish(id, key, 'canceled', reason)
freed = freed + release_excl(id, key)
wake(freed)
return {C_CANCELED}
