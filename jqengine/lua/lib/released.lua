-- The nodes this call released into their queues, in order: answer() returns them.
-- uses: none
local released = {}
