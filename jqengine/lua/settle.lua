#!lua flags=allow-oom
-- settle: the outcomes of a batch of running jobs (a batch handler's items) in one call: each job
-- completed (with an optional small result) or failed (retried after its delay, or errored), exactly as
-- complete.lua and fail.lua do for one job (the same helpers: lease and token checked per job, one event
-- per transition, idempotent per job), and the workers woken once for all the jobs it made ready.
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
-- ARGV: [1] now  [2] N, then per job 7 values: id, attempt, token, 'c' (complete) | 'f' (fail),
--       result ('' = none) or error text, retry delay ms, permanent 0|1 (the last two: 'f' only)
-- returns: {C_OK, code, run_at, …} per job in order: C_OK completed | C_RETRY (run_at) | C_ERRORED |
--          C_CANCELED (a cancel was requested meanwhile) | C_STALE | C_MISSING; run_at 0 unless C_RETRY.
-- uses: settle_jobs, wake
local CODE = {ok = C_OK, retry = C_RETRY, errored = C_ERRORED, canceled = C_CANCELED, stale = C_STALE,
              missing = C_MISSING}
local out = {C_OK}
wake(settle_jobs(3, tonumber(ARGV[2]), out, CODE))
return out
