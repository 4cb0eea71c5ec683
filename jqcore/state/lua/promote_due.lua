#!lua flags=allow-oom
-- promote_due: delayed jobs whose run_at has come become pending (or wait behind their exclusivity
-- value). Never early: only run_at <= now. Any number of schedulers may run this at once. Jobs made
-- ready go straight to idle workers registered for hand-offs (hand_off in _lib.lua), the rest wake
-- waiting workers.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs, score = priority
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at
-- KEYS[4] running  ZSET claimed jobs, score = lease deadline
-- KEYS[5] done     ZSET terminal jobs, score = when GC removes them
-- KEYS[6] dead     ZSET errored jobs (the dead-letter list)
-- KEYS[7] config   HASH queue configuration
-- KEYS[8] kinds    HASH per-kind options (<kind>|limit, |attempts, |delivery)
-- KEYS[9] kindrun  HASH kind -> jobs of that kind running
-- KEYS[10] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[11] fairrun  HASH fair queues: value -> its jobs running
-- KEYS[12] counts   HASH blocked (waiting + parked jobs)
-- KEYS[13] stats    HASH lifetime counters
-- KEYS[14] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[15] wake     LIST wake tokens for waiting workers
-- KEYS[16] waiters  HASH idle worker pools waiting for a hand-off: waiter id -> "slots|lease_ms|deadline|…"
-- KEYS[17] sched    LIST wake token for the scheduler
-- KEYS[18] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- KEYS[19] gdone    HASH graph nodes' jobs finished, not yet reported to their graph
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, inbox:<waiter>, switched:<name>, fair:<value>
-- ARGV: [1] now  [2] limit
-- returns: {promoted, next_run_at or -1, {now - run_at of each promoted job}}
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
local handed, freed = hand_off()
wake(ready - handed + freed)
local nxt = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
return {#late, tonumber(nxt[2] or '-1'), late}
