-- Is fair value v asleep: held out of the ring by its rate (fair_rates) until its time in FAIRTIME
-- (see fair_take)?
-- uses: none
local function fair_asleep(v, fc)
  if fc.rates[v] == nil then return false end
  local at = redis.call('ZSCORE', FAIRTIME, v)
  return at ~= false and tonumber(at) > NOW
end
