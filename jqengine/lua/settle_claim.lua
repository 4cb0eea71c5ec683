#!lua flags=allow-oom
-- settle_claim: a worker pool's round in one call: the outcomes of the jobs it finished, written exactly
-- as settle.lua writes them (lease and token checked per job, one event per transition, idempotent per
-- job), then up to M jobs claimed exactly as an unfiltered claim.lua claims them (lowest priority value
-- first, a lease and a fresh token each, an attempt spent; kind limits, exclusivity, fairness, kill
-- switches and pause hold): a busy pool sends one script call per round instead of one per completion
-- plus a claim. Jobs the outcomes made ready (a kind slot or exclusivity value freed) are claimable by
-- this same call. It never registers or deregisters a hand-off waiter; like claim.lua, a claim that
-- stops short with jobs still ready pushes a wake token.
-- Stats: claimed (jobs), wait_ms (their summed start latency), and the outcomes' counters.
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
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, switched:<name>, fair:<value>, fairtat:<value>
-- ARGV: [1] now  [2] N, then per job 7 values (as settle.lua: id, attempt, token, 'c' | 'f', result or
--       error text, retry delay ms, permanent 0|1), then M (jobs to claim), lease_ms (0 = job's, else
--       queue default), token prefix (random), worker identity
-- returns: {C_OK, code, run_at, … (per settled job, as settle.lua: C_OK completed | C_RETRY | C_ERRORED |
--          C_CANCELED | C_STALE | C_MISSING), id, envelope, attempt, token, deadline, … (per claimed job, as
--          claim.lua)}; nothing claimed while the queue is paused.
-- uses: cfg, claim_from, settle_jobs, wake
local CODE = {ok = C_OK, retry = C_RETRY, errored = C_ERRORED, canceled = C_CANCELED, stale = C_STALE,
              missing = C_MISSING}
local count = tonumber(ARGV[2])
local out = {C_OK}
local woken = settle_jobs(3, count, out, CODE)
local c = 3 + count * 7
local n, lease_arg, token_prefix, worker = tonumber(ARGV[c]), tonumber(ARGV[c + 1]), ARGV[c + 2], ARGV[c + 3]
-- at a trickle nothing is ready (each job was handed to a waiting pool): one ZCARD instead of a claim's reads
if n > 0 and redis.call('ZCARD', READY) > 0 and cfg('paused', '0') ~= '1' then
  local claimed, freed = claim_from(READY, n, lease_arg, token_prefix, worker, nil, out)
  woken = woken + freed
  if claimed < n and redis.call('ZCARD', READY) > 0 then woken = woken + 1 end
end
wake(woken)
return out
