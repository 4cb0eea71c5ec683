-- An integer as the decimal text Redis and JSON take (string.format '%d'), memoized for the call: a number
-- passed to redis.call is formatted by Redis with '%.17g' and one cjson encodes with '%.14g', each ~1-3k
-- instructions (glibc's printf of a double), and a call writes the same few values for all its jobs (now,
-- a lease's deadline, a retention's end, versions and attempts): each formatted once.
-- uses: none
local istr_memo = {}
local function istr(n)
  local s = istr_memo[n]
  if s == nil then
    s = string.format('%d', n)
    istr_memo[n] = s
  end
  return s
end
