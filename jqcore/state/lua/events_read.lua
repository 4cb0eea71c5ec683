#!lua flags=no-writes
-- events_read: the oldest lifecycle events of a queue's stream, for the shipper — whole entries (an entry
-- is one script call's events: _frame.lua), oldest first, until they hold at least `count` events (so
-- an entry of a 2,000-job enqueue is read alone, not 1,000 of them at once).
-- KEYS[1] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- derived: none
-- ARGV: [1] now  [2] count (events; at least one entry is read)
-- returns: the entries, as XRANGE gives them ({id, {field, value, ...}}; field 'n' first when it holds more
--   than one event)
local want = tonumber(ARGV[2])
local out, got, start = {}, 0, '-'
while got < want do
  local entries = redis.call('XRANGE', EVENTS, start, '+', 'COUNT', math.min(want - got, 1000))
  if #entries == 0 then break end
  for _, entry in ipairs(entries) do
    out[#out + 1] = entry
    local fields = entry[2]
    if fields[1] == 'n' then got = got + tonumber(fields[2]) else got = got + 1 end
    if got >= want then break end
  end
  start = '(' .. entries[#entries][1]
end
return out
