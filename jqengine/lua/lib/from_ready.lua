-- Take a job out of the ready set and its filter indexes.
-- uses: k, split_lines
local function from_ready(id, key)
  redis.call('ZREM', READY, id)
  local f = redis.call('HMGET', key, 'idx', 'fair')
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZREM', k('idx:' .. name), id)
  end
  if f[2] then redis.call('ZREM', k('fair:' .. f[2]), id) end
end
