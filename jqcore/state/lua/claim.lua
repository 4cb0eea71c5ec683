#!lua flags=allow-oom
-- claim: hand up to N pending jobs to a worker, lowest priority value first, each with a lease and a
-- fresh token; every claim spends an attempt. O(log n) per job. Works at maxmemory (allow-oom).
-- Jobs met on the way whose expires_at passed become 'expired'; jobs whose kind is at its concurrency
-- limit are parked until a slot frees up; jobs a kill switch matches are parked until it lifts, or dead. With a filter, only jobs whose declared meta pairs all match.
-- A claim that stops at its scan budget with jobs still ready pushes a wake token: a worker whose claim
-- came back short may block on the wake list, and must not miss jobs it simply did not reach.
-- Stats: claimed (jobs), wait_ms (their summed start latency: now - max(enqueued_at, run_at)).
-- Hand-off registration: a claim naming a waiter id (unique per worker pool) with wait_ms > 0 that comes
-- back short (no filter) registers it in 'waiters' with its free slots until now + wait_ms; any other
-- claim naming it deregisters it. A registered pool blocks on its inbox and the wake list
-- (jqcore/state/waiting.py); enqueue_batch and promote_due claim jobs for it (hand_off in _lib.lua).
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs, score = priority
-- KEYS[3] running  ZSET claimed jobs, score = lease deadline
-- KEYS[4] done     ZSET terminal jobs, score = when GC removes them
-- KEYS[5] dead     ZSET errored jobs (the dead-letter list)
-- KEYS[6] config   HASH queue configuration
-- KEYS[7] kinds    HASH per-kind options (<kind>|limit, |attempts, |delivery)
-- KEYS[8] kindrun  HASH kind -> jobs of that kind running
-- KEYS[9] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[10] fairrun  HASH fair queues: value -> its jobs running
-- KEYS[11] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[12] counts   HASH blocked (waiting + parked jobs)
-- KEYS[13] stats    HASH lifetime counters
-- KEYS[14] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[15] wake     LIST wake tokens for waiting workers
-- KEYS[16] waiters  HASH idle worker pools waiting for a hand-off: waiter id -> "slots|lease_ms|deadline|…"
-- KEYS[17] sched    LIST wake token for the scheduler
-- KEYS[18] events   STREAM lifecycle events not shipped to Kafka yet (at most config events_cap)
-- KEYS[19] gdone    HASH graph nodes' jobs finished, not yet reported to their graph
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, switched:<name>, fair:<value>, fairtat:<value>
-- ARGV: [1] now  [2] N  [3] lease_ms (0 = job's, else queue default)  [4] token prefix (random)
--       [5] filter "k=v\n…" ('' = none; every key must be a declared filter key)  [6] worker identity
--       [7] wait_ms: register for hand-offs this long when the claim comes back short (0 = do not)
--       [8] waiter id ('' = none): the pool's name in 'waiters' and of its inbox (inbox:<waiter>)
-- returns: {C_OK, id, envelope, attempt, token, deadline, …}  or {C_PAUSED} when the queue is paused,
--          or {C_FILTER_UNKNOWN, key} when the filter names a key the queue does not index (not in filter_keys).
local n, lease_arg, token_prefix, filter = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5]
local worker, wait_ms, waiter = ARGV[6] or '', tonumber(ARGV[7] or '0'), ARGV[8] or ''
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
local function matches(key)
  local have = {}
  for _, p in ipairs(split_lines(redis.call('HGET', key, 'idx'))) do have[p] = true end
  for i = 2, #pairs_wanted do
    if not have[pairs_wanted[i]] then return false end
  end
  return true
end
if #pairs_wanted < 2 then matches = nil end

local out = {C_OK}
local claimed, freed = claim_from(src, n, lease_arg, token_prefix, worker, matches, out)
if claimed < n and #pairs_wanted == 0 and redis.call('ZCARD', READY) > 0 then freed = freed + 1 end
wake(freed)
if waiter ~= '' then
  if wait_ms > 0 and claimed < n and #pairs_wanted == 0 then
    redis.call('HSET', WAITERS, waiter,
      (n - claimed) .. '|' .. lease_arg .. '|' .. (NOW + wait_ms) .. '|' .. token_prefix .. ':h|' .. worker)
  else
    redis.call('HDEL', WAITERS, waiter)
  end
end
return out
