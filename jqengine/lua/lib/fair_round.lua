-- The ring dealt in Lua: one read of the lowest passes of up to m values (plus the next one's, a bound:
-- no value read may be served past it), a min-heap in FAIRRING's order (pass, then name), and the new
-- passes written back in one ZADD XX (a value that left the ring meanwhile stays out). serve(v) claims
-- v's best job: true (claimed: charge 1e6 / weight), false (its job moved on: ask again), nil (v has no
-- ready job, or is at its limit: it leaves the ring). Returns true when values are left unread (the
-- caller reads the ring again while it wants more jobs).
-- uses: fair_asleep, fair_full, heap_pop, heap_push, ring_less
local function fair_round(fc, m, serve, more)
  local ring = redis.call('ZRANGE', FAIRRING, 0, m, 'WITHSCORES')
  local heap, bound, passes, args = {}, nil, {}, {}
  for i = 1, #ring, 2 do
    local e = {tonumber(ring[i + 1]), ring[i]}
    if i > 2 * m then bound = e else heap_push(heap, e) end
  end
  while #heap > 0 and more() do
    local top = heap_pop(heap)
    if bound and ring_less(bound, top) then break end
    local got = serve(top[2])
    if got == nil then
      redis.call('ZREM', FAIRRING, top[2])
      passes[top[2]] = nil
    elseif got then
      top[1] = top[1] + math.floor(1000000 / (tonumber(fc.weights[top[2]]) or 1))
      passes[top[2]] = top[1]
      if not (fair_full(top[2], fc) or fair_asleep(top[2], fc)) then heap_push(heap, top) end
    else
      heap_push(heap, top)
    end
  end
  for v, pass in pairs(passes) do
    args[#args + 1] = string.format('%.17g', pass)
    args[#args + 1] = v
  end
  if #args > 0 then redis.call('ZADD', FAIRRING, 'XX', unpack(args)) end
  return bound ~= nil
end
