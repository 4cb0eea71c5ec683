-- Take the least entry (ring_less order) off the min-heap h.
-- uses: ring_less
local function heap_pop(h)
  local top, last = h[1], table.remove(h)
  if #h == 0 then return top end
  h[1] = last
  local i = 1
  while true do
    local m, l, r = i, 2 * i, 2 * i + 1
    if l <= #h and ring_less(h[l], h[m]) then m = l end
    if r <= #h and ring_less(h[r], h[m]) then m = r end
    if m == i then return top end
    h[i], h[m] = h[m], h[i]
    i = m
  end
end
