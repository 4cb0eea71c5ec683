-- _lib.lua: helpers shared by every transition script (prepended to each script at load time, after its
-- shebang line and the KEYS binding; it defines locals only and runs nothing on its own).
--
-- KEYS (BullMQ's contract): a script receives every key it touches at a fixed name, in the one order of
-- jqengine.keys.KEY_NAMES, each script only the ones it touches. Its header lists them
--   -- KEYS[1] prefix   "jobq:{q}:" the prefix its derived keys are built from (same slot, not a key)
--   -- KEYS[2] ready    ZSET ...
-- and jqengine.scripts declares the same names, from which the loader binds them to upper-case
-- locals before this file: P (prefix), READY, DELAYED, RUNNING, DONE, DEAD, CONFIG, KINDS, KINDRUN,
-- FAIRRING, FAIRRUN, FAIRTIME, COUNTS, STATS, XHEAD, FENCES, WAKE, WAITERS, SCHED, EVENTS, GDONE. A helper below uses the locals its callers must
-- declare. Graph scripts (graph_*.lua) get this file too (for NOW and the codes), then _glib.lua.
-- Derived keys, built from P (same hash tag, so each script touches exactly one Cluster slot); each
-- script's header has a "-- derived:" line naming the families it builds, directly or through helpers:
--   job:<id> HASH, idx:<key>=<value> ZSET, xq:<excl> ZSET, parked:<kind> ZSET, inbox:<waiter> LIST,
--   fcur:<filter> STRING (a filtered claim's cursor, "<score> <id>"; <filter> = sha1 of its pairs; claim.lua),
--   switched:<name> ZSET (jobs a kill switch parked, score = priority),
--   fair:<value> ZSET (a fair queue's ready jobs of one fair_key value, score = priority)
--   fairtat:<value> STRING (a rated fair value's theoretical arrival time, ms; see fair_take)
-- ARGV[1] = now (ms since epoch, from the caller).
-- Return codes: the C_* constants below, mirrored by jqengine.codes.Code (one meaning per number);
-- each script's "-- returns:" line names the ones it returns.
-- Job states: delayed, pending, waiting (behind an exclusivity value), parked (kind at its limit, or a
--   kill switch: the job's 'switch' field names it), running, deferred (its handler handed its completion
--   to a job it spawned: defer.lua, tail_done.lua), completed, canceled, errored, expired.
local NOW = tonumber(ARGV[1])

-- Redis's own clock (ms), read at most once per call. NOW is the caller's reading of it, up to a round
-- trip behind (jqcore.clock.ServerClock); a claim stamps started_at with the later of the two, so the
-- record of a start is never before the moment Redis handed the job out (a delayed job promoted on time
-- is never recorded as claimed before its run_at).
local server_ms = nil
local function server_now()
  if server_ms == nil then
    local t = redis.call('TIME')
    server_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end
  return server_ms
end

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

local DAY = 86400000
local function k(name) return P .. name end
local function jkey(id) return P .. 'job:' .. id end

local function cfg(field, default)
  local v = redis.call('HGET', CONFIG, field)
  if v == false then return default end
  return v
end

local function cfgnum(field, default)
  return tonumber(cfg(field, default)) or default
end

local function stat(field, n)
  redis.call('HINCRBY', STATS, field, n or 1)
end

-- Lifecycle events (jqcore/events.py; the shipper moves them to Kafka). Every call bumps the job's
-- version, so each version is exactly one event: no transition without its event, none without its
-- transition. A call's events are kept in `event_sink` (the loader's frame, _frame.lua) and written
-- once it ends, as ONE stream entry: fields i <id> e <event JSON> for a single event, n <count>
-- e <JSON array> for more (jqengine.reads.decode_entry). An event is built with the fields that say
-- something: `worker`, `error`, `digest`, `message`, `run_at`, `origin` and `accepted_at` only when they
-- apply, `queue` not at all — the frame completes a single event, the reader of an array completes its
-- events (jqcore.events.DEFAULTS), so Kafka's records still carry every field. The queue's stream holds
-- at most config events_cap events (default 100000; 0 = events off), counted in stats events_waiting (set
-- by the frame, lowered by events_trim.lua once they are shipped): at the cap an event is counted in stats
-- events_dropped instead of stored, never dropped silently.
local queue_name, events_cap, events_len = nil, nil, nil
local function store_event(e)
  if events_cap == nil then events_cap = cfgnum('events_cap', 100000) end
  if events_cap <= 0 then return end
  if events_len == nil then
    -- a stream written before the count existed (one entry per event) is counted by its length
    events_len = tonumber(redis.call('HGET', STATS, 'events_waiting')) or redis.call('XLEN', EVENTS)
    event_sink.stream, event_sink.stats = EVENTS, STATS
  end
  if events_len >= events_cap then
    stat('events_dropped')
    return
  end
  if queue_name == nil then
    queue_name = string.match(P, '{(.*)}') or P
    event_sink.queue = queue_name
  end
  event_sink.events[#event_sink.events + 1] = e
  events_len = events_len + 1
  event_sink.waiting = events_len
end

-- `f`: the record's kind, attempt and worker when the caller read them (set_state), updated_at set too.
local function emit(id, key, from, to, extra, f)
  local v = redis.call('HINCRBY', key, 'version', 1)
  if f == nil then
    redis.call('HSET', key, 'updated_at', NOW)
    f = redis.call('HMGET', key, 'kind', 'attempt', 'worker')
  end
  local e = {id = id, kind = f[1] or '', from = from, to = to, v = v, at = NOW, attempt = tonumber(f[2]) or 0}
  if (from == 'running' or to == 'running') and f[3] and f[3] ~= '' then e.worker = f[3] end
  if extra then
    for name, value in pairs(extra) do e[name] = value end
  end
  store_event(e)
end

-- A far-future job was indexed: it has no record in Redis yet (hence no version: its event is v 0, the
-- record's own events start at 1 when it is moved in).
local function emit_far(id, run_at)
  store_event({id = id, kind = '', from = '', to = 'far', v = 0, at = NOW, attempt = 0, run_at = run_at})
end

-- Change a job's state and record the transition: the one way a script sets 'state'.
local function set_state(id, key, to, extra)
  local f = redis.call('HMGET', key, 'kind', 'attempt', 'worker', 'state')
  redis.call('HSET', key, 'state', to, 'updated_at', NOW)
  emit(id, key, f[4] or '', to, extra, f)
end

-- The event fields of a failed attempt: error class, digest and message from the worker's text (a
-- traceback ends with "Class: message"; "Retry: why" and plain text work too).
local function failure(text)
  local last = ''
  for line in string.gmatch(text or '', '[^\n]+') do
    if string.find(line, '%S') then last = line end
  end
  last = string.gsub(last, '^%s+', '')
  local cls, msg = string.match(last, '^([%a_][%w_%.]*):%s*(.*)$')
  if cls == nil then
    if string.match(last, '^[%a_][%w_%.]*$') then cls, msg = last, '' else cls, msg = '', last end
  end
  return {error = cls, digest = string.sub(redis.sha1hex(cls .. ': ' .. msg), 1, 12),
          message = string.sub(msg, 1, 200)}
end

local function wake(n)
  if n <= 0 then return end
  local args = {}
  for i = 1, math.min(n, 64) do args[i] = '1' end
  redis.call('LPUSH', WAKE, unpack(args))
  redis.call('LTRIM', WAKE, 0, 63)
end

local function wake_scheduler()
  redis.call('LPUSH', SCHED, '1')
  redis.call('LTRIM', SCHED, 0, 0)
end

local function split_lines(s)
  local out = {}
  if s and s ~= '' then
    for part in string.gmatch(s, '[^\n]+') do out[#out + 1] = part end
  end
  return out
end

-- Kill switches (jqengine.switches): the queue's config field 'switches' holds a JSON array of
-- {name, action = 'park' | 'dead', kind = '' (any) | kind, meta = {key = value, ...}}, written by the
-- switch admin calls. A claim meets each ready job through switched(): the first switch matching the job's
-- kind and every meta pair wins. Decoded at most once per script call; a job's envelope is decoded only
-- when a switch names meta pairs.
local switch_list = nil
local function switched(key, kind)
  if switch_list == nil then
    local raw = cfg('switches', '')
    switch_list = (raw ~= '') and cjson.decode(raw) or {}
  end
  if #switch_list == 0 then return nil end
  local meta = nil
  for _, s in ipairs(switch_list) do
    if s.kind == '' or s.kind == kind then
      local hit = true
      if next(s.meta) ~= nil then
        if meta == nil then
          local env = cjson.decode(redis.call('HGET', key, 'env'))
          meta = type(env.meta) == 'table' and env.meta or {}
        end
        for mk, mv in pairs(s.meta) do
          if meta[mk] ~= mv then hit = false break end
        end
      end
      if hit then return s end
    end
  end
  return nil
end

-- Fairness (queue option fair_key, a meta key such as 'tenant'): a claim deals jobs round-robin across
-- the key's values, weighted (stride scheduling), instead of in one priority order. Each value's ready
-- jobs are also in fair:<value> (score = priority); FAIRRING holds the values with ready jobs, score =
-- the value's pass: a claim serves the value with the lowest pass and adds 1e6 / weight to it. A value
-- that gets ready jobs again enters at the lowest pass in the ring (served within a round, no credit
-- saved up while idle). FAIRRUN counts the running jobs of each value that has a fair_limits entry
-- (from the claims after the limit was set); a value at its limit leaves the ring until one of its jobs
-- finishes. A value with a fair_rates entry (jobs/s) is also held to its rate (fair_take below). Jobs
-- without the key share the value ''. A job's value is
-- fixed when it is enqueued (field 'fair'; taken from its envelope when it has none). O(log n) a claim.
local fair_conf = nil
local function fairness()
  if fair_conf == nil then
    fair_conf = {key = cfg('fair_key', '')}
    if fair_conf.key ~= '' then
      local w, l, r = cfg('fair_weights', ''), cfg('fair_limits', ''), cfg('fair_rates', '')
      fair_conf.weights = (w ~= '') and cjson.decode(w) or {}
      fair_conf.limits = (l ~= '') and cjson.decode(l) or {}
      fair_conf.rates = (r ~= '') and cjson.decode(r) or {}
      fair_conf.rated = r ~= '' and r ~= '{}'
    end
  end
  return fair_conf
end

-- The fair value of a job that has none recorded (enqueued before the queue had fair_key).
local function fair_value(key, fc)
  local env = cjson.decode(redis.call('HGET', key, 'env'))
  local v = type(env.meta) == 'table' and env.meta[fc.key] or nil
  v = type(v) == 'string' and v or ''
  redis.call('HSET', key, 'fair', v)
  return v
end

local function fair_full(v, fc)
  local limit = fc.limits[v]
  return limit ~= nil and tonumber(redis.call('HGET', FAIRRUN, v) or '0') >= tonumber(limit)
end

-- Per-value rates (fair_rates: value -> jobs/s, a burst of one second's worth, at least 1): GCRA.
-- fairtat:<v> holds the value's theoretical arrival time (ms; it expires when the burst is whole again).
-- A claim that spends the burst puts the value to sleep: out of the ring, in FAIRTIME at the time its
-- next job may start, and the scheduler is woken when that time is the earliest (it steps the queue
-- then: promote_due's fair_wake). Claims wake due values too. A sleeping value's jobs are skipped in place.
local function fair_asleep(v, fc)
  if fc.rates[v] == nil then return false end
  local at = redis.call('ZSCORE', FAIRTIME, v)
  return at ~= false and tonumber(at) > NOW
end

local function fair_take(v, fc)
  local rate = tonumber(fc.rates[v])
  if rate == nil then return end
  local t = 1000 / rate
  local tau = (math.max(1, math.ceil(rate)) - 1) * t
  local key = k('fairtat:' .. v)
  local tat = math.max(tonumber(redis.call('GET', key) or '0'), NOW) + t
  redis.call('SET', key, string.format('%.17g', tat), 'PXAT', math.ceil(tat) + 1000)  -- 1 s: clocks' slack
  local at = tat - tau
  if at <= NOW then return end
  redis.call('ZREM', FAIRRING, v)
  local first = redis.call('ZRANGE', FAIRTIME, 0, 0, 'WITHSCORES')
  redis.call('ZADD', FAIRTIME, at, v)
  if #first == 0 or at < tonumber(first[2]) then wake_scheduler() end
end

-- Put value v in the ring (if it has ready jobs, is not there yet, not at its limit nor asleep).
-- Returns true when it entered.
local function fair_enter(v, fc)
  if redis.call('ZSCORE', FAIRRING, v) or fair_full(v, fc) or fair_asleep(v, fc) then return false end
  if redis.call('ZCARD', k('fair:' .. v)) == 0 then return false end
  local low = redis.call('ZRANGE', FAIRRING, 0, 0, 'WITHSCORES')
  redis.call('ZADD', FAIRRING, tonumber(low[2] or '0'), v)
  return true
end

-- Values whose rate lets them start a job again go back into the ring. Returns how many entered.
local function fair_wake(fc)
  local due = redis.call('ZRANGEBYSCORE', FAIRTIME, '-inf', NOW)
  if #due == 0 then return 0 end
  redis.call('ZREMRANGEBYSCORE', FAIRTIME, '-inf', NOW)
  local n = 0
  for _, v in ipairs(due) do
    if fc.key ~= '' and fair_enter(v, fc) then n = n + 1 end
  end
  return n
end

-- The ring dealt in Lua: one read of the lowest passes of up to m values (plus the next one's, a bound:
-- no value read may be served past it), a min-heap in FAIRRING's order (pass, then name), and the new
-- passes written back in one ZADD XX (a value that left the ring meanwhile stays out). serve(v) claims
-- v's best job: true (claimed: charge 1e6 / weight), false (its job moved on: ask again), nil (v has no
-- ready job, or is at its limit: it leaves the ring). Returns true when values are left unread (the
-- caller reads the ring again while it wants more jobs).
local function ring_less(a, b) return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2]) end
local function heap_push(h, e)
  h[#h + 1] = e
  local i = #h
  while i > 1 and ring_less(h[i], h[math.floor(i / 2)]) do
    local up = math.floor(i / 2)
    h[i], h[up] = h[up], h[i]
    i = up
  end
end
local function heap_pop(h)
  local top, last = h[1], table.remove(h)
  if #h == 0 then return top end
  h[1] = last
  local i = 1
  while true do
    local m, l, r = i, 2 * i, 2 * i + 1
    if l <= #h and ring_less(h[l], h[m]) then m = l end
    if r <= #h and ring_less(h[r], h[m]) then m = r end
    if m == i then return top end
    h[i], h[m] = h[m], h[i]
    i = m
  end
end
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

-- Make a job claimable: the ready set plus its filter indexes.
local function to_ready(id, key, prio, extra)
  redis.call('ZADD', READY, prio, id)
  local f = redis.call('HMGET', key, 'idx', 'fair')
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZADD', k('idx:' .. name), prio, id)
  end
  local fc = fairness()
  if fc.key ~= '' then
    local v = f[2] or fair_value(key, fc)
    redis.call('ZADD', k('fair:' .. v), prio, id)
    fair_enter(v, fc)
  end
  set_state(id, key, 'pending', extra)
end

-- Take a job out of the ready set and its filter indexes.
local function from_ready(id, key)
  redis.call('ZREM', READY, id)
  local f = redis.call('HMGET', key, 'idx', 'fair')
  for _, name in ipairs(split_lines(f[1])) do
    redis.call('ZREM', k('idx:' .. name), id)
  end
  if f[2] then redis.call('ZREM', k('fair:' .. f[2]), id) end
end

-- A due job enters the pending world: behind its exclusivity value's head, or ready. Returns 1 if ready.
local function admit(id, key, extra)
  local prio = tonumber(redis.call('HGET', key, 'prio'))
  local excl = redis.call('HGET', key, 'excl')
  if excl and excl ~= '' then
    local head = redis.call('HGET', XHEAD, excl)
    if head and head ~= id then
      redis.call('ZADD', k('xq:' .. excl), prio, id)
      set_state(id, key, 'waiting', extra)
      redis.call('HINCRBY', COUNTS, 'blocked', 1)
      return 0
    end
    redis.call('HSET', XHEAD, excl, id)
  end
  to_ready(id, key, prio, extra)
  return 1
end

-- The exclusivity head finished for good: let the next job of that value run. Returns jobs made ready.
local function release_excl(id, key)
  local excl = redis.call('HGET', key, 'excl')
  if not excl or excl == '' or redis.call('HGET', XHEAD, excl) ~= id then return 0 end
  local nxt = redis.call('ZPOPMIN', k('xq:' .. excl))
  if #nxt == 0 then
    redis.call('HDEL', XHEAD, excl)
    return 0
  end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
  redis.call('HSET', XHEAD, excl, nxt[1])
  to_ready(nxt[1], jkey(nxt[1]), tonumber(nxt[2]))
  return 1
end

-- A running job left the running set: free its kind slot, unpark one job of that kind. Returns jobs made ready.
local function release_slot(key)
  local kind, counted = unpack(redis.call('HMGET', key, 'kind', 'fairrun'))
  if redis.call('HINCRBY', KINDRUN, kind, -1) < 0 then redis.call('HSET', KINDRUN, kind, 0) end
  if counted then  -- a fair queue's limited value: a slot frees, the value may enter the ring again
    redis.call('HDEL', key, 'fairrun')
    if redis.call('HINCRBY', FAIRRUN, counted, -1) <= 0 then redis.call('HDEL', FAIRRUN, counted) end
    local fc = fairness()
    if fc.key ~= '' then fair_enter(counted, fc) end
  end
  local nxt = redis.call('ZPOPMIN', k('parked:' .. kind))
  if #nxt == 0 then return 0 end
  redis.call('HINCRBY', COUNTS, 'blocked', -1)
  to_ready(nxt[1], jkey(nxt[1]), tonumber(nxt[2]))
  return 1
end

-- Move a job to a terminal state and schedule its removal after the retention period. The event's
-- message is the reason unless `extra` says otherwise (a failure's error).
local function finish(id, key, state, reason, extra)
  if reason then
    redis.call('HSET', key, 'finished_at', NOW, 'reason', reason)
  else
    redis.call('HSET', key, 'finished_at', NOW)
  end
  redis.call('HDEL', key, 'token')
  local retention
  if state == 'errored' then
    redis.call('ZADD', DEAD, NOW, id)
    retention = cfgnum('dead_retention_ms', 7 * DAY)
  else
    retention = cfgnum('retention_ms', DAY)
  end
  redis.call('ZADD', DONE, NOW + retention, id)
  stat(state)
  -- A task graph's node: leave the outcome for its graph (another slot). The worker reports it right
  -- after; the scheduler repairs a report a crash interrupted (jqengine.graphs).
  -- A tail call's child (worker.defer_to) reports to the job that deferred to it the same way: field
  -- 'parent' is "<parent queue>\t<parent id>"; jqengine.tails hands the outcome on (tail_done).
  local link = redis.call('HMGET', key, 'graph', 'parent')
  if (link[1] and link[1] ~= '') or (link[2] and link[2] ~= '') then
    local f = redis.call('HMGET', key, 'attempt', 'result', 'last_error')
    local err = reason or ''
    if state == 'errored' and f[3] then err = f[3] end
    local entry = {state = state, attempt = tonumber(f[1]) or 0, result = f[2] or '', error = err, at = NOW}
    if link[1] and link[1] ~= '' then entry.graph = link[1] else entry.parent = link[2] end
    redis.call('HSET', GDONE, id, cjson.encode(entry))
  end
  extra = extra or {}
  if reason and extra.message == nil then extra.message = string.sub(reason, 1, 200) end
  set_state(id, key, state, extra)
end

-- A finished job is enqueued again (the dedup policy allows it): drop what belonged to its finished run.
-- The record keeps its version (it only grows) and attempt history; the caller stores the new job.
local function reopen(id, key)
  redis.call('ZREM', DONE, id)
  redis.call('ZREM', DEAD, id)
  redis.call('HDEL', key, 'result', 'reason', 'last_error', 'finished_at', 'started_at', 'cancel',
    'tombstone', 'token', 'lease_deadline', 'dups', 'dup_at', 'unhandled_since', 'tail', 'tail_policy',
    'tail_delay', 'parent')
end

-- Append one attempt's outcome to the job's bounded history (JSON array). A worker's own write (complete,
-- fail) also records its lease token and what followed ('completed', 'retry:<run_at>', 'errored',
-- 'canceled'), so the same write retried after a lost answer gets the same answer (see acked()).
local function record_attempt(key, outcome, err, token, after)
  local f = redis.call('HMGET', key, 'history', 'attempt')
  local raw = f[1]
  local hist = (raw and raw ~= '') and cjson.decode(raw) or {}
  hist[#hist + 1] = {attempt = tonumber(f[2]) or 0, at = NOW,
                     outcome = outcome, error = err, token = token, after = after}
  while #hist > 20 do table.remove(hist, 1) end
  redis.call('HSET', key, 'history', cjson.encode(hist))
end

-- The recorded outcome of a worker write made by this attempt and token ('completed', 'retry:<run_at>',
-- 'errored', 'canceled'), or nil when that pair never wrote one (a stale or foreign pair).
local function acked(key, attempt, token)
  local raw = redis.call('HGET', key, 'history')
  if not raw or raw == '' then return nil end
  local hist = cjson.decode(raw)
  for i = #hist, 1, -1 do
    local h = hist[i]
    if h.token == token and tostring(h.attempt) == attempt and h.after then return h.after end
  end
  return nil
end

-- Check a worker's write: the job runs under this attempt and token. Returns the job's state or an error code.
local function owned(key, attempt, token)
  local st = redis.call('HMGET', key, 'state', 'attempt', 'token')
  if st[1] == false then return 'missing' end
  if st[1] ~= 'running' or st[2] ~= attempt or st[3] ~= token then return 'stale' end
  return 'ok'
end

-- Claim up to n jobs from src (READY, or a filter index: see `scan`) for `worker`: lowest priority value
-- first, each with a lease (lease_arg, 0 = the job's own lease_ms, else the queue's) and the token
-- <token_prefix>:<i>; every claim spends an attempt. Jobs met on the way whose expires_at passed become
-- 'expired'; jobs whose kind is at its concurrency limit are parked. Appends id, envelope, attempt,
-- token, deadline per claimed job to `out`. Returns claimed, freed (jobs made ready on the way: a
-- released exclusivity value). Stats: claimed, wait_ms (summed start latency).
-- A visit budget bounds every call: n * 4 + 32 jobs met. `scan` (a filtered claim, claim.lua) is a table
-- {others = the other pairs' index keys a job must also be in, start = the rank in src to read from,
-- reads = index entries to read at most}; entries not in every other index are passed over without
-- opening the job (one ZMSCORE per other index per chunk of 64). On return scan.next is the rank of the
-- first entry not read, scan.last the last entry read that stayed in src (nil: none), scan.done true
-- when src was read to its end.
local function claim_from(src, n, lease_arg, token_prefix, worker, scan, out)
  local default_lease = cfgnum('lease_ms', 30000)
  local claimed, scanned, offset, freed, waited = 0, 0, 0, 0, 0
  local before = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
  local earliest = tonumber(before[2] or '-1')
  local new_earliest = nil
  local fc = fairness()
  local fair = fc.key ~= ''
  if fair and fc.rated then fair_wake(fc) end

  -- One job met on the way: claimed, or moved out of the ready set (gone, expired, switched, parked);
  -- true when it stays where it is (filtered out, or its fair value is at its limit).
  local function visit(id)
    local key = jkey(id)
    local f = redis.call('HMGET', key, 'kind', 'expires_at', 'prio', 'lease_ms', 'attempt', 'enqueued_at', 'run_at', 'fair')
    if f[1] == false then
      redis.call('ZREM', src, id)
      redis.call('ZREM', READY, id)
      return false
    end
    if fair and f[8] and (fair_full(f[8], fc) or fair_asleep(f[8], fc)) then
      redis.call('ZREM', FAIRRING, f[8])  -- it enters again when one of its jobs finishes / it wakes
      return true
    end
    from_ready(id, key)
    local kind, expires = f[1], tonumber(f[2])
    local limit = tonumber(redis.call('HGET', KINDS, kind .. '|limit') or '')
    local sw = switched(key, kind)
    if expires and expires <= NOW then
      finish(id, key, 'expired', 'expires_at passed before it ran')
      freed = freed + release_excl(id, key)
    elseif sw then
      if sw.action == 'park' then
        redis.call('ZADD', k('switched:' .. sw.name), tonumber(f[3]), id)
        redis.call('HSET', key, 'switch', sw.name)
        set_state(id, key, 'parked', {message = 'kill switch ' .. sw.name})
        redis.call('HINCRBY', COUNTS, 'blocked', 1)
      else
        finish(id, key, 'errored', 'kill switch ' .. sw.name)
        freed = freed + release_excl(id, key)
      end
    elseif limit and tonumber(redis.call('HGET', KINDRUN, kind) or '0') >= limit then
      redis.call('ZADD', k('parked:' .. kind), tonumber(f[3]), id)
      set_state(id, key, 'parked')
      redis.call('HINCRBY', COUNTS, 'blocked', 1)
    else
      local lease = lease_arg
      if lease == 0 then lease = tonumber(f[4]) or default_lease end
      local deadline = NOW + lease
      local attempt = tonumber(f[5]) + 1
      local token = token_prefix .. ':' .. claimed
      redis.call('HSET', key, 'attempt', attempt, 'token', token, 'lease_deadline', deadline,
        'started_at', math.max(NOW, server_now()), 'worker', worker)
      set_state(id, key, 'running')
      redis.call('ZADD', RUNNING, deadline, id)
      redis.call('HINCRBY', KINDRUN, kind, 1)
      if fair and f[8] then  -- the ring loop below charges the value's pass
        if fc.limits[f[8]] then  -- a limited value counts its running jobs (release_slot gives back)
          redis.call('HSET', key, 'fairrun', f[8])
          redis.call('HINCRBY', FAIRRUN, f[8], 1)
          if fair_full(f[8], fc) then redis.call('ZREM', FAIRRING, f[8]) end
        end
        if fc.rated then fair_take(f[8], fc) end
      end
      claimed = claimed + 1
      local since = math.max(tonumber(f[6]) or NOW, tonumber(f[7]) or 0)
      if since < NOW then waited = waited + (NOW - since) end
      if new_earliest == nil or deadline < new_earliest then new_earliest = deadline end
      out[#out + 1] = id
      out[#out + 1] = redis.call('HGET', key, 'env')
      out[#out + 1] = attempt
      out[#out + 1] = token
      out[#out + 1] = deadline
    end
    return false
  end

  if fair and src == READY then  -- round-robin over the ring: the best job of the lowest pass, each time
    while claimed < n and scanned < n * 4 + 32 and fair_round(fc, n - claimed, function(v)
      local ids = redis.call('ZRANGE', k('fair:' .. v), 0, 0)
      if #ids == 0 then return nil end
      scanned = scanned + 1
      local before = claimed
      if visit(ids[1]) then return nil end  -- v is at its limit: out of the ring until a job of it ends
      return claimed > before
    end, function() return claimed < n and scanned < n * 4 + 32 end) do end
  end
  -- Priority order: every claim of a plain queue, a filtered claim, and what a fair queue has outside its
  -- ring (jobs enqueued before it had fair_key; a value held at its limit is skipped in place).
  local budget, read = n * 4 + 32, 0
  if scan then offset = scan.start end
  while claimed < n and scanned < budget and (scan == nil or read < scan.reads) do
    local want = n - claimed
    if scan then want = math.min(64, scan.reads - read) end
    local ids = redis.call('ZRANGE', src, offset, offset + want - 1)
    if #ids == 0 then
      if scan then scan.done = true end
      break
    end
    local passed = {}  -- chunk positions of entries missing from another pair's index
    if scan then
      for _, other in ipairs(scan.others) do
        local got = redis.call('ZMSCORE', other, unpack(ids))
        for i = 1, #ids do
          if not got[i] then passed[i] = true end
        end
      end
    end
    for i, id in ipairs(ids) do
      read = read + 1
      local stays = true
      if not passed[i] then
        scanned = scanned + 1
        stays = visit(id)
      end
      if stays then
        offset = offset + 1
        if scan then scan.last = id end
      end
      if claimed >= n or scanned >= budget then break end
    end
  end
  if scan then scan.next = offset end
  if claimed > 0 then
    stat('claimed', claimed)
    if waited > 0 then stat('wait_ms', waited) end
  end
  if new_earliest and (earliest < 0 or new_earliest < earliest) then wake_scheduler() end
  return claimed, freed
end

-- Hand-off claims: a worker pool whose claim came back short registers in WAITERS (waiter id ->
-- "slots|lease_ms|deadline|token prefix|worker", see claim.lua) and blocks on its inbox list (derived
-- inbox:<waiter>) and the wake list. A transition that made jobs ready calls this first: each live waiter
-- is consumed and gets up to its slots jobs claimed for it here, leased like any claim, pushed to its
-- inbox as one JSON array (id, envelope, attempt, token, deadline, ...): its blocking pop returns the
-- jobs themselves. A pool that dies before running them loses nothing: the leases expire and the reaper
-- hands the jobs out again. Waiters past their deadline (a pool gone without deregistering) are
-- dropped. Returns the jobs handed and the jobs made ready on the way (the caller wakes workers for
-- those).
local function hand_off()
  if redis.call('HLEN', WAITERS) == 0 or cfg('paused', '0') == '1' then return 0, 0 end
  local all = redis.call('HGETALL', WAITERS)
  local handed, freed = 0, 0
  for i = 1, #all, 2 do
    if redis.call('ZCARD', READY) == 0 then break end
    local waiter = all[i]
    local slots, lease, deadline, prefix, worker = string.match(all[i + 1], '^(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
    redis.call('HDEL', WAITERS, waiter)
    if slots and tonumber(deadline) >= NOW then
      local out = {}
      local claimed, more = claim_from(READY, tonumber(slots), tonumber(lease), prefix, worker, nil, out)
      freed = freed + more
      if claimed > 0 then
        local inbox = k('inbox:' .. waiter)
        redis.call('RPUSH', inbox, cjson.encode(out))
        redis.call('PEXPIRE', inbox, tonumber(deadline) - NOW + 600000)
        handed = handed + claimed
      else
        redis.call('HSET', WAITERS, waiter, all[i + 1])  -- nothing it may run (kind limits): keep waiting
      end
    end
  end
  return handed, freed
end

-- A worker's write of a running attempt's outcome (complete.lua, fail.lua, and settle.lua for a batch):
-- checked against its attempt and token, idempotent (the same write sent again after a lost answer gets
-- the first answer again). Each returns what happened and the jobs it made ready (the caller wakes
-- workers for those, once per script call).
-- complete_job: 'ok' | 'stale' | 'missing'. Keeps an optional small result (none when the kind has
-- ignore_result), frees the kind slot and exclusivity value, leaves the record as the dedup marker.
local function complete_job(id, attempt, token, result)
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then return 'missing', 0 end
  if own == 'stale' then
    if acked(key, attempt, token) == 'completed' then return 'ok', 0 end
    return 'stale', 0
  end
  redis.call('ZREM', RUNNING, id)
  local freed = release_slot(key)
  if result ~= '' and redis.call('HGET', KINDS, redis.call('HGET', key, 'kind') .. '|noresult') ~= '1' then
    redis.call('HSET', key, 'result', result)
  end
  record_attempt(key, 'completed', nil, token, 'completed')
  finish(id, key, 'completed', nil)
  return 'ok', freed + release_excl(id, key)
end

-- fail_job: 'retry' (and its run_at) | 'errored' | 'canceled' | 'stale' | 'missing'. Retry after `delay`
-- ms (the job stays its exclusivity value's head), or errored (the dead-letter list) when attempts are
-- used up, the failure is permanent or the kind is at_most_once; a cancel requested meanwhile wins.
local function fail_job(id, attempt, token, err, delay, permanent)
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then return 'missing', 0, 0 end
  if own == 'stale' then
    local before = acked(key, attempt, token)
    if before == nil or before == 'completed' then return 'stale', 0, 0 end
    local sep = string.find(before, ':', 1, true)
    if sep then return 'retry', 0, tonumber(string.sub(before, sep + 1)) end
    if before == 'errored' then return 'errored', 0, 0 end
    return 'canceled', 0, 0
  end
  redis.call('ZREM', RUNNING, id)
  local freed = release_slot(key)
  redis.call('HSET', key, 'last_error', err)
  local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
  local delivery = redis.call('HGET', KINDS, f[3] .. '|delivery')
  if f[4] == '1' then
    record_attempt(key, 'failed', err, token, 'canceled')
    finish(id, key, 'canceled', 'canceled while running')
    return 'canceled', freed + release_excl(id, key), 0
  end
  if permanent or delivery == 'at_most_once' or tonumber(f[1]) >= tonumber(f[2]) then
    local why = permanent and 'permanent failure' or (delivery == 'at_most_once' and 'failed (at_most_once)'
      or 'attempts exhausted')
    record_attempt(key, 'failed', err, token, 'errored')
    finish(id, key, 'errored', why, failure(err))
    return 'errored', freed + release_excl(id, key), 0
  end
  local run_at = NOW + delay
  record_attempt(key, 'failed', err, token, 'retry:' .. run_at)
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'run_at', run_at)
  redis.call('HDEL', key, 'token')
  local e = failure(err)
  e.run_at = run_at
  set_state(id, key, 'delayed', e)
  stat('retried')
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler() end
  return 'retry', freed, run_at
end

-- The outcomes of `count` running jobs in ARGV from index b (7 values a job: id, attempt, token, 'c' |
-- 'f', result or error text, retry delay ms, permanent 0|1), each written by complete_job or fail_job;
-- appends per job its code (`codes`: the script's map of the helpers' words 'ok', 'retry', 'errored',
-- 'canceled', 'stale', 'missing' to its C_* codes) and the retry's run_at (0 unless a retry) to `out`.
-- Returns the jobs made ready (the caller wakes workers for those). settle.lua and settle_claim.lua.
local function settle_jobs(b, count, out, codes)
  local woken = 0
  for i = 0, count - 1 do
    local at = b + i * 7
    local id, attempt, token, text = ARGV[at], ARGV[at + 1], ARGV[at + 2], ARGV[at + 4]
    local state, freed, run_at = nil, 0, 0
    if ARGV[at + 3] == 'c' then
      state, freed = complete_job(id, attempt, token, text)
    else
      state, freed, run_at = fail_job(id, attempt, token, text, tonumber(ARGV[at + 5]), ARGV[at + 6] == '1')
    end
    out[#out + 1] = codes[state]
    out[#out + 1] = run_at
    woken = woken + freed
  end
  return woken
end
