-- Append one attempt's outcome to the job's bounded history (JSON array). A worker's own write (complete,
-- fail) also records its lease token and what followed ('completed', 'retry:<run_at>', 'errored',
-- 'canceled'), so the same write retried after a lost answer gets the same answer (see acked()).
-- uses: none
local function record_attempt(key, outcome, err, token, after)
  local f = redis.call('HMGET', key, 'history', 'attempt')
  local raw = f[1]
  local hist = (raw and raw ~= '') and cjson.decode(raw) or {}
  hist[#hist + 1] = {attempt = tonumber(f[2]) or 0, at = NOW,
                     outcome = outcome, error = err, token = token, after = after}
  while #hist > 20 do table.remove(hist, 1) end
  redis.call('HSET', key, 'history', cjson.encode(hist))
end
