-- A job's record: HASH job:<id>.
-- uses: none
local function jkey(id) return P .. 'job:' .. id end
