-- The nodes this call ended that had been released into a queue: answer() returns them, for the
-- caller to cancel there.
-- uses: none
local to_cancel = {}
