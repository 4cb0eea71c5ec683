#!lua flags=allow-oom
-- dead_retry: give errored (dead-lettered) jobs a fresh set of attempts; they become pending again.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] limit  then ids (none = the oldest dead jobs up to limit)
-- Returns: number of jobs retried.
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then ids = redis.call('ZRANGE', k('dead'), 0, tonumber(ARGV[2]) - 1) end
local ready, n = 0, 0
for _, id in ipairs(ids) do
  local key = jkey(id)
  if redis.call('ZREM', k('dead'), id) == 1 and redis.call('HGET', key, 'state') == 'errored' then
    redis.call('ZREM', DONE, id)
    redis.call('HSET', key, 'attempt', 0)
    redis.call('HDEL', key, 'finished_at', 'reason', 'cancel')
    ready = ready + admit(id, key)
    touch(key)
    n = n + 1
  end
end
if n > 0 then stat('dead_retried', n) end
wake(ready)
return n
