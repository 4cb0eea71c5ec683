-- Keep event e for the frame to write once the call ends (at the cap: count it dropped): a table (encoded
-- here) or the text of its JSON in pieces, e .. id .. rest (emit: the rest is the same text for a call's
-- jobs of one kind going one way; the frame joins all the pieces once).
-- Lifecycle events (jqcore/events.py; the shipper moves them to Kafka). Every call bumps the job's
-- version, so each version is exactly one event: no transition without its event, none without its
-- transition. A call's events are kept in `event_sink` (the loader's frame, _frame.lua) and written
-- once it ends, as ONE stream entry: fields n <count> e <JSON array> (jqengine.reads.decode_entry). An
-- event is built with the fields that say something: `worker`, `error`, `digest`, `message`, `run_at`,
-- `origin` and `accepted_at` only when they apply, `queue` not at all — the reader completes them
-- (jqcore.events.DEFAULTS), so Kafka's records still carry every field. The queue's stream holds
-- at most config events_cap events (default 100000; 0 = events off), counted in stats events_waiting (set
-- by the frame, lowered by events_trim.lua once they are shipped): at the cap an event is counted in stats
-- events_dropped instead of stored, never dropped silently.
-- uses: cfgnum, stat
local events_cap, events_len = nil, nil
local function store_event(e, id, rest)
  if events_cap == nil then events_cap = cfgnum('events_cap', 100000) end
  if events_cap <= 0 then return end
  if events_len == nil then
    -- a stream written before the count existed (one entry per event) is counted by its length
    events_len = tonumber(redis.call('HGET', STATS, 'events_waiting')) or redis.call('XLEN', EVENTS)
    event_sink.stream, event_sink.stats = EVENTS, STATS
  end
  if events_len >= events_cap then
    stat('events_dropped')
    return
  end
  local parts = event_sink.parts
  local n = #parts
  if n > 0 then
    parts[n + 1] = ','
    n = n + 1
  end
  if type(e) == 'table' then
    parts[n + 1] = cjson.encode(e)
  else
    parts[n + 1], parts[n + 2], parts[n + 3] = e, id, rest
  end
  event_sink.count = event_sink.count + 1
  events_len = events_len + 1
  event_sink.waiting = events_len
end
