#!lua
-- graph_cancel: end a running graph now (an operator's cancel, or its deadline passing): every node not
-- finished ends canceled — on_failure included — and the graph ends in the given state. Nodes released
-- into a queue are returned for the caller to cancel there (their later reports change nothing).
-- KEYS[1] graph    HASH the graph: id, queue, state, options, counts
-- KEYS[2] nodes    HASH node -> definition (JSON)
-- KEYS[3] kids     HASH node -> "<child> <policy>" lines
-- KEYS[4] parents  HASH node -> "<parent> <policy>" lines
-- KEYS[5] nstate   HASH node -> state
-- KEYS[6] pending  HASH node -> parents not finished
-- KEYS[7] gen      HASH node -> run generation
-- KEYS[8] results  HASH node -> result
-- KEYS[9] errors   HASH node -> JSON error of a node that did not complete
-- KEYS[10] times    HASH <node>|r released, <node>|f finished
-- KEYS[11] rel      SET nodes released, not confirmed in their queues yet
-- KEYS[12] gevents  STREAM graph transitions not shipped yet
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
