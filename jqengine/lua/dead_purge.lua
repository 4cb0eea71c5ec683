#!lua flags=allow-oom
-- dead_purge: delete errored jobs now (the dead-letter list is emptied, or only the given ids).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[3] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[4] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[5] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[6] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id>
-- ARGV: [1] now  [2] limit  then ids (none = the oldest dead jobs up to limit)
-- returns: number of jobs deleted.
-- uses: emit, jkey
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', DEAD, 0, tonumber(ARGV[2]) - 1) end
local n = 0
for _, id in ipairs(ids) do
  if redis.call('ZREM', DEAD, id) == 1 then
    redis.call('ZREM', DONE, id)
    local key = jkey(id)
    if redis.call('EXISTS', key) == 1 then
      emit(id, key, 'errored', 'deleted', {message = 'purged from the dead-letter list'})
      redis.call('DEL', key)
    end
    n = n + 1
  end
end
return n
