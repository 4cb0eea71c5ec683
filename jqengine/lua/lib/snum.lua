-- tonumber of a record's small numeric field (attempt, version: the same few values for all the jobs of a
-- call), memoized for the call (tonumber is strtod, ~2k instructions); nil for '', false or no number.
-- uses: none
local snum_memo = {}
local function snum(s)
  if not s then return nil end
  local n = snum_memo[s]
  if n == nil then
    n = tonumber(s) or false
    snum_memo[s] = n
  end
  return n or nil
end
