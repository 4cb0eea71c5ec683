#!lua flags=allow-oom
-- gc: remove terminal jobs whose retention has passed (their dedup window closes with them).
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] limit
-- Returns: number of jobs removed.
local gone = redis.call('ZRANGEBYSCORE', DONE, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(gone) do
  redis.call('DEL', jkey(id))
  redis.call('ZREM', DONE, id)
  redis.call('ZREM', k('dead'), id)
end
return #gone
