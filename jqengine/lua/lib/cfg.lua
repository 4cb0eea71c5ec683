-- A field of the queue's configuration (CONFIG), `default` when it has none: one HGET a field at a call's
-- first look, kept for the call (false: none). A transition that writes CONFIG does so before its first
-- look.
-- uses: none
local config = {}
local function cfg(field, default)
  local v = config[field]
  if v == nil then
    v = redis.call('HGET', CONFIG, field)
    config[field] = v
  end
  if v == false then return default end
  return v
end
