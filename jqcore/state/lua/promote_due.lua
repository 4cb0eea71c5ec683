#!lua flags=allow-oom
-- promote_due: delayed jobs whose run_at has come become pending (or wait behind their exclusivity
-- value). Never early: only run_at <= now. Any number of schedulers may run this at once.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] limit
-- Returns: {promoted, next_run_at or -1}
local due = redis.call('ZRANGEBYSCORE', DELAYED, '-inf', NOW, 'LIMIT', 0, tonumber(ARGV[2]))
local ready = 0
for _, id in ipairs(due) do
  redis.call('ZREM', DELAYED, id)
  local key = jkey(id)
  if redis.call('EXISTS', key) == 1 then
    ready = ready + admit(id, key)
    touch(key)
  end
end
wake(ready)
local nxt = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
return {#due, tonumber(nxt[2] or '-1')}
