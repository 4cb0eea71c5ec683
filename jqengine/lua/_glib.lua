-- _glib.lua: helpers of the task-graph scripts (graph_*.lua), prepended after _lib.lua. Locals only.
--
-- A graph lives in its own slot, jobq:graph:{<graph id>}: (jqengine.keys.GraphKeys); its scripts get the
-- graph keys they touch in KEYS, in the order of jqengine.keys.GRAPH_KEY_NAMES, bound to the upper-case
-- locals GRAPH, NODES, KIDS, PARENTS, NSTATE, PENDING, GEN, RESULTS, ERRORS, TIMES, REL, GEVENTS.
-- Node states: waiting (parents not finished), ready (released into its queue), then completed, failed,
-- canceled or skipped. GRAPH keeps 'n:<state>' counts, 'open' (nodes other than on_failure not finished)
-- and 'bad' (such nodes that ended other than completed). A graph is running, then completed, failed or
-- canceled; a finished graph's keys expire after its retention_ms (a retry makes them persistent again).
local released, to_cancel = {}, {}

local function gfield(name) return redis.call('HGET', GRAPH, name) or '' end

local function node_job(name)
  local gen = tonumber(redis.call('HGET', GEN, name) or '0')
  local id = gfield('id') .. ':' .. name
  if gen > 0 then id = id .. '@' .. gen end
  return id
end

-- A graph transition (or a node's the graph decided itself: skipped, canceled while waiting) as a
-- lifecycle event (jqcore.events), shipped by the scheduler instance that keeps the graph.
local function gemit(id, queue, kind, from, to, v, message)
  local e = {id = id, queue = queue, kind = kind, from = from, to = to, v = v, at = NOW, attempt = 0,
             worker = '', error = '', digest = '', message = string.sub(message or '', 1, 200), run_at = 0,
             origin = '', accepted_at = 0}
  redis.call('XADD', GEVENTS, 'MAXLEN', '~', 100000, '*', 'i', id, 'e', cjson.encode(e))
end

local function graph_event(from, to, message)
  local v = redis.call('HINCRBY', GRAPH, 'version', 1)
  gemit(gfield('id') .. '@graph', gfield('queue'), 'jobq.graph', from, to, v, message)
end

local function nset(name, to)
  local from = redis.call('HGET', NSTATE, name) or ''
  redis.call('HSET', NSTATE, name, to)
  if from ~= '' then redis.call('HINCRBY', GRAPH, 'n:' .. from, -1) end
  redis.call('HINCRBY', GRAPH, 'n:' .. to, 1)
  return from
end

local function release(name)
  nset(name, 'ready')
  redis.call('SADD', REL, name)
  redis.call('HSET', TIMES, name .. '|r', NOW)
  released[#released + 1] = name
end

-- A node the graph ends itself (skipped, canceled): its error entry and its event (its job, if any,
-- records its own transitions in its queue).
local function end_node(name, to, why)
  local from = nset(name, to)
  redis.call('HSET', ERRORS, name, cjson.encode({state = to, error = why, attempt = 0, at = NOW}))
  redis.call('HSET', TIMES, name .. '|f', NOW)
  if from == 'waiting' then
    local spec = cjson.decode(redis.call('HGET', NODES, name))
    gemit(node_job(name), spec.queue, spec.kind, 'waiting', to, 1, why)
  end
end

-- Node `first` just ended: count it, then release or skip its children, transitively.
local function settle(first)
  local work = {first}
  local on_failure = gfield('on_failure')
  while #work > 0 do
    local x = table.remove(work)
    local state = redis.call('HGET', NSTATE, x)
    local ok = state == 'completed'
    if x ~= on_failure then
      redis.call('HINCRBY', GRAPH, 'open', -1)
      if not ok then redis.call('HINCRBY', GRAPH, 'bad', 1) end
    end
    for _, line in ipairs(split_lines(redis.call('HGET', KIDS, x))) do
      local sp = string.find(line, ' ', 1, true)
      local child, policy = string.sub(line, 1, sp - 1), string.sub(line, sp + 1)
      if redis.call('HGET', NSTATE, child) == 'waiting' then
        if not ok and policy == 'require' then
          end_node(child, 'skipped', 'parent ' .. x .. ' ' .. state)
          work[#work + 1] = child
        elseif redis.call('HINCRBY', PENDING, child, -1) <= 0 then
          release(child)
        end
      end
    end
  end
end

-- End every node not finished yet (a graph cancel, its deadline, cancel_on_failure); nodes released into
-- a queue are returned in to_cancel for the caller to cancel there. `keep`: a node left alone.
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

-- The graph ended: record it, and let its keys expire after its retention.
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

-- Every node but on_failure finished: run on_failure if a node did not complete, else end the graph.
local function maybe_end()
  if gfield('state') ~= 'running' or tonumber(gfield('open')) > 0 then return end
  local on_failure = gfield('on_failure')
  local bad = tonumber(gfield('bad')) or 0
  if on_failure ~= '' and bad > 0 then
    local st = redis.call('HGET', NSTATE, on_failure)
    if st == 'waiting' then
      release(on_failure)
      return
    end
    if st == 'ready' then return end
  end
  if bad > 0 then end_graph('failed', bad .. ' node(s) did not complete') else end_graph('completed') end
end

-- The reply of a script that may release or cancel nodes.
local function answer(code)
  local out = {code, gfield('state'), #released}
  for _, name in ipairs(released) do out[#out + 1] = name end
  for _, name in ipairs(to_cancel) do out[#out + 1] = name end
  return out
end
