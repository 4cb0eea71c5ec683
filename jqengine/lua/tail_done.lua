#!lua flags=allow-oom
-- tail_done: the child a deferred job handed its completion to (defer.lua) finished; end the parent with
-- its outcome. Completed: the parent completes with the child's result (dropped when the parent's kind
-- has ignore_result). Errored, canceled or expired: by the parent's policy, 'fail' ends it errored with
-- the child's reason (never retried), 'retry' retries it like a failed attempt (errored once its
-- attempts are used up; at once for an at_most_once kind). The caller runs this from the child's gdone
-- entry (another queue, maybe another slot: the worker that finished the child, else the scheduler's
-- repair); a report for a child the parent no longer waits on (canceled meanwhile, retried onto a new
-- child) changes nothing.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at (ms)
-- KEYS[4] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[5] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[6] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[7] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[8] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[9] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[10] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[11] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[12] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[13] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[14] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[15] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[16] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[17] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, fair:<value>
-- ARGV: [1] now  [2] parent id  [3] child id  [4] child state  [5] child result ('' = none)
--       [6] child error or reason
-- returns: {C_OK} completed | {C_ERRORED} errored | {C_RETRY, run_at} retried |
--          {C_STALE} the parent waits on another child | {C_FINAL, state} the parent is not deferred |
--          {C_MISSING} no such parent.
-- uses: failure, finish, jkey, release_excl, set_state, stat, wake, wake_scheduler
local id, cid, cstate, cresult, cerr = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local key = jkey(id)
local f = redis.call('HMGET', key, 'state', 'tail', 'tail_policy', 'tail_delay', 'attempt', 'max_attempts', 'kind')
if f[1] == false then return {C_MISSING} end
if f[1] ~= 'deferred' then return {C_FINAL, f[1]} end
local tail = f[2] or ''
local tab = string.find(tail, '\t', 1, true)
if not tab or string.sub(tail, tab + 1) ~= cid then return {C_STALE} end
local freed, out = 0, nil
if cstate == 'completed' then
  if cresult ~= '' and redis.call('HGET', KINDS, f[7] .. '|noresult') ~= '1' then
    redis.call('HSET', key, 'result', cresult)
  end
  finish(id, key, 'completed', nil)
  freed = release_excl(id, key)
  out = {C_OK}
else
  local err = string.sub('tail ' .. cid .. ' ' .. cstate .. ': ' .. cerr, 1, 4000)
  redis.call('HSET', key, 'last_error', err)
  local e = failure(err)
  local once = redis.call('HGET', KINDS, f[7] .. '|delivery') == 'at_most_once'
  if f[3] == 'retry' and not once and (tonumber(f[5]) or 0) < (tonumber(f[6]) or 0) then
    local run_at = NOW + (tonumber(f[4]) or 0)
    local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
    redis.call('ZADD', DELAYED, run_at, id)
    redis.call('HSET', key, 'run_at', run_at)
    e.run_at = run_at
    set_state(id, key, 'delayed', e)
    stat('retried')
    if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler(run_at) end
    out = {C_RETRY, run_at}
  else
    finish(id, key, 'errored', err, e)
    freed = release_excl(id, key)
    out = {C_ERRORED}
  end
end
wake(freed)
return out
