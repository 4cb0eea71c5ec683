-- The fair value of a job that has none recorded (enqueued before the queue had fair_key).
-- uses: none
local function fair_value(key, fc)
  local env = cjson.decode(redis.call('HGET', key, 'env'))
  local v = type(env.meta) == 'table' and env.meta[fc.key] or nil
  v = type(v) == 'string' and v or ''
  redis.call('HSET', key, 'fair', v)
  return v
end
