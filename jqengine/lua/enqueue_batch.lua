#!lua
-- enqueue_batch: store new jobs of one queue, idempotent by job id, refused for a stale fence.
-- Called by the relay (and tools). The envelope bytes are stored verbatim; Python passes the fields the
-- engine routes on. The queue is created with default configuration on first use (a job's, not a fence
-- raise's: a new term's raise never makes a queue Redis lost look configured).
-- Dedup (the queue's 'dedup' policy): an id that is delayed, pending, waiting, parked or running is
-- always a duplicate. A finished id (completed, errored, canceled, expired) is a duplicate when the
-- record carries the same origin (the same Kafka record read again: a relay re-read or a replay), when
-- the origin is unknown (''), or under policy 'finished' while the finish is younger than
-- dedup_window_ms. Otherwise (policy 'active', the default: Slack's "while queued or running") the
-- finished job is enqueued again: a new run under the same id ('reopened'). A dropped duplicate is
-- counted on the job record (dups, dup_at) so a reader can see what happened to it.
-- Jobs made ready go straight to idle workers registered for hand-offs (lib/hand_off.lua), the rest
-- wake waiting workers. A record's enqueued_at is the later of NOW and Redis's own clock, as a claim's
-- started_at is: the moment it was stored is never recorded before the moment Redis stored it (a
-- caller's NOW may be a round trip behind), so enqueued_at → started_at is a wait Redis dated both ends of.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] delayed  ZSET invisible jobs, score = run_at (ms)
-- KEYS[4] far      HASH far-future jobs kept in Kafka's schedule topic: id -> run_at (ms)
-- KEYS[5] running  ZSET claimed jobs, score = lease deadline (ms)
-- KEYS[6] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[7] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[8] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[9] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[10] kindrun  HASH kind -> jobs of that kind running
-- KEYS[11] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[12] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[13] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[14] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[15] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[16] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[17] fences   HASH fence source -> newest fence seen
-- KEYS[18] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[19] waiters  HASH pools waiting for a hand-off: id -> "slots|lease_ms|deadline|token prefix|worker"
-- KEYS[20] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[21] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[22] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, inbox:<waiter>, switched:<name>, fair:<value>, fairtat:<value>
-- ARGV: [1] now  [2] fence source ('' = unfenced tool write)  [3] fence  [4] job count N
--       [5] the N jobs packed as one MessagePack array of rows (absent when N = 0: a fence raise), each row
--       14 values: id, envelope, priority, run_at|'' , expires_at|'', excl|'', kind, max_attempts|'',
--       lease_ms|'', meta as "k=v\n…", origin ("topic/partition/offset" of the Kafka record, '' unknown),
--       accepted_at (the envelope's enqueued_at: when the gateway or producer accepted it), graph
--       ("<graph id>\t<node>" for a task graph's node, else ''; finish() reports such a job to its graph),
--       parent ("<queue>\t<id>" of the job that deferred to this one, else ''; finish() reports to it).
--       (One string for the batch instead of 14 arguments a job: Redis builds two objects, not 28,000,
--       for a 2,000-job batch; cmsgpack is built into Redis's Lua.) A kind's options are read once per
--       call and the stats counted once per call.
--       [6] the kill switches that apply to the queue (its config 'switches' list, '' none), when the caller
--       announced the queue (jqengine.core.Core.announce: listed it, then read the switches): set only when
--       this call creates the queue, before any of its jobs is made ready or handed off. Absent: the caller
--       did not announce it (it did before and saw the queue exist) — a queue without a configuration (Redis
--       lost it, or it was deleted) is then not created: nothing is written and the call answers
--       C_UNANNOUNCED, for the caller to announce the queue and call again.
-- A job whose priority is its enqueued_at (the default: none given) takes its kind's default priority
-- when the kind has one (kinds <kind>|prio).
-- A job without run_at ('') in a queue with config default_delay_ms > 0 gets run_at = accepted_at +
-- default_delay_ms (NOW when accepted_at is unknown): Timestone's default invisibility, never early; an
-- explicit run_at (a producer's delay_ms, 0 included, is one) wins.
-- returns: {C_OK, created(0|1), outcome_1 … outcome_N} with outcome one of
--          'stored' | 'delayed' | 'duplicate' | 'canceled' (a tombstone was waiting) | 'expired' |
--          'refused:<reason>'   ('stored'/'delayed' also for a reopened finished job)
--       or {C_FENCE_STALE, newest_fence} when the fence is older than the newest seen for this source,
--       or {C_UNANNOUNCED} (ARGV[6] absent and the queue has no configuration: nothing written).
-- A record holds the fields its job has: excl, idx, lease_ms, run_at and expires_at are left out when
-- empty (every reader takes a missing field as none), as graph, parent and fair are; accepted_at is the
-- enqueue event's (and the envelope's enqueued_at), not the record's: nothing reads it there.
-- What a job costs Redis here (the relay's hop, docs/benchmarks.md): its HMGET (is the id known), one HSET
-- of its record, its event; a plain job (no filter index, no fairness, no exclusivity, due now) enters the
-- ready set in one ZADD with the batch's others. Once per call: the fence, the configuration (one HMGET),
-- the kind's options, the counters, the wake-ups.
-- uses: admit, cfg, fairness, finish, hand_off, istr, jkey, server_now, split_lines, stat, to_ready,
--       transit, wake, wake_scheduler
local source, fence, n = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if source ~= '' then
  local newest = tonumber(redis.call('HGET', FENCES, source) or '0')
  if fence < newest then return {C_FENCE_STALE, newest} end
  if fence > newest then redis.call('HSET', FENCES, source, fence) end
end
local created = 0
if n > 0 and ARGV[6] == nil then
  -- not announced: the caller saw this queue listed and configured; if that is no longer so, it announces
  if cfg('created_at') == nil then return {C_UNANNOUNCED} end
elseif n > 0 and redis.call('HSETNX', CONFIG, 'created_at', NOW) == 1 then
  created = 1
  -- the kill switches in force (the engine read them before the call) hold this first batch already: a
  -- switch set before the queue existed (or before Redis lost it) reached no queue list, and the engine
  -- registers the queue only after this call (a list a switch change wrote meanwhile is kept)
  if ARGV[6] ~= '' then redis.call('HSETNX', CONFIG, 'switches', ARGV[6]) end
end
-- the configuration this call reads, in one HMGET (after the writes above; an HGET a field cost a one-job
-- call ~7 k instructions each: lib/cfg.lua's reads are for the few fields a transition looks at)
local conf = redis.call('HMGET', CONFIG, 'mode', 'excl_key', 'filter_keys', 'max_attempts', 'dedup',
  'dedup_window_ms', 'default_delay_ms')
local exclusive = conf[1] == 'exclusive'
local excl_key = conf[2] or ''
local filter_keys = {}
for _, name in ipairs(split_lines(string.gsub(conf[3] or '', ',', '\n'))) do filter_keys[name] = true end
local default_attempts = tonumber(conf[4]) or 10
local fair_key = fairness().key
local dedup_finished = conf[5] == 'finished'
local dedup_window = tonumber(conf[6]) or DAY
local default_delay = tonumber(conf[7]) or 0
local TERMINAL = {completed = true, errored = true, canceled = true, expired = true}

-- May this existing record be enqueued again as a new run? (see the header)
local function reopens(key, state, origin)
  if not TERMINAL[state] or origin == '' then return false end
  local f = redis.call('HMGET', key, 'origin', 'finished_at')
  if f[1] == origin then return false end
  if dedup_finished and NOW - (tonumber(f[2]) or 0) < dedup_window then return false end
  return true
end

-- A finished job is enqueued again (the dedup policy allows it): drop what belonged to its finished run.
-- The record keeps its version (it only grows) and attempt history; the caller stores the new job.
local function reopen(id, key)
  redis.call('ZREM', DONE, id)
  redis.call('ZREM', DEAD, id)
  redis.call('HDEL', key, 'result', 'reason', 'last_error', 'finished_at', 'started_at', 'cancel',
    'tombstone', 'token', 'lease_deadline', 'dups', 'dup_at', 'unhandled_since', 'tail', 'tail_policy',
    'tail_delay', 'parent', 'excl', 'idx', 'lease_ms', 'run_at', 'expires_at')
end

local out = {C_OK, created}
local has_far = redis.call('EXISTS', FAR) == 1
local ready, earliest_delayed = 0, nil
local prev_earliest = nil  -- the earliest delayed job before this call's: read at the first delayed job
-- A kind's options (default attempts, default priority), read once per call.
local kind_opts = {}
local function kind_options(kind)
  local o = kind_opts[kind]
  if o == nil then
    local f = redis.call('HMGET', KINDS, kind .. '|attempts', kind .. '|prio')
    o = {attempts = f[1] or tostring(default_attempts), prio = tonumber(f[2] or '')}
    kind_opts[kind] = o
  end
  return o
end
-- Stats (stat: summed, written once the call ends). Touched first: a damaged stats hash (WRONGTYPE) fails
-- the call before any job is written, so nothing of the batch is stored behind an error.
if n > 0 then redis.call('HINCRBY', STATS, 'enqueued', 0) end

-- Plain jobs' ready-set entries (score, id, ...): one ZADD for the batch, written before the hand-offs
-- read the set, and also when the loop ends in an error (no record left pending outside the ready set).
local plain = {}
local function add_plain()
  for j = 1, #plain, 1000 do redis.call('ZADD', READY, unpack(plain, j, math.min(j + 999, #plain))) end
  plain = {}
end

local rows = n > 0 and cmsgpack.unpack(ARGV[5]) or {}
local function store(i)
  local row = rows[i]
  local id, env, prio = row[1], row[2], tonumber(row[3])
  local run_at, expires_at, excl = tonumber(row[4]), tonumber(row[5]), row[6]
  local kind, attempts, lease, origin = row[7], row[8], row[9], row[11]
  local stamps = {origin = origin, accepted_at = tonumber(row[12]) or 0}
  if run_at == nil and default_delay > 0 then
    run_at = (stamps.accepted_at > 0 and stamps.accepted_at or NOW) + default_delay
  end
  local idx, meta = {}, {}
  if row[10] ~= '' then
    for _, pair in ipairs(split_lines(row[10])) do
      local eq = string.find(pair, '=', 1, true)
      local mk = string.sub(pair, 1, eq - 1)
      meta[mk] = string.sub(pair, eq + 1)
      if filter_keys[mk] then idx[#idx + 1] = pair end
    end
  end
  if exclusive and excl == '' and excl_key ~= '' and meta[excl_key] then excl = meta[excl_key] end
  local key = jkey(id)
  if has_far then redis.call('HDEL', FAR, id) end
  local existing = redis.call('HMGET', key, 'state', 'tombstone', 'version')
  local prior, version = existing[1], existing[3]  -- a reopened job's: its event's 'from', its version
  if existing[1] ~= false and existing[2] ~= '1' and reopens(key, existing[1], origin) then
    reopen(id, key)
    stat('reopened')
    existing = {false}
  end
  if existing[1] ~= false then
    if existing[2] == '1' then
      redis.call('HSET', key, 'env', env, 'kind', kind, 'tombstone', '2', 'origin', origin)
      out[#out + 1] = 'canceled'
    else
      redis.call('HINCRBY', key, 'dups', 1)
      redis.call('HSET', key, 'dup_at', NOW)
      out[#out + 1] = 'duplicate'
    end
    stat('duplicates')
  elseif exclusive and excl == '' then
    out[#out + 1] = 'refused:exclusive queue needs an exclusivity value (excl or meta.' .. excl_key .. ')'
    stat('refused')
  else
    local opts = kind_options(kind)
    if attempts == '' then attempts = opts.attempts end
    if prio == stamps.accepted_at and opts.prio then prio = opts.prio end
    local stored_excl = exclusive and excl or ''
    local index = table.concat(idx, '\n')
    local fields = {'env', env, 'prio', istr(prio), 'kind', kind, 'attempt', '0',
      'max_attempts', type(attempts) == 'number' and istr(attempts) or attempts,
      'enqueued_at', istr(math.max(NOW, server_now())), 'origin', origin}
    local function field(name, value)
      if value ~= '' and value ~= nil then
        fields[#fields + 1] = name
        fields[#fields + 1] = type(value) == 'number' and istr(value) or value
      end
    end
    field('excl', stored_excl)
    field('idx', index)
    field('lease_ms', lease)
    field('run_at', run_at)
    field('expires_at', expires_at)
    field('graph', row[13])
    field('parent', row[14])
    local fair = false
    if fair_key ~= '' then
      fair = meta[fair_key] or ''
      fields[#fields + 1] = 'fair'
      fields[#fields + 1] = fair
    end
    -- what a first transition of the new record reads of it, known here: written with its state, one HSET
    local r = {kind, 0, false, prior, version}
    stat('enqueued')
    if expires_at and expires_at <= NOW then
      redis.call('HSET', key, unpack(fields))
      finish(id, key, 'expired', 'expired before it was enqueued', stamps)
      out[#out + 1] = 'expired'
    elseif run_at and run_at > NOW then
      if prev_earliest == nil then
        prev_earliest = tonumber(redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')[2] or '-1')
      end
      redis.call('ZADD', DELAYED, run_at, id)
      stamps.run_at = run_at
      transit(id, key, r, 'delayed', stamps, fields)
      if earliest_delayed == nil or run_at < earliest_delayed then earliest_delayed = run_at end
      out[#out + 1] = 'delayed'
    elseif stored_excl == '' and index == '' and not fair then -- to_ready(), its ZADD with the batch's
      plain[#plain + 1] = istr(prio)
      plain[#plain + 1] = id
      transit(id, key, r, 'pending', stamps, fields)
      ready = ready + 1
      out[#out + 1] = 'stored'
    elseif stored_excl == '' then -- admit() without reading back what was just written
      to_ready(id, key, prio, stamps, {index, fair}, r, fields)
      ready = ready + 1
      out[#out + 1] = 'stored'
    else
      redis.call('HSET', key, unpack(fields))
      ready = ready + admit(id, key, stamps)
      out[#out + 1] = 'stored'
    end
  end
end
local stored_all, why = pcall(function()
  for i = 1, n do store(i) end
end)
add_plain()
if not stored_all then error(why, 0) end
local handed, freed = hand_off()
wake(ready - handed + freed)
if earliest_delayed and (prev_earliest < 0 or earliest_delayed < prev_earliest) then
  wake_scheduler(earliest_delayed)
end
return out
