#!lua flags=allow-oom
-- extend: push the lease deadline of running jobs out (the worker's lease keeper, in batches).
-- A job whose cancel was requested is canceled here and reported, so its worker stops it.
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
-- ARGV: [1] now  [2] lease_ms (0 = each job's own lease_ms, else the queue's default)
--       then triples id, attempt, token.
-- returns: one code per job: a new deadline (> 0) | C_STALE | C_MISSING | C_CANCELED.
-- uses: cfgnum, finish, jkey, owned, record_attempt, release_excl, release_slot, wake
local lease_arg = tonumber(ARGV[2])
local default_lease = cfgnum('lease_ms', 30000)
local out, freed = {}, 0
for i = 3, #ARGV, 3 do
  local id, attempt, token = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then
    out[#out + 1] = C_MISSING
  elseif own == 'stale' then
    out[#out + 1] = C_STALE
  elseif redis.call('HGET', key, 'cancel') == '1' then
    redis.call('ZREM', RUNNING, id)
    freed = freed + release_slot(key)
    record_attempt(key, 'canceled', 'canceled while running')
    finish(id, key, 'canceled', 'canceled while running')
    freed = freed + release_excl(id, key)
    out[#out + 1] = C_CANCELED
  else
    local lease = lease_arg
    if lease == 0 then lease = tonumber(redis.call('HGET', key, 'lease_ms')) or default_lease end
    local deadline = NOW + lease
    redis.call('ZADD', RUNNING, deadline, id)
    redis.call('HSET', key, 'lease_deadline', deadline)
    out[#out + 1] = deadline
  end
end
wake(freed)
return out
