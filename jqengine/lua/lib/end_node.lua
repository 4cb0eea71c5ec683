-- A node the graph ends itself (skipped, canceled): its error entry and its event (its job, if any,
-- records its own transitions in its queue).
-- uses: gemit, node_job, nset
local function end_node(name, to, why)
  local from = nset(name, to)
  redis.call('HSET', ERRORS, name, cjson.encode({state = to, error = why, attempt = 0, at = NOW}))
  redis.call('HSET', TIMES, name .. '|f', NOW)
  if from == 'waiting' then
    local spec = cjson.decode(redis.call('HGET', NODES, name))
    gemit(node_job(name), spec.queue, spec.kind, 'waiting', to, 1, why)
  end
end
