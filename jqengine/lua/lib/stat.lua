-- Add n (default 1) to a lifetime counter of the queue (STATS).
-- uses: none
local function stat(field, n)
  redis.call('HINCRBY', STATS, field, n or 1)
end
