#!lua flags=allow-oom
-- promote_due: delayed jobs whose run_at has come become pending (or wait behind their exclusivity
-- value), and fair values held by their rate whose time came go back into the ring. Never early: only
-- run_at <= now. Any number of schedulers may run this at once. Jobs made ready go straight to idle
-- workers registered for hand-offs (lib/hand_off.lua), the rest wake waiting workers.
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
-- KEYS[17] waiters  HASH pools waiting for a hand-off: id -> "slots|lease_ms|deadline|token prefix|worker"
-- KEYS[18] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[19] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[20] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, inbox:<waiter>, switched:<name>, fair:<value>, fairtat:<value>
-- ARGV: [1] now  [2] limit
-- returns: {promoted, next due time or -1 (a delayed job's run_at, or when a fair value's rate lets it
--   start a job again), {now - run_at of each promoted job}}
-- uses: admit, fair_wake, fairness, hand_off, jkey, wake
local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', NOW, 'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))
local ready, late = 0, {}
for i = 1, #due, 2 do
  local id = due[i]
  late[#late + 1] = NOW - tonumber(due[i + 1])
  redis.call('ZREM', DELAYED, id)
  local key = jkey(id)
  if redis.call('EXISTS', key) == 1 then
    ready = ready + admit(id, key)
  end
end
local fc = fairness()
if fc.key ~= '' then ready = ready + fair_wake(fc) end  -- values their rate lets start a job again
local handed, freed = hand_off()
wake(ready - handed + freed)
local nxt = tonumber(redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')[2] or '-1')
local asleep = redis.call('ZRANGE', FAIRTIME, 0, 0, 'WITHSCORES')
if #asleep > 0 then
  local at = math.ceil(tonumber(asleep[2]))
  if nxt < 0 or at < nxt then nxt = at end
end
return {#late, nxt, late}
