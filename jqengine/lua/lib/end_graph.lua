-- The graph ended: record it, and let its keys expire after its retention. A graph is running, then
-- completed, failed or canceled; a finished graph's keys expire after its retention_ms (a retry makes them
-- persistent again).
-- uses: gfield, graph_event
local function end_graph(to, why)
  local from = gfield('state')
  redis.call('HSET', GRAPH, 'state', to, 'finished_at', NOW)
  if why then redis.call('HSET', GRAPH, 'reason', why) end
  graph_event(from, to, why)
  local ttl = tonumber(gfield('retention_ms')) or 604800000
  for _, key in ipairs({GRAPH, NODES, KIDS, PARENTS, NSTATE, PENDING, GEN, RESULTS, ERRORS, TIMES, REL,
                        GEVENTS}) do
    redis.call('PEXPIRE', key, math.max(ttl, 1))
  end
end
