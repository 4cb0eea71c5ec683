-- Node states: waiting (parents not finished), ready (released into its queue), then completed, failed,
-- canceled or skipped. Sets node `name`'s state and keeps GRAPH's 'n:<state>' counts; returns the state
-- it had ('' for a new node).
-- uses: none
local function nset(name, to)
  local from = redis.call('HGET', NSTATE, name) or ''
  redis.call('HSET', NSTATE, name, to)
  if from ~= '' then redis.call('HINCRBY', GRAPH, 'n:' .. from, -1) end
  redis.call('HINCRBY', GRAPH, 'n:' .. to, 1)
  return from
end
