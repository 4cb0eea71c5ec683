-- _frame.lua: how every transition runs. The loader (jqengine.scripts.function_library) puts the key
-- locals, ARGV and _base.lua before this file, the functions of lib/ in place of the first marker line
-- below and, in place of the last one, each transition: its body as a function (`transition`), and its
-- registration (redis.register_function) with a callback that binds the call's KEYS to the transition's
-- declared key locals, ARGV and NOW, starts afresh the per-call state of the lib/ functions it uses (a
-- lib/ file's lower-case locals that are not functions: memos and lists kept for one call), and runs it
-- here, under pcall. All of it is defined once, when the library is loaded (FUNCTION LOAD), not at each
-- call.
--
-- The call's lifecycle events (lib/store_event.lua: their JSON text, in pieces) wait in event_sink and are
-- written here, once the transition ended, as ONE entry of the queue's events stream — also when it
-- ended in an error after some writes (Redis keeps a function's writes up to the error), so no transition
-- is ever without its event. One entry per call instead of one per event: a call that claims or settles
-- 50 jobs makes one XADD of the events' texts joined, not 100 (issue 38, docs/benchmarks.md):
--   XADD <events> * n <count> e <JSON array of the events, in the order they happened>
-- then stats events_waiting = the events the stream holds now (what store_event counts against the cap).
-- Events are built lean (lib/store_event.lua) and completed by their reader (jqengine.reads.decode_entry:
-- jqcore.events.DEFAULTS and the stream's queue), a call's only event too: completing it here (a cjson
-- decode and encode a call) cost a one-job call a sixth of its Redis instructions.
-- Counters (lib/tally.lua: the lifetime stats, a kind's running jobs) wait in counter_sink (hash key ->
-- field -> sum) the same way: one HINCRBY a counter once the transition ended, not one per job.
-- Once a call ended, every key local and ARGV is nil again: no call sees another's keys.
local event_sink, counter_sink
--@LIBRARY
local function run(transition)
  event_sink = {parts = {}, count = 0, stream = nil, stats = nil, waiting = 0}
  counter_sink = {}
  local ok, result = pcall(transition)
--@UNBIND
  local stored = event_sink.count
  if stored > 0 then
    redis.call('XADD', event_sink.stream, '*', 'n', stored, 'e', '[' .. table.concat(event_sink.parts) .. ']')
    redis.call('HSET', event_sink.stats, 'events_waiting', event_sink.waiting)
  end
  for h, counts in pairs(counter_sink) do
    for field, n in pairs(counts) do
      if n ~= 0 and redis.call('HINCRBY', h, field, n) < 0 then redis.call('HSET', h, field, 0) end
    end
  end
  event_sink, counter_sink = nil, nil
  if not ok then error(result, 0) end
  return result
end
--@TRANSITIONS
