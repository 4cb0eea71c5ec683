#!lua flags=allow-oom
-- cancel: cancel / unschedule a job by id in any non-terminal state. A running job is flagged; its worker
-- learns at its next extend (canceled there) or fail (canceled, not retried). An id not (yet) in Redis —
-- still in Kafka, or a far-future job in the schedule topic (its index entry is removed) — gets a
-- tombstone: a canceled record, so enqueue_batch reports it 'canceled' when it arrives or is moved in.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at (ms)
-- KEYS[4] far      HASH far-future jobs kept in Kafka's schedule topic: id -> run_at (ms)
-- KEYS[5] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[6] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[7] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[8] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[9] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[10] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[11] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[12] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[13] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[14] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[15] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[16] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, switched:<name>, fair:<value>
-- ARGV: [1] now  [2] id  [3] reason
-- returns: {C_OK, previous_state} canceled | {C_FLAGGED, 'running'} |
--          {C_TOMBSTONED, 'missing' | 'scheduled' (a far-future job)} |
--          {C_FINAL, terminal_state} nothing to do.
-- uses: emit, finish, from_ready, jkey, k, release_excl, wake
local id, reason = ARGV[2], ARGV[3]
local key = jkey(id)
local f = redis.call('HMGET', key, 'state', 'excl', 'kind')
local state = f[1]
if state == false then
  local far = redis.call('HDEL', FAR, id)
  redis.call('HSET', key, 'tombstone', '1', 'enqueued_at', NOW, 'attempt', 0, 'version', 0)
  finish(id, key, 'canceled', reason)
  return {C_TOMBSTONED, far == 1 and 'scheduled' or 'missing'}
end
local freed = 0
if state == 'running' then
  redis.call('HSET', key, 'cancel', '1')
  emit(id, key, 'running', 'running', {message = string.sub('cancel requested: ' .. reason, 1, 200)})
  return {C_FLAGGED, 'running'}
elseif state == 'pending' then
  from_ready(id, key)
elseif state == 'waiting' then
  redis.call('ZREM', k('xq:' .. f[2]), id)
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
elseif state == 'parked' then
  local switch = redis.call('HGET', key, 'switch')
  if switch then
    redis.call('ZREM', k('switched:' .. switch), id)
    redis.call('HDEL', key, 'switch')
  else
    redis.call('ZREM', k('parked:' .. f[3]), id)
  end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
elseif state == 'delayed' then
  redis.call('ZREM', DELAYED, id)
elseif state == 'deferred' then
  -- waiting on its tail call's child (defer.lua): in no set; the child runs on, its report finds the
  -- parent finished and changes nothing
else
  return {C_FINAL, state}
end
finish(id, key, 'canceled', reason)
freed = release_excl(id, key)
wake(freed)
return {C_OK, state}
