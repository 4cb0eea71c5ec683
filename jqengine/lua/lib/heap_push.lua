-- Add entry e to the min-heap h (ring_less order: fair_round's heap of the ring's values).
-- uses: ring_less
local function heap_push(h, e)
  h[#h + 1] = e
  local i = #h
  while i > 1 and ring_less(h[i], h[math.floor(i / 2)]) do
    local up = math.floor(i / 2)
    h[i], h[up] = h[up], h[i]
    i = up
  end
end
