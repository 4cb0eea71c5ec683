#!lua flags=allow-oom
-- cancel: cancel / unschedule a job by id in any non-terminal state. A running job is flagged; its worker
-- learns at its next extend (canceled there) or fail (canceled, not retried). An id not (yet) in Redis —
-- still in Kafka — gets a tombstone: a canceled record, so enqueue_batch reports it 'canceled' later.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] id  [3] reason
-- Returns: {1, previous_state} canceled | {2, 'running'} flagged | {3, 'missing'} tombstone left |
--          {0, terminal_state} nothing to do.
local id, reason = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, 'state', 'excl', 'kind')
local state = f[1]
if state == false then
  redis.call('HSET', key, 'tombstone', '1', 'enqueued_at', NOW, 'attempt', 0, 'version', 0)
  finish(id, key, 'canceled', reason)
  return {3, 'missing'}
end
local freed = 0
if state == 'running' then
  redis.call('HSET', key, 'cancel', '1')
  touch(key)
  return {2, 'running'}
elseif state == 'pending' then
  from_ready(id, key)
elseif state == 'waiting' then
  redis.call('ZREM', k('xq:' .. f[2]), id)
  redis.call('HINCRBY', k('counts'), 'blocked', -1)
elseif state == 'parked' then
  redis.call('ZREM', k('parked:' .. f[3]), id)
  redis.call('HINCRBY', k('counts'), 'blocked', -1)
elseif state == 'delayed' then
  redis.call('ZREM', DELAYED, id)
else
  return {0, state}
end
finish(id, key, 'canceled', reason)
freed = release_excl(id, key)
wake(freed)
return {1, state}
