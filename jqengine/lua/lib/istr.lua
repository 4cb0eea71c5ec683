-- An integer as the decimal text Redis and JSON take (string.format '%d'), memoized for the call: a number
-- passed to redis.call is formatted by Redis with '%.17g' and one cjson encodes with '%.14g', each ~1-3k
-- instructions (glibc's printf of a double), and a call writes the same few values for all its jobs (now,
-- a lease's deadline, a retention's end, versions and attempts): each formatted once. An integer beyond
-- 2^53 (a priority may be any int64: a double here) is written whole ('%.0f'), not in '%.17g''s exponent
-- form, which Python's int() refuses.
-- uses: none
local istr_memo = {}
local function istr(n)
  local s = istr_memo[n]
  if s == nil then
    if n > -9007199254740992 and n < 9007199254740992 and n == math.floor(n) then
      s = string.format('%d', n)
    else
      s = string.format(n == math.floor(n) and '%.0f' or '%.17g', n)
    end
    istr_memo[n] = s
  end
  return s
end
