-- The graph's own transition as a lifecycle event (gemit), the graph's version bumped.
-- uses: gemit, gfield
local function graph_event(from, to, message)
  local v = redis.call('HINCRBY', GRAPH, 'version', 1)
  gemit(gfield('id') .. '@graph', gfield('queue'), 'jobq.graph', from, to, v, message)
end
