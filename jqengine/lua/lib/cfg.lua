-- A field of the queue's configuration (CONFIG), `default` when it has none.
-- uses: none
local function cfg(field, default)
  local v = redis.call('HGET', CONFIG, field)
  if v == false then return default end
  return v
end
