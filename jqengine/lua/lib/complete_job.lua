-- A worker's write that a running attempt succeeded (complete.lua; settle.lua and settle_claim.lua through
-- settle_jobs): checked against its attempt and token, idempotent (the same write sent again after a lost
-- answer gets the first answer again). Returns 'ok' | 'stale' | 'missing' and the jobs it made ready (the
-- caller wakes workers for those, once per script call). Keeps an optional small result (none when the
-- kind has ignore_result), frees the kind slot and exclusivity value, leaves the record as the dedup marker.
-- The record is read once (one HMGET) and written once (one HSET). `ended`: lists the
-- caller writes to RUNNING and DONE itself, for many jobs at once (settle_jobs; see finish).
-- uses: acked, finish, jkey, owned, record_attempt, release_excl, release_slot
local keeps_result = {}  -- kind -> false when it has ignore_result, read once per call
local function complete_job(id, attempt, token, result, ended)
  local key = jkey(id)
  local r = redis.call('HMGET', key, 'kind', 'attempt', 'worker', 'state', 'version', 'token', 'fairrun', 'excl',
    'history', 'graph', 'parent')
  local own = owned(key, attempt, token, r[4], r[2], r[6])
  if own == 'missing' then return 'missing', 0 end
  if own == 'stale' then
    if acked(key, attempt, token, r[9]) == 'completed' then return 'ok', 0 end
    return 'stale', 0
  end
  if ended then ended.running[#ended.running + 1] = id else redis.call('ZREM', RUNNING, id) end
  local freed = release_slot(key, r[1], r[7])
  local fields = {}
  if result ~= '' then
    local keep = keeps_result[r[1]]
    if keep == nil then
      keep = redis.call('HGET', KINDS, r[1] .. '|noresult') ~= '1'
      keeps_result[r[1]] = keep
    end
    if keep then fields = {'result', result} end
  end
  record_attempt(key, 'completed', nil, token, 'completed', {r[9], r[2]}, fields)
  finish(id, key, 'completed', nil, nil, r, fields, ended)
  return 'ok', freed + release_excl(id, key, r[8])
end
