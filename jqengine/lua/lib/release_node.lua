-- Release node `name` into its queue: ready, in REL until its queue confirms the job (the caller
-- enqueues it), stamped <name>|r in TIMES, and returned by answer().
-- uses: nset, released
local function release_node(name)
  nset(name, 'ready')
  redis.call('SADD', REL, name)
  redis.call('HSET', TIMES, name .. '|r', NOW)
  released[#released + 1] = name
end
