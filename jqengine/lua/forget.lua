#!lua flags=allow-oom
-- forget: delete finished jobs now (completed, errored, canceled, expired), closing their dedup window
-- early so the same ids can be enqueued again (`jobq replay --force`). A job that is not finished
-- (pending, delayed, parked, running) is left alone: forgetting it would let a replay run it twice.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[3] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[4] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[5] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[6] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>
-- ARGV: [1] now  then ids
-- returns: one outcome per id: 'forgotten' | 'active' | 'missing'.
-- uses: emit, jkey, stat
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = jkey(id)
  local state = redis.call('HGET', key, 'state')
  if state == false then
    out[#out + 1] = 'missing'
  elseif state == 'completed' or state == 'errored' or state == 'canceled' or state == 'expired' then
    emit(id, key, state, 'deleted', {message = 'forgotten'})
    redis.call('DEL', key)
    redis.call('ZREM', DONE, id)
    redis.call('ZREM', DEAD, id)
    stat('forgotten')
    out[#out + 1] = 'forgotten'
  else
    out[#out + 1] = 'active'
  end
end
return out
