-- Redis's own clock (ms), read at most once per call. NOW is the caller's reading of it, up to a round
-- trip behind (jqcore.clock.ServerClock); a claim stamps started_at with the later of the two, so the
-- record of a start is never before the moment Redis handed the job out (a delayed job promoted on time
-- is never recorded as claimed before its run_at).
-- uses: none
local server_ms = nil
local function server_now()
  if server_ms == nil then
    local t = redis.call('TIME')
    server_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return server_ms
end
