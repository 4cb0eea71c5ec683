#!lua flags=allow-oom
-- configure_queue: set queue configuration fields (validated in Python) — mode, excl_key, lease_ms,
-- max_attempts, filter_keys, paused, retention_ms, dead_retention_ms. Resuming wakes waiting workers.
-- KEYS[1] ready    ZSET pending jobs claimable now, score = priority (lower first)
-- KEYS[2] config   HASH queue configuration (jqengine.models.QueueConfig), created_at, switches
-- KEYS[3] wake     LIST wake tokens for waiting workers (at most 64)
-- derived: none
-- ARGV: [1] now  then field, value pairs ('' value = back to the default).
-- returns: 1 when this call created the queue's configuration (a queue new to Redis, or Redis lost it), else 0.
-- uses: wake
local created = redis.call('HSETNX', CONFIG, 'created_at', NOW)
local resumed = false
for i = 2, #ARGV, 2 do
  local field, value = ARGV[i], ARGV[i + 1]
  if field == 'paused' and value ~= '1' and redis.call('HGET', CONFIG, 'paused') == '1' then resumed = true end
  if value == '' then redis.call('HDEL', CONFIG, field) else redis.call('HSET', CONFIG, field, value) end
end
if resumed then wake(redis.call('ZCARD', READY)) end
return created
