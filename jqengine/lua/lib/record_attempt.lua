-- Append one attempt's outcome to the job's bounded history (JSON array). A worker's own write (complete,
-- fail) also records its lease token and what followed ('completed', 'retry:<run_at>', 'errored',
-- 'canceled'), so the same write retried after a lost answer gets the same answer (see acked()).
-- A caller that read the record's history and attempt passes them (`f`, HMGET order) and `fields`, the
-- list its own HSET writes: the history is added to it instead of written here.
-- A first entry (most jobs: one attempt) is written as text, not decoded and encoded by cjson: the outcome
-- and what followed are names of ours, the numbers integers (istr).
-- uses: istr, snum
local function record_attempt(key, outcome, err, token, after, f, fields)
  if f == nil then f = redis.call('HMGET', key, 'history', 'attempt') end
  local raw, encoded = f[1], nil
  if raw and raw ~= '' then
    local hist = cjson.decode(raw)
    hist[#hist + 1] = {attempt = snum(f[2]) or 0, at = NOW,
                       outcome = outcome, error = err, token = token, after = after}
    while #hist > 20 do table.remove(hist, 1) end
    encoded = cjson.encode(hist)
  else
    encoded = '[{"attempt":' .. istr(snum(f[2]) or 0) .. ',"at":' .. istr(NOW) .. ',"outcome":"' .. outcome .. '"'
      .. (err and (',"error":' .. cjson.encode(err)) or '') .. (token and (',"token":' .. cjson.encode(token)) or '')
      .. (after and (',"after":"' .. after .. '"') or '') .. '}]'
  end
  if fields then
    fields[#fields + 1] = 'history'
    fields[#fields + 1] = encoded
  else
    redis.call('HSET', key, 'history', encoded)
  end
end
