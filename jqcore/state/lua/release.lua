#!lua flags=allow-oom
-- release: a worker gives running jobs back (graceful shutdown). The attempt is refunded and the job is
-- pending again, first in line by its priority; an at_most_once job that had already started is errored
-- instead, because it must never be handed out twice.
-- KEYS: standard (_lib.lua).
-- ARGV: [1] now  then quadruples id, attempt, token, started (0|1).
-- Returns one code per job: 1 released | 2 errored (at_most_once) | 0 stale | -1 no such job.
local out, freed = {}, 0
for i = 2, #ARGV, 4 do
  local id, attempt, token, started = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3] == '1'
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then
    out[#out + 1] = -1
  elseif own == 'stale' then
    out[#out + 1] = 0
  else
    redis.call('ZREM', RUNNING, id)
    freed = freed + release_slot(key)
    local kind = redis.call('HGET', key, 'kind')
    if started and redis.call('HGET', k('kinds'), kind .. '|delivery') == 'at_most_once' then
      record_attempt(key, 'released', 'released after it started (at_most_once)')
      finish(id, key, 'errored', 'released after it started (at_most_once)')
      freed = freed + release_excl(id, key)
      out[#out + 1] = 2
    else
      record_attempt(key, 'released', nil)
      redis.call('HINCRBY', key, 'attempt', -1)
      redis.call('HDEL', key, 'token')
      to_ready(id, key, tonumber(redis.call('HGET', key, 'prio')))
      touch(key)
      freed = freed + 1
      out[#out + 1] = 1
    end
  end
end
wake(freed)
return out
