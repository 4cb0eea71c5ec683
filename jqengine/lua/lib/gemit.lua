-- A graph transition (or a node's the graph decided itself: skipped, canceled while waiting) as a
-- lifecycle event (jqcore.events), shipped by the scheduler instance that keeps the graph.
-- uses: none
local function gemit(id, queue, kind, from, to, v, message)
  local e = {id = id, queue = queue, kind = kind, from = from, to = to, v = v, at = NOW, attempt = 0,
             worker = '', error = '', digest = '', message = string.sub(message or '', 1, 200), run_at = 0,
             origin = '', accepted_at = 0}
  redis.call('XADD', GEVENTS, 'MAXLEN', '~', 100000, '*', 'i', id, 'e', cjson.encode(e))
end
