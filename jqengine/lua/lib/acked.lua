-- The recorded outcome of a worker write made by this attempt and token ('completed', 'retry:<run_at>',
-- 'errored', 'canceled'), or nil when that pair never wrote one (a stale or foreign pair). `raw`: the
-- record's history field when the caller read it (false: none), else read here.
-- uses: none
local function acked(key, attempt, token, raw)
  if raw == nil then raw = redis.call('HGET', key, 'history') end
  if not raw or raw == '' then return nil end
  local hist = cjson.decode(raw)
  for i = #hist, 1, -1 do
    local h = hist[i]
    if h.token == token and tostring(h.attempt) == attempt and h.after then return h.after end
  end
  return nil
end
