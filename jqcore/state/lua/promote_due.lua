#!lua flags=allow-oom
-- promote_due: delayed jobs whose run_at has come become pending (or wait behind their exclusivity
-- value). Never early: only run_at <= now. Any number of schedulers may run this at once.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs, score = priority
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at
-- KEYS[4] config   HASH queue configuration
-- KEYS[5] counts   HASH blocked (waiting + parked jobs)
-- KEYS[6] stats    HASH lifetime counters
-- KEYS[7] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[8] wake     LIST wake tokens for waiting workers
-- KEYS[9] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>
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
wake(ready)
local nxt = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
return {#late, tonumber(nxt[2] or '-1'), late}
