-- The order of FAIRRING as fair_round's min-heap keeps it: entries {pass, value}, by pass, then name.
-- uses: none
local function ring_less(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end
