#!lua flags=allow-oom
-- claim: hand up to N pending jobs to a worker, lowest priority value first, each with a lease and a
-- fresh token; every claim spends an attempt. O(log n) per job. Works at maxmemory (allow-oom).
-- Jobs met on the way whose expires_at passed become 'expired'; jobs whose kind is at its concurrency
-- limit are parked until a slot frees up; jobs a kill switch matches are parked until it lifts, or dead.
-- With a filter (any number of declared meta pairs), only jobs whose pairs all match. It reads the
-- smallest of the pairs' indexes (ZCARD each) and checks the others per chunk (ZMSCORE), in two passes
-- of at most n*4+32 jobs met: the head of the index (HEAD_READS + n*4+32 entries: the best matches, in
-- priority order), then, if the claim is still short, on from the filter's cursor (fcur:<filter>;
-- SWEEP_READS + n*4+32 entries), which each such claim moves on and which starts over after the head
-- window at the index's end: a match deep in the index is reached within ceil(index size / SWEEP_READS)
-- + 1 short claims, never starved. The jobs of one claim are in priority order.
-- A claim that stops at its scan budget with jobs still ready (a filtered one: its sweep unfinished)
-- pushes a wake token: a worker whose claim came back short may block on the wake list, and must not
-- miss jobs it simply did not reach.
-- Stats: claimed (jobs), wait_ms (their summed start latency: now - max(enqueued_at, run_at)).
-- Hand-off registration: a claim naming a waiter id (unique per worker pool) with wait_ms > 0 that comes
-- back short (no filter) registers it in 'waiters' with its free slots until now + wait_ms — unless its
-- inbox still holds jobs handed to it (they fill those slots); any other claim naming it deregisters it.
-- A registered pool blocks on its inbox and the wake list (jqengine/waiting.py); enqueue_batch and
-- promote_due claim jobs for it (lib/hand_off.lua), leaving the slots they did not fill registered.
-- KEYS[1] prefix   "jobq:{q}:", the prefix derived keys are built from (same slot; not a key)
-- KEYS[2] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[3] running  ZSET claimed jobs, score = lease deadline (ms)
-- KEYS[4] done     ZSET terminal jobs, score = when GC removes them (ms)
-- KEYS[5] dead     ZSET errored jobs (the dead-letter list), score = when they died (ms)
-- KEYS[6] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[7] kinds    HASH per-kind options: <kind>|limit, |attempts, |delivery, |prio, |noresult
-- KEYS[8] kindrun  HASH kind -> jobs of that kind running
-- KEYS[9] fairring ZSET fair queues: fair_key values with ready jobs, score = pass
-- KEYS[10] fairrun  HASH fair queues: a value with a fair_limits entry -> its jobs running
-- KEYS[11] fairtime ZSET fair queues: values out of the ring for their rate, score = next start
-- KEYS[12] counts   HASH blocked: jobs waiting behind an exclusivity value or parked (kind limit, switch)
-- KEYS[13] stats    HASH lifetime counters (enqueued, claimed, ...) and events_waiting (events in the stream)
-- KEYS[14] xhead    HASH exclusivity value -> the job allowed to run
-- KEYS[15] wake     LIST wake tokens for waiting workers (at most 64)
-- KEYS[16] waiters  HASH pools waiting for a hand-off: id -> "slots|lease_ms|deadline|token prefix|worker"
-- KEYS[17] sched    LIST wake token for the scheduler (an earlier due time appeared)
-- KEYS[18] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[19] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, fcur:<filter>, xq:<excl>, parked:<kind>, inbox:<waiter>, switched:<name>, fair:<value>, fairtat:<value>
-- ARGV: [1] now  [2] N  [3] lease_ms (0 = job's, else queue default)  [4] token prefix (random)
--       [5] filter "k=v\n…" ('' = none; every key must be a declared filter key; sorted, one cursor per filter)  [6] worker identity
--       [7] wait_ms: register for hand-offs this long when the claim comes back short (0 = do not)
--       [8] waiter id ('' = none): the pool's name in 'waiters' and of its inbox (inbox:<waiter>)
-- returns: {C_OK, id, envelope, attempt, token, deadline, …}  or {C_PAUSED} when the queue is paused,
--          or {C_FILTER_UNKNOWN, key} when the filter names a key the queue does not index (not in filter_keys).
-- uses: cfg, claim_from, k, split_lines, wake
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
-- A filtered claim's cursor (fcur:<filter>, the sha1 of ARGV[5]: "<score> <id>" of the last index entry
-- a claim read and left there) -> the rank in src to go on from. The place is (score, id), the order of
-- every index, so it survives inserts and removals and holds in whichever pair's index is read: an entry
-- gone from src is put back for a moment to find its rank (added and removed in this same call).
local function resume_rank(src, cursor)
  local at = redis.call('GET', cursor)
  if not at then return nil end
  local score, id = string.match(at, '^(%S+) (.*)$')
  if not id then return nil end
  local rank = redis.call('ZRANK', src, id)
  if rank then return rank + 1 end
  redis.call('ZADD', src, score, id)
  rank = redis.call('ZRANK', src, id)
  redis.call('ZREM', src, id)
  return rank
end

local HEAD_READS, SWEEP_READS = 128, 1024  -- index entries a filtered claim's passes read beyond n*4+32
local out = {C_OK}
local claimed, freed = 0, 0
if #pairs_wanted == 0 then
  claimed, freed = claim_from(READY, n, lease_arg, token_prefix, worker, nil, out)
else
  -- Read the smallest of the pairs' indexes; a job must be in each of the others too.
  local src, best, others = nil, nil, {}
  for _, pair in ipairs(pairs_wanted) do
    local key = k('idx:' .. pair)
    local size = redis.call('ZCARD', key)
    if best == nil or size < best then
      if src then others[#others + 1] = src end
      src, best = key, size
    else
      others[#others + 1] = key
    end
  end
  local head = {others = others, start = 0, reads = n * 4 + 32 + HEAD_READS}
  if best > 0 then claimed, freed = claim_from(src, n, lease_arg, token_prefix, worker, head, out) end
  if claimed < n and best > 0 and not head.done then
    -- The head window is read: go on from the filter's cursor (the sweep starts over after the window).
    local cursor = k('fcur:' .. redis.sha1hex(filter))
    local start = math.max(resume_rank(src, cursor) or 0, head.next)
    if start >= redis.call('ZCARD', src) then start = head.next end
    local more = {others = others, start = start, reads = n * 4 + 32 + SWEEP_READS}
    local c2, f2 = claim_from(src, n - claimed, lease_arg, token_prefix .. ':c', worker, more, out)
    claimed, freed = claimed + c2, freed + f2
    if more.done then
      redis.call('DEL', cursor)
    else
      if more.last then
        local score = redis.call('ZSCORE', src, more.last)
        redis.call('SET', cursor, score .. ' ' .. more.last, 'PX', DAY)
      end
      if claimed < n then freed = freed + 1 end  -- short with the sweep unfinished: a wake token
    end
  end
end
if claimed < n and #pairs_wanted == 0 and redis.call('ZCARD', READY) > 0 then freed = freed + 1 end
wake(freed)
if waiter ~= '' then
  -- jobs handed to this pool that it has not popped yet fill slots the claim counted free: no registration
  -- then (the pool pops them and claims again), or a later hand-off would bring more than fit
  if wait_ms > 0 and claimed < n and #pairs_wanted == 0 and redis.call('EXISTS', k('inbox:' .. waiter)) == 0 then
    redis.call('HSET', WAITERS, waiter,
      (n - claimed) .. '|' .. lease_arg .. '|' .. (NOW + wait_ms) .. '|' .. token_prefix .. ':h|' .. worker)
  else
    redis.call('HDEL', WAITERS, waiter)
  end
end
return out
