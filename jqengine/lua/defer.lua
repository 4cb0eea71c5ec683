#!lua flags=allow-oom
-- defer: a running job's handler hands its completion to a job it spawns (a tail call, worker.defer_to).
-- The job leaves the running set (no lease, no kind slot: it holds no worker) and waits in state
-- 'deferred', naming its child in field 'tail' ("<child queue>\t<child id>", with 'tail_policy' fail |
-- retry and 'tail_delay', the retry delay); it keeps its exclusivity value. The child lives in another
-- queue, maybe another slot, so it is not enqueued here: its envelope is left in this queue's gdone hash
-- under ">" .. child id (an id never holds '>'), and the caller enqueues it, then deletes the entry; the
-- scheduler redoes a hand-off a crash interrupted (jqengine.tails). When the child finishes, its own
-- finish() leaves its outcome in its queue's gdone and tail_done.lua ends this job with it.
-- A cancel requested meanwhile wins: the job is canceled and no child is spawned.
-- Idempotent: the same (attempt, token) sent again after a lost answer gets the first answer again.
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
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] child queue  [6] child id  [7] child envelope
--       [8] policy (fail | retry)  [9] retry delay ms (policy retry)
-- returns: {C_OK} deferred (now or by this same write before) | {C_CANCELED} a cancel was requested
--          meanwhile: canceled, spawn nothing | {C_STALE} stale token/attempt | {C_MISSING} no such job.
-- uses: acked, finish, jkey, owned, record_attempt, release_excl, release_slot, set_state, stat, wake
local id, attempt, token = ARGV[2], ARGV[3], ARGV[4]
local cq, cid, cenv, policy, delay = ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9]
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {C_MISSING} end
if own == 'stale' then
  local before = acked(key, attempt, token)
  if before == 'deferred' then return {C_OK} end
  if before == 'canceled' then return {C_CANCELED} end
  return {C_STALE}
end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
local result
if redis.call('HGET', key, 'cancel') == '1' then
  record_attempt(key, 'deferred', nil, token, 'canceled')
  finish(id, key, 'canceled', 'canceled while running')
  freed = freed + release_excl(id, key)
  result = {C_CANCELED}
else
  record_attempt(key, 'deferred', nil, token, 'deferred')
  redis.call('HSET', key, 'tail', cq .. '\t' .. cid, 'tail_policy', policy, 'tail_delay', delay)
  redis.call('HDEL', key, 'token', 'lease_deadline')
  redis.call('HSET', GDONE, '>' .. cid, cjson.encode({spawn = cenv, parent = id, at = NOW}))
  stat('deferred')
  set_state(id, key, 'deferred', {message = string.sub('tail ' .. cq .. '/' .. cid, 1, 200)})
  result = {C_OK}
end
wake(freed)
return result
