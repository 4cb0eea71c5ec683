-- Hand-off claims: a worker pool whose claim came back short registers in WAITERS (waiter id ->
-- "slots|lease_ms|deadline|token prefix|worker", see claim.lua) and blocks on its inbox list (derived
-- inbox:<waiter>) and the wake list. A transition that made jobs ready calls this first: each live waiter
-- gets up to its slots jobs claimed for it here, leased like any claim, pushed to its inbox as one JSON
-- array (id, envelope, attempt, token, deadline, ...): its blocking pop returns the jobs themselves. A
-- waiter handed fewer than its slots stays registered for the rest until its deadline, last in turn (the
-- waiters take turns), so a pool at a trickle pops job after job without a claim call between (it counts
-- its slots down as this does); its tokens name the slots it had (unique within a registration). A
-- waiter given its slots is consumed. A pool that dies before running them loses nothing: the leases
-- expire and the reaper hands the jobs out again. Waiters past their deadline (a pool gone without
-- deregistering) are dropped. Returns the jobs handed and the jobs made ready on the way (the caller
-- wakes workers for those).
-- uses: cfg, claim_from, k
local function hand_off()
  if redis.call('HLEN', WAITERS) == 0 or cfg('paused', '0') == '1' then return 0, 0 end
  local all = redis.call('HGETALL', WAITERS)
  local handed, freed = 0, 0
  for i = 1, #all, 2 do
    if redis.call('ZCARD', READY) == 0 then break end
    local waiter = all[i]
    local slots, lease, deadline, prefix, worker = string.match(all[i + 1], '^(%d+)|(%d+)|(%d+)|([^|]*)|(.*)$')
    redis.call('HDEL', WAITERS, waiter)
    if slots and tonumber(deadline) >= NOW then
      local out, n = {}, tonumber(slots)
      local claimed, more = claim_from(READY, n, tonumber(lease), prefix .. slots, worker, nil, out)
      freed = freed + more
      if claimed > 0 then
        local inbox = k('inbox:' .. waiter)
        redis.call('RPUSH', inbox, cjson.encode(out))
        redis.call('PEXPIRE', inbox, tonumber(deadline) - NOW + 600000)
        handed = handed + claimed
        if claimed < n then
          redis.call('HSET', WAITERS, waiter,
            (n - claimed) .. '|' .. lease .. '|' .. deadline .. '|' .. prefix .. '|' .. worker)
        end
      else
        redis.call('HSET', WAITERS, waiter, all[i + 1])  -- nothing it may run (kind limits): keep waiting
      end
    end
  end
  return handed, freed
end
