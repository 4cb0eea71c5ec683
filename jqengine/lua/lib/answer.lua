-- The reply of a script that may release or cancel nodes.
-- uses: gfield, released, to_cancel
local function answer(code)
  local out = {code, gfield('state'), #released}
  for _, name in ipairs(released) do out[#out + 1] = name end
  for _, name in ipairs(to_cancel) do out[#out + 1] = name end
  return out
end
