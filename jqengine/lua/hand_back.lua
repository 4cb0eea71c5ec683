#!lua flags=allow-oom
-- hand_back: a pool claimed a job whose kind it has no handler for (a rolling deploy: the new kind's
-- workers are not all up yet). The attempt is refunded and the job waits as 'delayed' for the given
-- delay, so a pool that knows the kind claims it next. Only when no pool has run it for dead_after ms
-- since it was first handed back (in a row) does it become errored (the dead-letter list).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at (ms)
-- KEYS[4] running  ZSET claimed jobs, score = lease deadline (ms)
-- KEYS[5] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[6] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[7] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[8] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[9] kindrun  HASH kind -> jobs of that kind running
-- KEYS[10] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[11] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[12] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[13] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[14] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[15] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[16] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[17] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[18] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[19] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, fair:<value>
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] delay ms  [6] dead after ms
-- returns: {C_OK, run_at} handed back | {C_ERRORED} no pool ran it for dead_after ms | {C_STALE} |
--          {C_MISSING}.
-- uses: finish, jkey, owned, record_attempt, release_excl, release_slot, set_state, stat, wake,
--       wake_scheduler
local id, attempt, token = ARGV[2], ARGV[3], ARGV[4]
local delay, dead_after = tonumber(ARGV[5]), tonumber(ARGV[6])
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {C_MISSING} end
if own == 'stale' then return {C_STALE} end
local kind = redis.call('HGET', key, 'kind')
local raw = redis.call('HGET', key, 'history')
local hist = (raw and raw ~= '') and cjson.decode(raw) or {}
local since = tonumber(redis.call('HGET', key, 'unhandled_since') or '')
if since == nil or #hist == 0 or hist[#hist].outcome ~= 'handed_back' then since = NOW end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
local why = 'no handler for kind ' .. kind .. ' in the pool that claimed it'
record_attempt(key, 'handed_back', why)
redis.call('HSET', key, 'unhandled_since', since)
stat('handed_back')
if NOW - since >= dead_after then
  finish(id, key, 'errored', 'no pool ran kind ' .. kind .. ' for ' .. (NOW - since) .. ' ms')
  freed = freed + release_excl(id, key)
  wake(freed)
  return {C_ERRORED}
end
redis.call('HINCRBY', key, 'attempt', -1)
redis.call('HDEL', key, 'token')
local run_at = NOW + delay
local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
redis.call('ZADD', DELAYED, run_at, id)
redis.call('HSET', key, 'run_at', run_at)
set_state(id, key, 'delayed', {run_at = run_at, message = why})
if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler(run_at) end
wake(freed)
return {C_OK, run_at}
