#!lua
-- graph_create: store a submitted task graph and release its roots. Idempotent by graph id: the same
-- graph relayed again (or submitted again) changes nothing and answers with the roots still waiting to
-- be confirmed in their queues (so a caller that died before releasing them is repaired by the next).
-- KEYS[1] graph    HASH the graph: id, queue, state, options, counts per node state, version
-- KEYS[2] nodes    HASH node -> its definition (JSON: queue, kind, args, options, feed, parents)
-- KEYS[3] kids     HASH node -> its children, one "<child> <policy>" a line
-- KEYS[4] parents  HASH node -> its parents, one "<parent> <policy>" a line
-- KEYS[5] nstate   HASH node -> state (waiting, ready, completed, failed, canceled, skipped)
-- KEYS[6] pending  HASH node -> parents not finished yet
-- KEYS[7] times    HASH <node>|r released, <node>|f finished (ms)
-- KEYS[8] rel      SET nodes released, not confirmed in their queues yet
-- KEYS[9] gevents  STREAM graph transitions not shipped to Kafka yet
-- derived: none (a graph has no per-job keys)
-- ARGV: [1] now  [2] graph id  [3] home queue  [4] on_failure node ('' = none)  [5] deadline_at ('' = none)
--       [6] cancel_on_failure 0|1  [7] retention_ms  [8] node count N, then per node 5 values: name,
--       definition JSON, parents lines, children lines, parent count.
-- returns: {C_OK, state, n, released_1 … released_n} created (roots released) |
--          {C_FINAL, state, n, released …} the graph exists already (its unconfirmed releases) |
--          {C_STALE} the id is another home queue's graph (a graph id belongs to its queue).
-- uses: answer, graph_event, nset, release_node, released
if redis.call('EXISTS', GRAPH) == 1 then
  if redis.call('HGET', GRAPH, 'queue') ~= ARGV[3] then return {C_STALE} end
  for _, name in ipairs(redis.call('SMEMBERS', REL)) do released[#released + 1] = name end
  return answer(C_FINAL)
end
local on_failure, n = ARGV[4], tonumber(ARGV[8])
redis.call('HSET', GRAPH, 'id', ARGV[2], 'queue', ARGV[3], 'state', 'running', 'created_at', NOW,
  'on_failure', on_failure, 'deadline_at', ARGV[5], 'cancel_on_failure', ARGV[6], 'retention_ms', ARGV[7],
  'nodes', n, 'open', n - (on_failure ~= '' and 1 or 0), 'bad', 0, 'version', 0)
for i = 0, n - 1 do
  local b = 9 + i * 5
  local name, parents, kids, count = ARGV[b], ARGV[b + 2], ARGV[b + 3], tonumber(ARGV[b + 4])
  redis.call('HSET', NODES, name, ARGV[b + 1])
  if parents ~= '' then redis.call('HSET', PARENTS, name, parents) end
  if kids ~= '' then redis.call('HSET', KIDS, name, kids) end
  redis.call('HSET', PENDING, name, count)
  nset(name, 'waiting')
  if count == 0 and name ~= on_failure then release_node(name) end
end
graph_event('', 'running', n .. ' nodes')
return answer(C_OK)
