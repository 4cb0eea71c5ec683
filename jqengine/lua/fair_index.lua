#!lua flags=allow-oom
-- fair_index: (re)index a chunk of a queue's ready jobs for fairness after its fair_key, fair_weights,
-- fair_limits or fair_rates changed: each job's fair value is read from its envelope again (a job enqueued
-- before the queue had fair_key has none), the job moved to that value's set and the value put in the ring
-- (a value a limit no longer holds enters again; the first chunk wakes every value held by its rate). With fair_key unset the ring is dropped (claims go by priority).
-- Engine.configure_queue calls it chunk by chunk until it returns a next offset of 0.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[4] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[5] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[6] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- derived: job:<id>, fair:<value>
-- ARGV: [1] now  [2] offset into the ready set  [3] jobs in this chunk at most
-- returns: {jobs indexed, next offset (0: done)}.
-- uses: fair_enter, fair_value, fairness, jkey, k
local fc = fairness()
local n, nxt = 0, 0
if fc.key == '' then
  redis.call('DEL', FAIRRING, FAIRTIME)
else
  local offset, count = tonumber(ARGV[2]), tonumber(ARGV[3])
  if offset == 0 then redis.call('DEL', FAIRTIME) end  -- rates changed: sleeping values enter again
  local ids = redis.call('ZRANGE', READY, offset, offset + count - 1, 'WITHSCORES')
  for i = 1, #ids, 2 do
    local id, key = ids[i], jkey(ids[i])
    local old = redis.call('HGET', key, 'fair')
    local v = fair_value(key, fc)
    if old and old ~= v then redis.call('ZREM', k('fair:' .. old), id) end
    redis.call('ZADD', k('fair:' .. v), tonumber(ids[i + 1]), id)
    fair_enter(v, fc)
    n = n + 1
  end
  if n == count then nxt = offset + n end
end
return {n, nxt}
