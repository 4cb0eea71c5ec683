#!lua flags=allow-oom
-- forget: delete finished jobs now (completed, errored, canceled, expired), closing their dedup window
-- early so the same ids can be enqueued again (`jobq replay --force`). A job that is not finished
-- (pending, delayed, parked, running) is left alone: forgetting it would let a replay run it twice.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  then ids
-- Returns: one outcome per id: 'forgotten' | 'active' | 'missing'.
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = jkey(id)
  local state = redis.call('HGET', key, 'state')
  if state == false then
    out[#out + 1] = 'missing'
  elseif state == 'completed' or state == 'errored' or state == 'canceled' or state == 'expired' then
    redis.call('DEL', key)
    redis.call('ZREM', DONE, id)
    redis.call('ZREM', k('dead'), id)
    stat('forgotten')
    out[#out + 1] = 'forgotten'
  else
    out[#out + 1] = 'active'
  end
end
return out
