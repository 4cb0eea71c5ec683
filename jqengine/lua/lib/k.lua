-- A derived key of this queue: the prefix (P, KEYS[1]) and `name` (the families: jqengine/keys.py).
-- uses: none
local function k(name) return P .. name end
