-- Add n to counter `field` of HASH h: summed in the frame's counter_sink (_frame.lua), which writes each
-- counter once the call ended (also after an error): one HINCRBY a counter per call, not one per job.
-- For counters no reader in the same call needs to see move (stats; a kind's running jobs when the kind
-- has no limit); a counter the frame finds below 0 is set to 0.
-- uses: none
local function tally(h, field, n)
  local counts = counter_sink[h]
  if counts == nil then
    counts = {}
    counter_sink[h] = counts
  end
  counts[field] = (counts[field] or 0) + n
end
