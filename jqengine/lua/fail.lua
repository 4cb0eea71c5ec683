#!lua flags=allow-oom
-- fail: a running attempt failed. Retry after the given delay (the job stays its exclusivity value's
-- head), or move to 'errored' (the dead-letter list) when attempts are used up, the failure is permanent
-- or the kind is at_most_once. A cancel requested meanwhile wins: the job is canceled, not retried.
-- Idempotent: the same (attempt, token) sent again after a lost answer gets the first answer again.
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
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] error text  [6] retry delay ms  [7] permanent 0|1
-- returns: {C_RETRY, run_at} | {C_ERRORED} attempts used up, permanent or at_most_once |
--          {C_CANCELED} a cancel was requested meanwhile | {C_STALE} | {C_MISSING}.
-- uses: fail_job, wake
local state, freed, run_at = fail_job(ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]), ARGV[7] == '1')
wake(freed)
if state == 'retry' then return {C_RETRY, run_at} end
if state == 'errored' then return {C_ERRORED} end
if state == 'canceled' then return {C_CANCELED} end
if state == 'stale' then return {C_STALE} end
return {C_MISSING}
