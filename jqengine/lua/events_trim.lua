#!lua flags=allow-oom
-- events_trim: forget a queue's lifecycle events Kafka acknowledged — the stream's entries up to one the
-- shipper read (exactly: MINID of the next id) — and count them off stats events_waiting.
-- KEYS[1] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[2] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: none
-- ARGV: [1] now  [2] the first entry id kept  [3] entries shipped  [4] events they held
-- returns: {C_OK, entries removed}
-- uses: none
local removed = redis.call('XTRIM', EVENTS, 'MINID', ARGV[2])
local waiting = 0
if redis.call('XLEN', EVENTS) > 0 then
  local shipped = tonumber(ARGV[4])
  -- another shipper trimmed some of them already (two owners during a re-deal): count off a share
  if removed < tonumber(ARGV[3]) then
    shipped = math.floor(shipped * removed / math.max(1, tonumber(ARGV[3])))
  end
  waiting = math.max(0, (tonumber(redis.call('HGET', STATS, 'events_waiting')) or 0) - shipped)
end
redis.call('HSET', STATS, 'events_waiting', waiting)
return {C_OK, removed}
