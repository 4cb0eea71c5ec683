#!lua
-- graph_report: a node's job finished in its queue (the outcome its queue's gdone hash kept); count it
-- once, keep its result or error, release the children whose parents all finished, skip (transitively)
-- those a failed parent dooms, run on_failure or end the graph when nothing is left. Idempotent: a
-- report for a node already finished, or from an older run of it (a job id of a previous generation),
-- changes nothing — fan-in counts each node once however often its outcome is delivered.
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
-- ARGV: [1] now  [2] node  [3] job id  [4] job state (completed, errored, canceled, expired)  [5] attempt
--       [6] result  [7] error text  [8] the queue the job finished in ('' = not checked): a job of
--       another queue (a producer's forged graph field) is no report of this node's
-- returns: {C_OK, graph state, n, released_1 … released_n, to_cancel …} counted (to_cancel: released
--          nodes cancel_on_failure ended, to cancel in their queues) | {C_FINAL} already counted |
--          {C_STALE} a previous run's job, or one of another queue | {C_MISSING} no such graph or node.
-- uses: answer, cancel_open, end_graph, end_node, gfield, node_job, nset, release_node, split_lines

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
          release_node(child)
        end
      end
    end
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
      release_node(on_failure)
      return
    end
    if st == 'ready' then return end
  end
  if bad > 0 then end_graph('failed', bad .. ' node(s) did not complete') else end_graph('completed') end
end

local name, job, outcome = ARGV[2], ARGV[3], ARGV[4]
local cur = redis.call('HGET', NSTATE, name)
if redis.call('EXISTS', GRAPH) == 0 or not cur then return {C_MISSING} end
if job ~= node_job(name) then return {C_STALE} end
if (ARGV[8] or '') ~= '' and cjson.decode(redis.call('HGET', NODES, name)).queue ~= ARGV[8] then return {C_STALE} end
if cur ~= 'ready' then return {C_FINAL} end
redis.call('SREM', REL, name)
local to = 'completed'
if outcome == 'canceled' then to = 'canceled' elseif outcome ~= 'completed' then to = 'failed' end
nset(name, to)
redis.call('HSET', TIMES, name .. '|f', NOW)
if to == 'completed' then
  redis.call('HSET', RESULTS, name, ARGV[6])
else
  redis.call('HSET', ERRORS, name, cjson.encode({state = to, error = string.sub(ARGV[7], 1, 4000),
    attempt = tonumber(ARGV[5]) or 0, at = NOW, outcome = outcome}))
end
settle(name)
if to ~= 'completed' and name ~= gfield('on_failure') and gfield('cancel_on_failure') == '1' then
  cancel_open('canceled: node ' .. name .. ' ' .. to, gfield('on_failure'))
end
maybe_end()
return answer(C_OK)
