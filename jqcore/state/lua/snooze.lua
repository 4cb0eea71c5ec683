#!lua flags=allow-oom
-- snooze: put a running job back for a while without spending an attempt (the handler asked for it).
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] delay ms
-- Returns: {1, run_at} | {0} stale | {-1} no such job.
local id, attempt, token, delay = ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {-1} end
if own == 'stale' then return {0} end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
record_attempt(key, 'snoozed', nil)
redis.call('HINCRBY', key, 'attempt', -1)
redis.call('HDEL', key, 'token')
local run_at = NOW + delay
if delay <= 0 then
  to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')))
  freed = freed + 1
else
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'state', 'delayed', 'run_at', run_at)
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler() end
end
touch(key)
stat('snoozed')
wake(freed)
return {1, run_at}
