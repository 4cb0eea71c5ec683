-- Push n wake tokens (at most 64; the list is kept at 64) for the workers blocked on the wake list.
-- uses: none
local function wake(n)
  if n <= 0 then return end
  local args = {}
  for i = 1, math.min(n, 64) do args[i] = '1' end
  if redis.call('LPUSH', WAKE, unpack(args)) > 64 then redis.call('LTRIM', WAKE, 0, 63) end
end
