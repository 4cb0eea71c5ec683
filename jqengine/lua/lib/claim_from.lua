-- Claim up to n jobs from src (READY, or a filter index: see `scan`) for `worker`: lowest priority value
-- first, each with a lease (lease_arg, 0 = the job's own lease_ms, else the queue's) and the token
-- <token_prefix>:<i>; every claim spends an attempt. Jobs met on the way whose expires_at passed become
-- 'expired'; jobs whose kind is at its concurrency limit are parked. Appends id, envelope, attempt,
-- token, deadline per claimed job to `out`. Returns claimed, freed (jobs made ready on the way: a
-- released exclusivity value). Stats: claimed, wait_ms (summed start latency).
-- A visit budget bounds every call: n * 4 + 32 jobs met. `scan` (a filtered claim, claim.lua) is a table
-- {others = the other pairs' index keys a job must also be in, start = the rank in src to read from,
-- reads = index entries to read at most}; entries not in every other index are passed over without
-- opening the job (one ZMSCORE per other index per chunk of 64). On return scan.next is the rank of the
-- first entry not read, scan.last the last entry read that stayed in src (nil: none), scan.done true
-- when src was read to its end.
-- uses: cfgnum, fair_asleep, fair_full, fair_round, fair_take, fair_wake, fairness, finish, from_ready, istr,
--       jkey, k, kind_limit, release_excl, server_now, set_state, snum, stat, switched, tally, transit,
--       wake_scheduler
local function claim_from(src, n, lease_arg, token_prefix, worker, scan, out)
  local default_lease = cfgnum('lease_ms', 30000)
  local claimed, scanned, offset, freed, waited = 0, 0, 0, 0, 0
  local before = redis.call('ZRANGE', RUNNING, 0, 0, 'WITHSCORES')
  local earliest = tonumber(before[2] or '-1')
  local new_earliest = nil
  local fc = fairness()
  local fair = fc.key ~= ''
  local started = {}  -- limited kind -> jobs claimed by this call: KINDRUN counts them once, at the end
  -- Jobs taken out of READY and leases given, written with one ZREM / ZADD a chunk (at most 500 jobs)
  local taken, leased = {}, {}
  local function flush()
    if #taken > 0 then redis.call('ZREM', READY, unpack(taken)) taken = {} end
    if #leased > 0 then redis.call('ZADD', RUNNING, unpack(leased)) leased = {} end
  end
  if fair and fc.rated then fair_wake(fc) end

  -- One job met on the way: claimed, or moved out of the ready set (gone, expired, switched, parked);
  -- true when it stays where it is (filtered out, or its fair value is at its limit).
  local function visit(id)
    local key = jkey(id)
    local f = redis.call('HMGET', key, 'kind', 'expires_at', 'prio', 'lease_ms', 'attempt', 'enqueued_at', 'run_at',
      'fair', 'idx', 'env', 'state', 'version')
    if f[1] == false then
      redis.call('ZREM', src, id)
      redis.call('ZREM', READY, id)
      return false
    end
    if fair and f[8] and (fair_full(f[8], fc) or fair_asleep(f[8], fc)) then
      redis.call('ZREM', FAIRRING, f[8])  -- it enters again when one of its jobs finishes / it wakes
      return true
    end
    from_ready(id, key, f[9], f[8], taken)
    local kind, expires = f[1], tonumber(f[2])
    local limit = kind_limit(kind)
    local sw = switched(key, kind)
    if expires and expires <= NOW then
      finish(id, key, 'expired', 'expires_at passed before it ran')
      freed = freed + release_excl(id, key)
    elseif sw then
      if sw.action == 'park' then
        redis.call('ZADD', k('switched:' .. sw.name), tonumber(f[3]), id)
        redis.call('HSET', key, 'switch', sw.name)
        set_state(id, key, 'parked', {message = 'kill switch ' .. sw.name})
        redis.call('HINCRBY', COUNTS, 'blocked', 1)
      else
        finish(id, key, 'errored', 'kill switch ' .. sw.name)
        freed = freed + release_excl(id, key)
      end
    elseif limit and tonumber(redis.call('HGET', KINDRUN, kind) or '0') + (started[kind] or 0) >= limit then
      redis.call('ZADD', k('parked:' .. kind), tonumber(f[3]), id)
      set_state(id, key, 'parked')
      redis.call('HINCRBY', COUNTS, 'blocked', 1)
    else
      local lease = lease_arg
      if lease == 0 then lease = tonumber(f[4]) or default_lease end
      local deadline = NOW + lease
      local attempt = snum(f[5]) + 1
      local token = token_prefix .. ':' .. claimed
      transit(id, key, {kind, attempt, worker, f[11], f[12]}, 'running', nil, {'attempt', istr(attempt),
        'token', token, 'lease_deadline', istr(deadline), 'started_at', istr(math.max(NOW, server_now())),
        'worker', worker})
      leased[#leased + 1] = istr(deadline)
      leased[#leased + 1] = id
      if #leased >= 1000 then flush() end
      if limit then started[kind] = (started[kind] or 0) + 1 else tally(KINDRUN, kind, 1) end
      if fair and f[8] then  -- the ring loop below charges the value's pass
        if fc.limits[f[8]] then  -- a limited value counts its running jobs (release_slot gives back)
          redis.call('HSET', key, 'fairrun', f[8])
          redis.call('HINCRBY', FAIRRUN, f[8], 1)
          if fair_full(f[8], fc) then redis.call('ZREM', FAIRRING, f[8]) end
        end
        if fc.rated then fair_take(f[8], fc) end
      end
      claimed = claimed + 1
      local since = math.max(tonumber(f[6]) or NOW, tonumber(f[7]) or 0)
      if since < NOW then waited = waited + (NOW - since) end
      if new_earliest == nil or deadline < new_earliest then new_earliest = deadline end
      out[#out + 1] = id
      out[#out + 1] = f[10]
      out[#out + 1] = attempt
      out[#out + 1] = token
      out[#out + 1] = deadline
    end
    if #taken >= 500 then flush() end
    return false
  end

  if fair and src == READY then  -- round-robin over the ring: the best job of the lowest pass, each time
    while claimed < n and scanned < n * 4 + 32 and fair_round(fc, n - claimed, function(v)
      local ids = redis.call('ZRANGE', k('fair:' .. v), 0, 0)
      if #ids == 0 then return nil end
      scanned = scanned + 1
      local before = claimed
      if visit(ids[1]) then return nil end  -- v is at its limit: out of the ring until a job of it ends
      return claimed > before
    end, function() return claimed < n and scanned < n * 4 + 32 end) do end
    flush()
  end
  -- Priority order: every claim of a plain queue, a filtered claim, and what a fair queue has outside its
  -- ring (jobs enqueued before it had fair_key; a value held at its limit is skipped in place).
  local budget, read = n * 4 + 32, 0
  if scan then offset = scan.start end
  while claimed < n and scanned < budget and (scan == nil or read < scan.reads) do
    local want = n - claimed
    if scan then want = math.min(64, scan.reads - read) end
    local ids = redis.call('ZRANGE', src, offset, offset + want - 1)
    if #ids == 0 then
      if scan then scan.done = true end
      break
    end
    local freed_before = freed
    local passed = {}  -- chunk positions of entries missing from another pair's index
    if scan then
      for _, other in ipairs(scan.others) do
        local got = redis.call('ZMSCORE', other, unpack(ids))
        for i = 1, #ids do
          if not got[i] then passed[i] = true end
        end
      end
    end
    for i, id in ipairs(ids) do
      read = read + 1
      local stays = true
      if not passed[i] then
        scanned = scanned + 1
        stays = visit(id)
      end
      if stays then
        offset = offset + 1
        if scan then scan.last = id end
      end
      if claimed >= n or scanned >= budget then break end
    end
    flush()  -- before the next chunk is read: its ranks count the jobs that stay only
    -- a short chunk read src to its end: a next read would find only the jobs this one made ready
    if scan == nil and #ids < want and freed == freed_before then break end
  end
  if scan then scan.next = offset end
  for kind, c in pairs(started) do redis.call('HINCRBY', KINDRUN, kind, c) end
  if claimed > 0 then
    stat('claimed', claimed)
    if waited > 0 then stat('wait_ms', waited) end
  end
  if new_earliest and (earliest < 0 or new_earliest < earliest) then wake_scheduler(new_earliest) end
  return claimed, freed
end
