#!lua flags=allow-oom
-- claim: hand up to N pending jobs to a worker, lowest priority value first, each with a lease and a
-- fresh token; every claim spends an attempt. O(log n) per job. Works at maxmemory (allow-oom).
-- Jobs met on the way whose expires_at passed become 'expired'; jobs whose kind is at its concurrency
-- limit are parked until a slot frees up. With a filter, only jobs whose declared meta pairs all match.
-- A claim that stops at its scan budget with jobs still ready pushes a wake token: a worker whose claim
-- came back short may block on the wake list, and must not miss jobs it simply did not reach.
-- Stats: claimed (jobs), wait_ms (their summed start latency: now - max(enqueued_at, run_at)).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs, score = priority
-- KEYS[3] running  ZSET claimed jobs, score = lease deadline
-- KEYS[4] done     ZSET terminal jobs, score = when GC removes them
-- KEYS[5] dead     ZSET errored jobs (the dead-letter list)
-- KEYS[6] config   HASH queue configuration
-- KEYS[7] kinds    HASH per-kind options (<kind>|limit, |attempts, |delivery)
-- KEYS[8] kindrun  HASH kind -> jobs of that kind running
-- KEYS[9] counts   HASH blocked (waiting + parked jobs)
-- KEYS[10] stats    HASH lifetime counters
-- KEYS[11] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[12] wake     LIST wake tokens for waiting workers
-- KEYS[13] sched    LIST wake token for the scheduler
-- KEYS[14] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- KEYS[15] gdone    HASH graph nodes' jobs finished, not yet reported to their graph
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>
-- ARGV: [1] now  [2] N  [3] lease_ms (0 = job's, else queue default)  [4] token prefix (random)
--       [5] filter "k=v\n…" ('' = none; every key must be a declared filter key)  [6] worker identity
-- returns: {C_OK, id, envelope, attempt, token, deadline, …}  or {C_PAUSED} when the queue is paused,
--          or {C_FILTER_UNKNOWN, key} when the filter names a key the queue does not index (not in filter_keys).
local n, lease_arg, token_prefix, filter = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local worker = ARGV[6] or ''
if cfg('paused', '0') == '1' then return {C_PAUSED} end
local pairs_wanted = split_lines(filter)
if #pairs_wanted > 0 then
  local indexed = {}
  for _, name in ipairs(split_lines(string.gsub(cfg('filter_keys', ''), ',', '\n'))) do indexed[name] = true end
  for _, pair in ipairs(pairs_wanted) do
    local name = string.sub(pair, 1, (string.find(pair, '=', 1, true) or 0) - 1)
    if not indexed[name] then return {C_FILTER_UNKNOWN, name} end
  end
end
local src = READY
if #pairs_wanted > 0 then src = k('idx:' .. pairs_wanted[1]) end
local default_lease = cfgnum('lease_ms', 30000)

local function matches(key)
  if #pairs_wanted < 2 then return true end
  local have = {}
  for _, p in ipairs(split_lines(redis.call('HGET', key, 'idx'))) do have[p] = true end
  for i = 2, #pairs_wanted do
    if not have[pairs_wanted[i]] then return false end
  end
  return true
end

local out = {C_OK}
local claimed, scanned, offset, freed, waited = 0, 0, 0, 0, 0
local before = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
local earliest = tonumber(before[2] or '-1')
local new_earliest = nil
while claimed < n and scanned < n * 4 + 32 do
  local ids = redis.call('ZRANGE', src, offset, offset + (n - claimed) - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    scanned = scanned + 1
    local key = jkey(id)
    local f = redis.call('HMGET', key, 'kind', 'expires_at', 'prio', 'lease_ms', 'attempt', 'enqueued_at', 'run_at')
    if f[1] == false then
      redis.call('ZREM', src, id)
      redis.call('ZREM', READY, id)
    elseif not matches(key) then
      offset = offset + 1
    else
      from_ready(id, key)
      local kind, expires = f[1], tonumber(f[2])
      local limit = tonumber(redis.call('HGET', KINDS, kind .. '|limit') or '')
      if expires and expires <= NOW then
        finish(id, key, 'expired', 'expires_at passed before it ran')
        freed = freed + release_excl(id, key)
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
          'started_at', NOW, 'worker', worker)
        set_state(id, key, 'running')
        redis.call('ZADD', RUNNING, deadline, id)
        redis.call('HINCRBY', KINDRUN, kind, 1)
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
    end
    if claimed >= n then break end
  end
end
if claimed > 0 then
  stat('claimed', claimed)
  if waited > 0 then stat('wait_ms', waited) end
end
if claimed < n and #pairs_wanted == 0 and redis.call('ZCARD', READY) > 0 then freed = freed + 1 end
wake(freed)
if new_earliest and (earliest < 0 or new_earliest < earliest) then wake_scheduler() end
return out
