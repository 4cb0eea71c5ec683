-- The non-empty lines of s (nil or '' gives none).
-- uses: none
local function split_lines(s)
  local out = {}
  if s and s ~= '' then
    for part in string.gmatch(s, '[^\n]+') do out[#out + 1] = part end
  end
  return out
end
