#!lua flags=allow-oom
-- complete: a running job succeeded. Keeps an optional small result for the retention period, frees the
-- job's kind slot and exclusivity value (waking the next job), and leaves a dedup marker (the job record
-- itself, until GC). Idempotent: the same (attempt, token) sent again after a lost answer is answered
-- {1} again and changes nothing.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] id  [3] attempt  [4] token  [5] result ('' = none)
-- Returns: {1} done (now or by this same write before) | {0} stale token/attempt | {-1} no such job.
local id, attempt, token, result = ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local key = jkey(id)
local own = owned(key, attempt, token)
if own == 'missing' then return {-1} end
if own == 'stale' then
  if acked(key, attempt, token) == 'completed' then return {1} end
  return {0}
end
redis.call('ZREM', RUNNING, id)
local freed = release_slot(key)
if result ~= '' then redis.call('HSET', key, 'result', result) end
record_attempt(key, 'completed', nil, token, 'completed')
finish(id, key, 'completed', nil)
freed = freed + release_excl(id, key)
wake(freed)
return {1}
