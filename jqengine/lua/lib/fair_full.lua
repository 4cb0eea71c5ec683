-- Is fair value v at its limit (fair_limits): as many of its jobs running (FAIRRUN) as the limit?
-- uses: none
local function fair_full(v, fc)
  local limit = fc.limits[v]
  return limit ~= nil and tonumber(redis.call('HGET', FAIRRUN, v) or '0') >= tonumber(limit)
end
