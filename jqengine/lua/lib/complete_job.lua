-- A worker's write that a running attempt succeeded (complete.lua; settle.lua and settle_claim.lua through
-- settle_jobs): checked against its attempt and token, idempotent (the same write sent again after a lost
-- answer gets the first answer again). Returns 'ok' | 'stale' | 'missing' and the jobs it made ready (the
-- caller wakes workers for those, once per script call). Keeps an optional small result (none when the
-- kind has ignore_result), frees the kind slot and exclusivity value, leaves the record as the dedup marker.
-- uses: acked, finish, jkey, owned, record_attempt, release_excl, release_slot
local function complete_job(id, attempt, token, result)
  local key = jkey(id)
  local own = owned(key, attempt, token)
  if own == 'missing' then return 'missing', 0 end
  if own == 'stale' then
    if acked(key, attempt, token) == 'completed' then return 'ok', 0 end
    return 'stale', 0
  end
  redis.call('ZREM', RUNNING, id)
  local freed = release_slot(key)
  if result ~= '' and redis.call('HGET', KINDS, redis.call('HGET', key, 'kind') .. '|noresult') ~= '1' then
    redis.call('HSET', key, 'result', result)
  end
  record_attempt(key, 'completed', nil, token, 'completed')
  finish(id, key, 'completed', nil)
  return 'ok', freed + release_excl(id, key)
end
