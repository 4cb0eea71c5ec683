#!lua
-- graph_retry: run a failed or canceled graph again from what did not complete. Nodes that completed keep
-- their results; every other node (and on_failure) waits again under a new generation (a new job id, so
-- the finished job of its previous run is never taken for it), and those whose parents all completed are
-- released. The graph's keys stop expiring.
-- KEYS[1] graph    HASH the graph: id, queue, state, options, counts per node state, version
-- KEYS[2] nodes    HASH node -> its definition (JSON: queue, kind, args, options, feed, parents)
-- KEYS[3] kids     HASH node -> its children, one "<child> <policy>" a line
-- KEYS[4] parents  HASH node -> its parents, one "<parent> <policy>" a line
-- KEYS[5] nstate   HASH node -> state (waiting, ready, completed, failed, canceled, skipped)
-- KEYS[6] pending  HASH node -> parents not finished yet
-- KEYS[7] gen      HASH node -> run generation (a graph retry runs a node again as gen + 1)
-- KEYS[8] results  HASH node -> result (JSON bytes)
-- KEYS[9] errors   HASH node -> JSON {state, error, attempt, at, ...} of a node that did not complete
-- KEYS[10] times    HASH <node>|r released, <node>|f finished (ms)
-- KEYS[11] rel      SET nodes released, not confirmed in their queues yet
-- KEYS[12] gevents  STREAM graph transitions not shipped to Kafka yet
-- derived: none (a graph has no per-job keys)
-- ARGV: [1] now  [2] new deadline_at ('' = none)
-- returns: {C_OK, state, n, released …} | {C_FINAL} the graph completed: nothing to retry |
--          {C_RUNNING} still running | {C_MISSING} no such graph.
-- uses: answer, gfield, graph_event, nset, release_node, split_lines
if redis.call('EXISTS', GRAPH) == 0 then return {C_MISSING} end
local state = gfield('state')
if state == 'running' then return {C_RUNNING} end
if state == 'completed' then return {C_FINAL} end
for _, key in ipairs({GRAPH, NODES, KIDS, PARENTS, NSTATE, PENDING, GEN, RESULTS, ERRORS, TIMES, REL,
                      GEVENTS}) do
  redis.call('PERSIST', key)
end
local on_failure = gfield('on_failure')
local again, open = {}, 0
local all = redis.call('HGETALL', NSTATE)
for i = 1, #all, 2 do
  if all[i + 1] ~= 'completed' or all[i] == on_failure then
    again[#again + 1] = all[i]
    redis.call('HINCRBY', GEN, all[i], 1)
    redis.call('HDEL', ERRORS, all[i])
    redis.call('HDEL', RESULTS, all[i])
    redis.call('HDEL', TIMES, all[i] .. '|r', all[i] .. '|f')
    nset(all[i], 'waiting')
    if all[i] ~= on_failure then open = open + 1 end
  end
end
redis.call('HSET', GRAPH, 'state', 'running', 'open', open, 'bad', 0, 'deadline_at', ARGV[2])
redis.call('HDEL', GRAPH, 'finished_at', 'reason')
graph_event(state, 'running', 'retry: ' .. #again .. ' node(s) again')
for _, name in ipairs(again) do
  if name ~= on_failure then
    local left = 0
    for _, line in ipairs(split_lines(redis.call('HGET', PARENTS, name))) do
      local parent = string.sub(line, 1, string.find(line, ' ', 1, true) - 1)
      if redis.call('HGET', NSTATE, parent) ~= 'completed' then left = left + 1 end
    end
    redis.call('HSET', PENDING, name, left)
    if left == 0 then release_node(name) end
  end
end
return answer(C_OK)
