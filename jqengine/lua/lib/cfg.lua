-- A field of the queue's configuration (CONFIG), `default` when it has none. The configuration is read
-- whole at a call's first look (one HGETALL of a few fields instead of an HGET a field: a one-job claim
-- looked at six) and kept for the call: a transition that writes CONFIG does so before its first look.
-- uses: none
local config = nil
local function cfg(field, default)
  if config == nil then
    config = {}
    local flat = redis.call('HGETALL', CONFIG)
    for i = 1, #flat, 2 do config[flat[i]] = flat[i + 1] end
  end
  local v = config[field]
  if v == nil then return default end
  return v
end
