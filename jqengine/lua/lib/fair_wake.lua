-- Values whose rate lets them start a job again go back into the ring. Returns how many entered.
-- uses: fair_enter
local function fair_wake(fc)
  local due = redis.call('ZRANGEBYSCORE', FAIRTIME, '-inf', NOW)
  if #due == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', FAIRTIME, '-inf', NOW)
  local n = 0
  for _, v in ipairs(due) do
    if fc.key ~= '' and fair_enter(v, fc) then n = n + 1 end
  end
  return n
end
