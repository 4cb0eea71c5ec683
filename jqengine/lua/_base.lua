-- _base.lua: what every transition of the library sees, after the key locals and before lib/ and
-- _frame.lua (jqengine.scripts.function_library). Locals only; it runs nothing on its own.
--
-- The library (one Redis Functions library, loaded once): the key locals (P for the prefix, READY,
-- DELAYED, ...: the names of jqengine.keys.KEY_NAMES and GRAPH_KEY_NAMES), ARGV, this file, the functions
-- of lib/ (each once, each after those it uses), then _frame.lua, which registers each transition: its
-- callback binds the transition's declared KEYS to the key locals (the others are nil), ARGV and NOW, and
-- runs its body. A library function reads the key locals its callers' declarations bind (the contract
-- test checks that every script declares exactly the keys it touches, through the functions it uses); it
-- builds derived keys from P (same hash tag: each script touches one Cluster slot), named on each
-- script's "-- derived:" line (the families: jqengine/keys.py).
-- Job states: delayed, pending, waiting (behind an exclusivity value), parked (kind at its limit, or a
--   kill switch: the job's 'switch' field names it), running, deferred (its handler handed its completion
--   to a job it spawned: defer.lua, tail_done.lua), completed, canceled, errored, expired.

-- ARGV[1] of every call: now (ms since epoch, from the caller); set by each call's binding.
local NOW

-- Return codes, mirrored by jqengine.codes.Code (one meaning per number); each script's "-- returns:"
-- line names the ones it returns.
local C_OK = 1              -- done as asked
local C_STALE = 0           -- the attempt/token no longer owns the job
local C_MISSING = -1        -- no such job
local C_FINAL = -2          -- the job is already in a terminal state: nothing changed
local C_FENCE_STALE = -3    -- the writer's fence is older than the newest seen (a deposed relay)
local C_CANCELED = -4       -- the job ended canceled while it ran (a cancel was requested, or its handler canceled it)
local C_PAUSED = -5         -- the queue is paused: nothing claimed
local C_FILTER_UNKNOWN = -6 -- a claim filters on a meta key the queue does not index
local C_ERRORED = 2         -- the job ended errored (the dead-letter list) instead of running again
local C_FLAGGED = 3         -- a running job was flagged for cancellation (its worker stops it)
local C_TOMBSTONED = 4      -- an id not in Redis yet: a canceled record waits for it
local C_RETRY = 5           -- a failed attempt is retried later (its run_at follows)
local C_RUNNING = 6         -- the graph is still running (a retry needs a finished graph)
local C_UNANNOUNCED = -7     -- a write to a queue with no configuration the caller did not announce: nothing written

local DAY = 86400000
-- A scheduler steps every queue it keeps at least this often (ms; jqengine.timers.STEP_HORIZON_MS): a due
-- time further out needs no wake token, the next step reads it in time.
local STEP_HORIZON = 30000
