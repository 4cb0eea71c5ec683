#!lua flags=allow-oom
-- fail: a running attempt failed. Retry after the given delay (the job stays its exclusivity value's
-- head), or move to 'errored' (the dead-letter list) when attempts are used up, the failure is permanent
-- or the kind is at_most_once. A cancel requested meanwhile wins: the job is canceled, not retried.
-- Idempotent: the same (attempt, token) sent again after a lost answer gets the first answer again.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] error text  [6] retry delay ms  [7] permanent 0|1
-- Returns: {1, 'retry', run_at} | {1, 'errored'} | {1, 'canceled'} | {0} stale | {-1} no such job.
local id, attempt, token, err = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local delay, permanent = tonumber(ARGV[6]), ARGV[7] == '1'
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {-1} end
if own == 'stale' then
  local before = acked(key, attempt, token)
  if before == nil or before == 'completed' then return {0} end
  local sep = string.find(before, ':', 1, true)
  if sep then return {1, string.sub(before, 1, sep - 1), tonumber(string.sub(before, sep + 1))} end
  return {1, before}
end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
redis.call('HSET', key, 'last_error', err)
local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
local delivery = redis.call('HGET', k('kinds'), f[3] .. '|delivery')
local result
if f[4] == '1' then
  record_attempt(key, 'failed', err, token, 'canceled')
  finish(id, key, 'canceled', 'canceled while running')
  freed = freed + release_excl(id, key)
  result = {1, 'canceled'}
elseif permanent or delivery == 'at_most_once' or tonumber(f[1]) >= tonumber(f[2]) then
  local why = permanent and 'permanent failure' or (delivery == 'at_most_once' and 'failed (at_most_once)'
    or 'attempts exhausted')
  record_attempt(key, 'failed', err, token, 'errored')
  finish(id, key, 'errored', why)
  freed = freed + release_excl(id, key)
  result = {1, 'errored'}
else
  local run_at = NOW + delay
  record_attempt(key, 'failed', err, token, 'retry:' .. run_at)
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'state', 'delayed', 'run_at', run_at)
  redis.call('HDEL', key, 'token')
  touch(key)
  stat('retried')
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler() end
  result = {1, 'retry', run_at}
end
wake(freed)
return result
