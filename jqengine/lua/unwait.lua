#!lua flags=allow-oom
-- unwait: a worker pool registered for hand-offs stops waiting (it claims again, or shuts down): deregister it
-- and take what was handed to it meanwhile, so nothing sits in an inbox nobody reads (the caller runs
-- those jobs, or releases them). Jobs it never takes are not lost either: their leases expire.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] waiters  HASH pools waiting for a hand-off: id -> "slots|lease_ms|deadline|token prefix|worker"
-- derived: inbox:<waiter>
-- ARGV: [1] now  [2] waiter id
-- returns: {C_OK, hand-off message …} (each a JSON array: id, envelope, attempt, token, deadline, …)
-- uses: k
local waiter = ARGV[2]
redis.call('HDEL', WAITERS, waiter)
local inbox = k('inbox:' .. waiter)
local out = {C_OK}
for _, msg in ipairs(redis.call('LRANGE', inbox, 0, -1)) do out[#out + 1] = msg end
redis.call('DEL', inbox)
return out
