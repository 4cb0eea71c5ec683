#!lua flags=allow-oom
-- schedule_far: index far-future jobs kept in Kafka's schedule topic, so GET answers 'scheduled' and
-- DELETE finds them. The job's record stays in Kafka; Redis keeps only this index entry. A job Redis
-- already holds in any state (moved in earlier, or a cancel's tombstone) is left alone: its record wins.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] far      HASH far-future jobs kept in Kafka's schedule topic: id -> run_at (ms)
-- KEYS[3] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[4] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[5] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: job:<id> (read only)
-- ARGV: [1] now  [2] job count N, then per job: id, run_at
-- returns: {C_OK, outcome_1 … outcome_N} with outcome 'scheduled' (indexed) | 'held' (Redis has it)
-- uses: jkey, store_event

-- A far-future job was indexed: it has no record in Redis yet (hence no version: its event is v 0, the
-- record's own events start at 1 when it is moved in).
local function emit_far(id, run_at)
  store_event({id = id, kind = '', from = '', to = 'far', v = 0, at = NOW, attempt = 0, run_at = run_at})
end

local n = tonumber(ARGV[2])
local out = {C_OK}
if redis.call('TYPE', FAR)['ok'] == 'zset' then
  redis.call('DEL', FAR) -- an index written before it was a HASH: the schedulers write it again
end
for i = 0, n - 1 do
  local id, run_at = ARGV[3 + 2 * i], ARGV[4 + 2 * i]
  if redis.call('EXISTS', jkey(id)) == 1 then
    out[#out + 1] = 'held'
  else
    if redis.call('HSET', FAR, id, run_at) == 1 then
      emit_far(id, tonumber(run_at))
    end
    out[#out + 1] = 'scheduled'
  end
end
return out
