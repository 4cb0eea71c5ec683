#!lua flags=allow-oom
-- reap_expired: running jobs whose lease deadline passed (a crashed or stuck worker). at_least_once:
-- pending again (the attempt stays spent; out of attempts => errored). at_most_once: errored, never
-- handed out twice. Safe with any number of reapers at once.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  [2] limit
-- Returns: {reaped, next_deadline or -1}
local expired = redis.call('ZRANGEBYSCORE', RUNNING, '-inf', '(' .. NOW, 'LIMIT', 0, tonumber(ARGV[2]))
local freed = 0
for _, id in ipairs(expired) do
  redis.call('ZREM', RUNNING, id)
  local key = jkey(id)
  if redis.call('EXISTS', key) == 1 then
    freed = freed + release_slot(key)
    record_attempt(key, 'lease_expired', 'lease expired')
    local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
    local delivery = redis.call('HGET', k('kinds'), f[3] .. '|delivery')
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
      to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')))
      touch(key)
      freed = freed + 1
    end
    stat('reaped')
  end
end
wake(freed)
local nxt = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
return {#expired, tonumber(nxt[2] or '-1')}
