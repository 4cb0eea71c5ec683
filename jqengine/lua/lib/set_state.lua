-- Change a job's state and record the transition: the one way a script sets 'state' (transit, for a caller
-- that read the record already). `fields`: what else to write in the same HSET (name, value, ...).
-- uses: transit
local function set_state(id, key, to, extra, fields)
  transit(id, key, redis.call('HMGET', key, 'kind', 'attempt', 'worker', 'state', 'version'), to, extra, fields)
end
