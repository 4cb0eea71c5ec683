-- The queue's fairness options, read once per call: {key = fair_key ('' = none), weights, limits, rates,
-- rated (a value has a rate)}.
-- Fairness (queue option fair_key, a meta key such as 'tenant'): a claim deals jobs round-robin across
-- the key's values, weighted (stride scheduling), instead of in one priority order. Each value's ready
-- jobs are also in fair:<value> (score = priority); FAIRRING holds the values with ready jobs, score =
-- the value's pass: a claim serves the value with the lowest pass and adds 1e6 / weight to it. A value
-- that gets ready jobs again enters at the lowest pass in the ring (served within a round, no credit
-- saved up while idle). FAIRRUN counts the running jobs of each value that has a fair_limits entry
-- (from the claims after the limit was set); a value at its limit leaves the ring until one of its jobs
-- finishes. A value with a fair_rates entry (jobs/s) is also held to its rate (fair_take). Jobs without
-- the key share the value ''. A job's value is fixed when it is enqueued (field 'fair'; taken from its
-- envelope when it has none). O(log n) a claim.
-- uses: cfg
local fair_conf = nil
local function fairness()
  if fair_conf == nil then
    fair_conf = {key = cfg('fair_key', '')}
    if fair_conf.key ~= '' then
      local w, l, r = cfg('fair_weights', ''), cfg('fair_limits', ''), cfg('fair_rates', '')
      fair_conf.weights = (w ~= '') and cjson.decode(w) or {}
      fair_conf.limits = (l ~= '') and cjson.decode(l) or {}
      fair_conf.rates = (r ~= '') and cjson.decode(r) or {}
      fair_conf.rated = r ~= '' and r ~= '{}'
    end
  end
  return fair_conf
end
