-- A field of the graph's HASH (GRAPH), '' when it has none.
-- uses: none
local function gfield(name) return redis.call('HGET', GRAPH, name) or '' end
