-- Append one attempt's outcome to the job's bounded history (JSON array). A worker's own write (complete,
-- fail) also records its lease token and what followed ('completed', 'retry:<run_at>', 'errored',
-- 'canceled'), so the same write retried after a lost answer gets the same answer (see acked()).
-- A caller that read the record's history and attempt passes them (`f`, HMGET order) and `fields`, the
-- list its own HSET writes: the history is added to it instead of written here.
-- uses: none
local function record_attempt(key, outcome, err, token, after, f, fields)
  if f == nil then f = redis.call('HMGET', key, 'history', 'attempt') end
  local raw = f[1]
  local hist = (raw and raw ~= '') and cjson.decode(raw) or {}
  hist[#hist + 1] = {attempt = tonumber(f[2]) or 0, at = NOW,
                     outcome = outcome, error = err, token = token, after = after}
  while #hist > 20 do table.remove(hist, 1) end
  if fields then
    fields[#fields + 1] = 'history'
    fields[#fields + 1] = cjson.encode(hist)
  else
    redis.call('HSET', key, 'history', cjson.encode(hist))
  end
end
