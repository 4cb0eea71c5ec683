-- End every node not finished yet (a graph cancel, its deadline, cancel_on_failure); nodes released into
-- a queue are returned in to_cancel for the caller to cancel there. `keep`: a node left alone.
-- uses: end_node, gfield, to_cancel
local function cancel_open(why, keep)
  local all = redis.call('HGETALL', NSTATE)
  for i = 1, #all, 2 do
    local name, state = all[i], all[i + 1]
    if name ~= keep and (state == 'waiting' or state == 'ready') then
      if state == 'ready' then
        to_cancel[#to_cancel + 1] = name
        redis.call('SREM', REL, name)
      end
      end_node(name, 'canceled', why)
      if name ~= gfield('on_failure') then
        redis.call('HINCRBY', GRAPH, 'open', -1)
        redis.call('HINCRBY', GRAPH, 'bad', 1)
      end
    end
  end
end
