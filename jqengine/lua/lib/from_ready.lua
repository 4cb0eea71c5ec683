-- Take a job out of the ready set and its filter indexes. `f`: its fields idx and fair when the caller
-- read them (HMGET order), else read here. `batch`: a list the caller removes from READY itself, at once
-- for many jobs (claim_from), instead of a ZREM here.
-- uses: k, split_lines
local function from_ready(id, key, f, batch)
  if batch then batch[#batch + 1] = id else redis.call('ZREM', READY, id) end
  if f == nil then f = redis.call('HMGET', key, 'idx', 'fair') end
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZREM', k('idx:' .. name), id)
  end
  if f[2] then redis.call('ZREM', k('fair:' .. f[2]), id) end
end
