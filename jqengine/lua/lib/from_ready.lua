-- Take a job out of the ready set and its filter indexes. `idx`, `fair`: its fields idx and fair when the
-- caller read them (false: none), else (nil) read here. `batch`: a list the caller removes from READY
-- itself, at once for many jobs (claim_from), instead of a ZREM here.
-- uses: k, split_lines
local function from_ready(id, key, idx, fair, batch)
  if batch then batch[#batch + 1] = id else redis.call('ZREM', READY, id) end
  if idx == nil then idx, fair = unpack(redis.call('HMGET', key, 'idx', 'fair')) end
  if idx and idx ~= '' then
    for _, name in ipairs(split_lines(idx)) do
      redis.call('ZREM', k('idx:' .. name), id)
    end
  end
  if fair then redis.call('ZREM', k('fair:' .. fair), id) end
end
