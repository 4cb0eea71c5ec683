#!lua flags=allow-oom
-- reap_expired: running jobs whose lease deadline passed (a crashed or stuck worker). at_least_once:
-- pending again (the attempt stays spent; out of attempts => errored). at_most_once: errored, never
-- handed out twice. Safe with any number of reapers at once.
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
-- KEYS[16] events   STREAM lifecycle events not shipped to Kafka yet, an entry per call (config events_cap)
-- KEYS[17] gdone    HASH cross-slot outbox: the outcomes of graph nodes' and tail children's jobs (job id ->
--                        JSON), tail children to enqueue ('>' child id -> JSON)
-- derived: job:<id>, idx:<key>=<value>, xq:<excl>, parked:<kind>, fair:<value>
-- ARGV: [1] now  [2] limit
-- returns: {reaped, next_deadline or -1}
-- uses: finish, jkey, record_attempt, release_excl, release_slot, stat, to_ready, wake
local expired = redis.call('ZRANGEBYSCORE', RUNNING, '-inf', '(' .. NOW, 'LIMIT', 0, tonumber(ARGV[2]))
local freed = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', RUNNING, id)
  local key = jkey(id)
  if redis.call('EXISTS', key) == 1 then
    freed = freed + release_slot(key)
    record_attempt(key, 'lease_expired', 'lease expired')
    local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
    local delivery = redis.call('HGET', KINDS, f[3] .. '|delivery')
    if f[4] == '1' then
      finish(id, key, 'canceled', 'canceled while running')
      freed = freed + release_excl(id, key)
    elseif delivery == 'at_most_once' then
      finish(id, key, 'errored', 'lease expired (at_most_once)')
      freed = freed + release_excl(id, key)
    elseif tonumber(f[1]) >= tonumber(f[2]) then
      finish(id, key, 'errored', 'lease expired, attempts exhausted')
      freed = freed + release_excl(id, key)
    else
      redis.call('HDEL', key, 'token')
      to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')), {message = 'lease expired'})
      freed = freed + 1
    end
    stat('reaped')
  end
end
wake(freed)
local nxt = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
return {#expired, tonumber(nxt[2] or '-1')}
