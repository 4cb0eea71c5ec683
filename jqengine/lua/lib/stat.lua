-- Add n (default 1) to a lifetime counter of the queue (STATS), written once the call ended (tally).
-- uses: tally
local function stat(field, n)
  tally(STATS, field, n or 1)
end
