-- A kind's concurrency limit (kinds <kind>|limit), false when it has none; read once per call. Jobs are
-- parked (parked:<kind>) only while their kind has a limit, and configure_kind unparks them all when the
-- limit goes: a kind without one has nothing parked.
-- uses: none
local limits = {}
local function kind_limit(kind)
  local limit = limits[kind]
  if limit == nil then
    limit = tonumber(redis.call('HGET', KINDS, kind .. '|limit') or '') or false
    limits[kind] = limit
  end
  return limit
end
