#!lua
-- graph_cancel: end a running graph now (an operator's cancel, or its deadline passing): every node not
-- finished ends canceled — on_failure included — and the graph ends in the given state. Nodes released
-- into a queue are returned for the caller to cancel there (their later reports change nothing).
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
-- ARGV: [1] now  [2] final state (canceled | failed)  [3] reason  [4] only when past deadline_at 0|1
-- returns: {C_OK, state, 0, to_cancel …} | {C_FINAL} the graph had ended | {C_RUNNING} not past its
--          deadline (ARGV[4] = 1) | {C_MISSING} no such graph.
-- uses: answer, cancel_open, end_graph, gfield
if redis.call('EXISTS', GRAPH) == 0 then return {C_MISSING} end
if gfield('state') ~= 'running' then return {C_FINAL} end
if ARGV[4] == '1' then
  local deadline = tonumber(gfield('deadline_at'))
  if deadline == nil or deadline > NOW then return {C_RUNNING} end
end
cancel_open(ARGV[3], nil)
end_graph(ARGV[2], ARGV[3])
return answer(C_OK)
