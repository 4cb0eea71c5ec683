-- A worker's write that a running attempt failed (fail.lua; settle.lua and settle_claim.lua through
-- settle_jobs): checked against its attempt and token, idempotent (the same write sent again after a lost
-- answer gets the first answer again). Returns 'retry' | 'errored' | 'canceled' | 'stale' | 'missing', the
-- jobs it made ready (the caller wakes workers for those, once per script call) and the retry's run_at.
-- Retry after `delay` ms (the job stays its exclusivity value's head), or errored (the dead-letter list)
-- when attempts are used up, the failure is permanent or the kind is at_most_once; a cancel requested
-- meanwhile wins.
-- uses: acked, failure, finish, jkey, owned, record_attempt, release_excl, release_slot, set_state, stat,
--       wake_scheduler
local function fail_job(id, attempt, token, err, delay, permanent)
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then return 'missing', 0, 0 end
  if own == 'stale' then
    local before = acked(key, attempt, token)
    if before == nil or before == 'completed' then return 'stale', 0, 0 end
    local sep = string.find(before, ':', 1, true)
    if sep then return 'retry', 0, tonumber(string.sub(before, sep + 1)) end
    if before == 'errored' then return 'errored', 0, 0 end
    return 'canceled', 0, 0
  end
  redis.call('ZREM', RUNNING, id)
  local freed = release_slot(key)
  redis.call('HSET', key, 'last_error', err)
  local f = redis.call('HMGET', key, 'attempt', 'max_attempts', 'kind', 'cancel')
  local delivery = redis.call('HGET', KINDS, f[3] .. '|delivery')
  if f[4] == '1' then
    record_attempt(key, 'failed', err, token, 'canceled')
    finish(id, key, 'canceled', 'canceled while running')
    return 'canceled', freed + release_excl(id, key), 0
  end
  if permanent or delivery == 'at_most_once' or tonumber(f[1]) >= tonumber(f[2]) then
    local why = permanent and 'permanent failure' or (delivery == 'at_most_once' and 'failed (at_most_once)'
      or 'attempts exhausted')
    record_attempt(key, 'failed', err, token, 'errored')
    finish(id, key, 'errored', why, failure(err))
    return 'errored', freed + release_excl(id, key), 0
  end
  local run_at = NOW + delay
  record_attempt(key, 'failed', err, token, 'retry:' .. run_at)
  local first = redis.call('ZRANGE', DELAYED, 0, 0, 'WITHSCORES')
  redis.call('ZADD', DELAYED, run_at, id)
  redis.call('HSET', key, 'run_at', run_at)
  redis.call('HDEL', key, 'token')
  local e = failure(err)
  e.run_at = run_at
  set_state(id, key, 'delayed', e)
  stat('retried')
  if first[2] == nil or run_at < tonumber(first[2]) then wake_scheduler(run_at) end
  return 'retry', freed, run_at
end
