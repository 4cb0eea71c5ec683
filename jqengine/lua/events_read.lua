#!lua flags=no-writes
-- events_read: the oldest lifecycle events of a queue's stream, for the shipper — whole entries (an entry
-- is one script call's events: _frame.lua), oldest first, until they hold at least `count` events (so
-- an entry of a 2,000-job enqueue is read alone, not 1,000 of them at once).
-- KEYS[1] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- derived: none
-- ARGV: [1] now  [2] count (events; at least one entry is read)
-- returns: the entries, as XRANGE gives them ({id, {field, value, ...}}; field 'n' first: its count of
--   events; an entry written before a call's single event became an array of one has 'i' first)
-- uses: none
local want = tonumber(ARGV[2])
-- XRANGE copies every entry it returns into Lua: ask for few at first (1, 2, 4 …), and never for more
-- than the entries seen so far suggest are still needed (an entry of 2,000 events is read alone)
local out, got, start, ask, largest = {}, 0, '-', 1, 1
while got < want do
  local entries = redis.call('XRANGE', EVENTS, start, '+', 'COUNT', ask)
  if #entries == 0 then break end
  for _, entry in ipairs(entries) do
    local fields = entry[2]
    local n = 1
    if fields[1] == 'n' then n = tonumber(fields[2]) end
    out[#out + 1] = entry
    got = got + n
    if n > largest then largest = n end
    if got >= want then break end
  end
  if #entries < ask then break end
  start = '(' .. entries[#entries][1]
  ask = math.max(1, math.min(ask * 2, math.ceil((want - got) / largest)))
end
return out
